"""Cross-view training (Clark, Luong, Manning and Le 2018, "Semi-Supervised Sequence Modeling with Cross-View
Training", EMNLP) for a two-layer BiLSTM tagger on CoNLL-2003 as a finetuning job: ``finetune.job = "cvt"``, its
settings in ``[cvt]`` (``config.py``). Labelled minibatches train the primary prediction module; unlabelled
minibatches of raw text (``cvt.unlabelled``) train four auxiliary modules on restricted views of the first BiLSTM
layer to match the primary module's predictions (``model.py``, ``objective.py``); the job (``job.py``) runs the
one finetuning stage and keeps the best model by eng.testa F1 in ``<output_dir>/finetune-cvt/best``."""
from __future__ import annotations

from ptm_jax.jobs.cvt.config import CvtConfig
from ptm_jax.jobs.registry import Job, register
from ptm_jax.plugins import lazy

JOB = register(Job(
    name="cvt",
    run=lazy("ptm_jax.jobs.cvt.job", "finetune_cvt"),
    load_model=lazy("ptm_jax.jobs.cvt.job", "load_cvt_model"),
    model_marker="cvt_model.json",
    config=CvtConfig,
    description="cross-view training of a BiLSTM tagger (CoNLL-2003) on labelled and unlabelled sentences",
))
