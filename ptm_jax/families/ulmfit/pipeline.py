"""ULMFiT's target-task LM stage (Howard & Ruder 2018 Sec. 3.2, Fig. 1b) and the checks between its stages.

The stages: 1. general-domain LM pretraining (``ptm run``'s ``stages.pretrain`` on ``data.corpus`` ->
``<output_dir>/pretrain``); 2. target-task LM finetuning (:func:`lm_finetune`): the same LM objective, from stage
1's weights, on the text of the target task's training sentences (written once to
``<output_dir>/target_text/train.txt``, one sentence per line, tokenized with stage 1's vocabulary) ->
``<output_dir>/lm_finetune``; 3. the classifier (``families/ulmfit/classification.py``) with the family's
discriminative rates and gradual unfreezing (``hooks.py``). Stages 2 and 3 are the ``ulmfit`` finetuning job
(``families/ulmfit/job.py``: ``finetune.job = "ulmfit"``, ``ulmfit.target_lm_steps``).

Every stage resumes from its checkpoints; a stage refuses to start without a finished one before it
(:func:`_require_finished`, a ConfigError). ``benchmarks/ulmfit_sst2.py`` runs stage 2 and stage 3 with each
technique switched off in turn.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax

from ptm_jax import config_loading as config_lib
from ptm_jax import fs
from ptm_jax.errors import ConfigError
from ptm_jax.jobs import registry as job_registry


def target_text(cfg: Any, out: Path) -> Path:
    """The target task's training sentences as a text file (one per line; the subset ``finetune.train_subset``
    when set, as the classifier sees it)."""
    from ptm_jax.data.tasks import registry as tasks

    f = cfg.finetune
    if not f.data_dir:
        raise ConfigError(f"finetune.task={f.task}: set finetune.data_dir to the GLUE folder for ULMFiT's "
                          "target-task LM stage")
    rows = tasks.take_subset(tasks.read(f.task, f.data_dir, "train")[0], f.train_subset, f.subset_seed)
    path = out / "target_text" / "train.txt"
    if jax.process_index() == 0 and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fs.write_text_atomic(path, "".join(e.text_a.strip() + "\n\n" for e in rows))
    return path


def lm_finetune(cfg: Any, steps: int, *, first: Path | None = None, first_steps: int | None = -1,
                stop_after: int | None = None) -> dict[str, Any]:
    """Stage 2: the LM objective on the target text, from stage 1's weights (same vocabulary). ``first``: stage
    1's folder (default ``<output_dir>/pretrain``), which must have finished ``first_steps`` steps (-1:
    ``train.steps``; None: not checked, a run ``finetune.init`` names)."""
    from ptm_jax.export.params import load_params
    from ptm_jax.objectives.registry import build_objective
    from ptm_jax.parallel.mesh import make_mesh
    from ptm_jax.train.loop import fit
    from ptm_jax.train.stages import prepare_corpus, pretrain_param_groups

    out = fs.path(cfg.output_dir)
    first = out / "pretrain" if first is None else first
    if first_steps is not None:
        _require_finished(first, cfg.train.steps if first_steps == -1 else first_steps,
                          "the general-domain LM (stage 1)")
    pretrained, first_cfg, _, tok_dir = load_params(first)
    job_registry.check_family(job_registry.get("ulmfit"), first_cfg.family)  # a model finetune.init names
    text = target_text(cfg, out)
    vocab = tok_dir / "vocab.tsv" if tok_dir is not None else None
    if vocab is None or not vocab.exists():
        raise ConfigError(f"{first}: no word vocabulary (vocab.tsv) beside the stage-1 LM; stage 2 reads the same "
                          "vocabulary")
    stage_cfg = dataclasses.replace(
        cfg, output_dir=str(out / "lm_finetune"),
        data=dataclasses.replace(cfg.data, corpus=str(text), format="lines", cache_dir="", eval_documents=0),
        tokenizer=dataclasses.replace(cfg.tokenizer, vocab_file=str(vocab)),
        train=dataclasses.replace(cfg.train, steps=steps, eval_every=0, checkpoint_every=steps))
    corpus = prepare_corpus(stage_cfg)
    objective = build_objective(stage_cfg, corpus)
    merge = _lm_merge(pretrained)
    result = fit(objective, stage_cfg.train, make_mesh(cfg.mesh), out / "lm_finetune" / "pretrain",
                 init_params=merge, stop_after=stop_after, param_groups=pretrain_param_groups(stage_cfg),
                 meta={"config": config_lib.to_dict(stage_cfg)})
    return {"stage": "lm_finetune", "step": result.step, "preempted": result.preempted, "text": str(text),
            "train": result.train_metrics}


def _lm_merge(pretrained: dict):
    def merge(fresh):
        import numpy as np

        def put(f, v, where):
            if isinstance(f, dict):
                return {k: put(f[k], v[k], f"{where}/{k}") for k in f}
            if np.shape(f) != np.shape(v):
                raise ConfigError(f"stage-1 parameter {where} has shape {np.shape(v)}, the LM {np.shape(f)}")
            return v

        return {"params": put(fresh["params"], pretrained, "params")}

    return merge


def _require_finished(stage: Path, steps: int, what: str) -> None:
    from ptm_jax.checkpoint import Checkpointer

    ckpt = stage / "checkpoints"
    last = Checkpointer(ckpt, keep=1, async_save=False).latest_step() if fs.exists(ckpt) else None
    if last is None or last < steps:
        raise ConfigError(f"ULMFiT: {what} is not finished ({stage}: "
                          f"{'no checkpoint' if last is None else f'step {last} of {steps}'}); run its stage "
                          "first (the classifier starts from a finished language model)")
