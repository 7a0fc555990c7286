"""ULMFiT's stages after the general-domain LM (Howard & Ruder 2018 Sec. 3, Fig. 1) as a finetuning job:
``finetune.job = "ulmfit"``, its settings in ``[ulmfit]`` (``config.py``). ``ptm run`` pretrains the general LM
(stage 1) and runs this job; ``job.py`` runs the target-task LM (stage 2, ``families/ulmfit/pipeline.py``) and the
classifier with gradual unfreezing (stage 3, the task job's stage on ULMFiT's classifier)."""
from __future__ import annotations

from ptm_jax.jobs.registry import Job, register
from ptm_jax.jobs.ulmfit.config import UlmfitJobConfig
from ptm_jax.plugins import lazy

JOB = register(Job(
    name="ulmfit",
    run=lazy("ptm_jax.jobs.ulmfit.job", "run"),
    config=UlmfitJobConfig,
    build=lazy("ptm_jax.train.finetune", "build_task"),
    moved={"data.target_lm_steps": "target_lm_steps"},
    description="ULMFiT: target-task LM finetuning (ulmfit.target_lm_steps), then the classifier (finetune.task)",
))
