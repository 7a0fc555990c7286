"""ConSERT: contrastive sentence embeddings over any encoder family (Yan et al. 2021), as a finetuning job.

``finetune.job = "consert"``; its settings in ``[consert]`` (``config.py``). The training data
(``finetune.data_dir``: sentences, positive pairs or labelled NLI pairs, ``data.py``) and the objective
(``build.py``: ``objectives/contrastive.py``, ``objectives/consert_nli.py``) are built here; the job trains
through the one finetuning stage into ``<output_dir>/finetune-consert`` and keeps the best encoder by STS-B dev
Spearman, which ``ptm eval finetune.job=consert`` scores again.
"""
from __future__ import annotations

from ptm_jax.jobs.consert.config import ConsertConfig
from ptm_jax.jobs.registry import Job, register
from ptm_jax.plugins import lazy

JOB = register(Job(
    name="consert",
    run=lazy("ptm_jax.jobs.consert.build", "run"),
    needs=("embed",),
    config=ConsertConfig,
    build=lazy("ptm_jax.jobs.consert.build", "build_consert"),
    adapters=True,
    moved={"consert_views": "views", "consert_temperature": "temperature", "consert_supervised": "supervised",
           "consert_alpha": "alpha", "eval_data_dir": "eval_data_dir"},
    task_values=("consert",),
    description="ConSERT contrastive sentence embeddings, best encoder by STS-B dev Spearman",
))
