"""ULMFiT (Howard & Ruder 2018) on the AWD-LSTM (Merity et al. 2018) as one family package.

``config.py`` the ``[model]``/``[data]`` sections, ``model.py`` the AWD-LSTM, its LM and its classifier,
``objective.py`` the LM loss with AR/TAR over the variable-BPTT, state-carrying batches of
``data/pretraining/contiguous_rows.py``, ``classification.py`` the concat-pooling classifier, ``hooks.py`` discriminative rates and gradual unfreezing as
parameter groups, ``weights.py`` the import of fastai AWD_LSTM state dicts, ``perplexity.py`` stateful held-out
perplexity, ``pipeline.py`` the target-task LM stage, ``job.py`` the finetuning job ``ulmfit`` (stages 2 and 3:
the target-task LM, then the classifier; ``finetune.job = "ulmfit"``, its ``[ulmfit]`` section in
``job_config.py``). The tokenizer is the word vocabulary (``data/word_vocab.py``). Importing this package registers
the family and its job.
"""
from __future__ import annotations

from typing import Any

from ptm_jax.families.registry import Bench, Family, Finetuning, Inspection, ParamLayout, Pretraining, lazy, register
from ptm_jax.families.ulmfit import hooks
from ptm_jax.families.ulmfit.config import UlmfitConfig, UlmfitDataConfig
from ptm_jax.families.ulmfit.job_config import UlmfitJobConfig
from ptm_jax.jobs.registry import Job
from ptm_jax.jobs.registry import register as register_job


def build_lm(cfg: Any, corpus: Any):
    from ptm_jax.families.ulmfit.objective import AwdLstmLmObjective

    tok = corpus.tokenizer
    return AwdLstmLmObjective(cfg, corpus.train, corpus.eval, eos_id=tok.eos_id, pad_id=tok.pad_id)


FAMILY = register(Family(
    name="ulmfit",
    model_config=UlmfitConfig,
    pretraining=Pretraining(
        objectives={"awd_lstm_lm": build_lm},
        data_config=UlmfitDataConfig,
        tokenizer_kinds=("word",),
        specials=("pad", "eos"),
    ),
    layout=ParamLayout(
        trunk=hooks.TRUNK,
        heads=("language_model", "sequence_classification"),
        infer_head=hooks.infer_head,
        param_groups=hooks.param_groups,
        layer_of=hooks.layer_of,
    ),
    finetuning=Finetuning(
        classifier=lazy("ptm_jax.families.ulmfit.classification", "classifier"),
    ),
    inspection=Inspection(
        perplexity=lazy("ptm_jax.families.ulmfit.perplexity", "perplexity"),
    ),
    bench=Bench(
        flops=hooks.step_flops,
        synthetic_batch=hooks.synthetic_batch,
    ),
    tiny_preset="ulmfit_tiny",
))

JOB = register_job(Job(
    name="ulmfit",
    run=lazy("ptm_jax.families.ulmfit.job", "run"),
    family="ulmfit",
    config=UlmfitJobConfig,
    build=lazy("ptm_jax.train.finetune", "build_task"),
    moved={"data.target_lm_steps": "target_lm_steps"},
    description="ULMFiT: target-task LM finetuning (ulmfit.target_lm_steps), then the classifier (finetune.task)",
))
"""ULMFiT's stages after the general-domain LM (Howard & Ruder 2018 Sec. 3, Fig. 1) as a finetuning job: ``ptm run``
pretrains the general LM (stage 1) and runs it; ``job.py`` runs the target-task LM (stage 2, ``pipeline.py``) and
the classifier with gradual unfreezing (stage 3, the task job's stage on ULMFiT's classifier)."""
