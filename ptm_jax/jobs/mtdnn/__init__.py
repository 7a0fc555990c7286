"""MT-DNN (Liu et al. 2019) as a finetuning job: ``finetune.job = "mtdnn"``, its settings in ``[mtdnn]``
(``config.py``); the job (``job.py``) runs the multi-task stage and the per-task stages through the one
finetuning stage and keeps a best model per task, which ``ptm eval`` reads as a single-task classifier."""
from __future__ import annotations

from ptm_jax.jobs.mtdnn.config import MtdnnConfig
from ptm_jax.jobs.registry import Job, register
from ptm_jax.plugins import lazy

JOB = register(Job(
    name="mtdnn",
    run=lazy("ptm_jax.jobs.mtdnn.job", "mtdnn"),
    needs=("embed",),
    config=MtdnnConfig,
    moved={"tasks": "tasks", "task_weights": "task_weights", "mtdnn_finetune_epochs": "finetune_epochs",
           "ranking_candidates": "ranking_candidates", "mtdnn_answer": "answer", "san_steps": "san_steps",
           "san_step_dropout": "san_step_dropout"},
    task_values=("mtdnn",),
    description="multi-task learning over mtdnn.tasks, then per-task finetuning; a best model per task",
))
