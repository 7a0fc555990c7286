"""The ULMFiT job: the target-task LM (stage 2), then the classifier (stage 3) through the task job's stage.

Howard & Ruder 2018 Sec. 3, Fig. 1; stage 1 (the general-domain LM) is ``ptm run``'s pretraining, or the run
``finetune.init`` names:

2. target-task LM finetuning (``families/ulmfit/pipeline.lm_finetune``): the LM objective, from stage 1's weights,
   on the text of the target task's training sentences for ``ulmfit.target_lm_steps`` steps ->
   ``<output_dir>/lm_finetune`` (0 steps: none, the paper's ablation 'no LM fine-tuning');
3. the classifier (``finetune.task``; ``families/ulmfit/classification.py``) from stage 2's trunk (else stage 1's),
   with the family's discriminative rates and gradual unfreezing and ``train.lr_decay`` ('slanted_triangular')
   -> ``<output_dir>/finetune-<task>``: the task job's stage (``train/finetune.single_task`` with ``build_task``).

Stage 3 refuses to start without a finished stage 2 (a ConfigError). The job's summary (the classifier's, with
stage 2's under 'lm_finetune') is also written to ``<output_dir>/ulmfit_summary.json``.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import jax

from ptm_jax import config_loading as config_lib
from ptm_jax import fs


def general_lm(cfg: Any) -> tuple[Path, int | None]:
    """Stage 1's run folder and the steps it must have finished: ``finetune.init`` (a run's output dir or its
    ``pretrain`` stage; not checked for steps) or this run's ``<output_dir>/pretrain`` (``train.steps``)."""
    if not cfg.finetune.init:
        return fs.path(cfg.output_dir) / "pretrain", cfg.train.steps
    init = fs.path(cfg.finetune.init)
    return (init / "pretrain" if fs.exists(init / "pretrain") else init), None


def run(cfg: Any, *, stop_after: int | None = None) -> dict[str, Any]:
    """``Job.run``: stage 2 (unless ``ulmfit.target_lm_steps`` is 0), then the classifier."""
    from ptm_jax.families.ulmfit import pipeline
    from ptm_jax.train.finetune import build_task, single_task

    steps = config_lib.section(cfg, "ulmfit").target_lm_steps
    out = fs.path(cfg.output_dir)
    first, first_steps = general_lm(cfg)
    init, stage2 = first, None
    if steps and not cfg.finetune.from_scratch:  # from scratch: no weights to carry, stage 2 would be lost
        stage2 = pipeline.lm_finetune(cfg, steps, first=first, first_steps=first_steps, stop_after=stop_after)
        if stage2["preempted"]:
            return {"task": cfg.finetune.task, "lm_finetune": stage2, "preempted": True,
                    "description": f"ULMFiT target-task LM stopped at step {stage2['step']} of {steps}"}
        init = out / "lm_finetune" / "pretrain"
        pipeline._require_finished(init, steps, "the target-task LM (stage 2)")
    stage_cfg = dataclasses.replace(cfg, finetune=dataclasses.replace(cfg.finetune, init=str(init)))
    classifier = single_task(stage_cfg, build_task, task=cfg.finetune.task, stop_after=stop_after)
    summary = {**classifier, "lm_finetune": stage2}
    if jax.process_index() == 0:
        fs.write_text_atomic(out / "ulmfit_summary.json", json.dumps(
            {"lm_finetune": stage2, "classifier": classifier}, indent=2, default=str))
    return summary
