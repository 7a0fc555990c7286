"""The single-task job (``finetune.job = "task"``, the default): the family's model with a task head finetuned on
``finetune.task`` (a task of ``data/tasks/registry.py``: GLUE, the embedded task, SQuAD, CoNLL-2003, SWAG),
through the one finetuning stage into ``<output_dir>/finetune-<task>``; the objective is
``train/finetune.build_task``. An adapter (``finetune.adapter``) may wrap it.
"""
from __future__ import annotations

from typing import Any

from ptm_jax.jobs.registry import Job, register
from ptm_jax.plugins import lazy


def run(cfg: Any, *, stop_after: int | None = None) -> dict[str, Any]:
    """``Job.run``: :func:`train.finetune.single_task` with ``build_task``."""
    from ptm_jax.train.finetune import build_task, single_task

    return single_task(cfg, build_task, task=cfg.finetune.task, stop_after=stop_after)


JOB = register(Job(
    name="task",
    run=run,
    build=lazy("ptm_jax.train.finetune", "build_task"),
    adapters=True,
    description="one task (finetune.task) with the family's task head",
))
