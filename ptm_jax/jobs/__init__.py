"""Finetuning jobs as plug-ins: one package each, found and picked by ``jobs/registry.py`` (``finetune.job``)."""
