"""Finetuning adapters: parameter-efficient ways to finetune a frozen pretrained model (LoRA, ...).

Each adapter is one package under ``ptm_jax/adapters/`` that registers an :class:`~ptm_jax.adapters.registry.Adapter`
(``registry.py``); ``finetune.adapter`` picks one and its package owns the config section of its name.
"""
