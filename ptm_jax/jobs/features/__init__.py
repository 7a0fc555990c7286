"""Heads over word features as a finetuning job: ``finetune.job = "features"``, its settings in ``[features]``
(``config.py``). A TextCNN / TextRNN / TextRCNN (sentences, pairs) or BiLSTM tagger (CoNLL-2003) over random
embeddings, static vectors, a model's frozen per-layer features or a model finetuned end to end under the head
(``objectives/feature_tasks.py``), trained through the one finetuning stage (``job.py``) into
``<output_dir>/finetune-<task>``."""
from __future__ import annotations

from ptm_jax.jobs.features.config import FeaturesConfig
from ptm_jax.jobs.registry import Job, register
from ptm_jax.plugins import lazy

JOB = register(Job(
    name="features",
    run=lazy("ptm_jax.jobs.features.job", "finetune_features"),
    load_model=lazy("ptm_jax.jobs.features.job", "load_feature_model"),
    model_marker="feature_model.json",
    config=FeaturesConfig,
    moved={"head": "head", "head_hidden": "head_hidden", "head_pool": "head_pool",
           "freeze_embeddings": "freeze_embeddings", "freeze_features": "freeze_features",
           "feature_cache": "feature_cache", "word_init": "word_init", "feature_norm": "feature_norm"},
    description="a classic head (features.head) over word features",
))
