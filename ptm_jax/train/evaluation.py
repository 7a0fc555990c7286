"""`ptm eval`: score a finetuned model on a task split and write the prediction files (no training).

The prediction folder holds the task's files (GLUE submission TSV, SQuAD JSON, ...), ``eval.json`` (metrics)
and ``outputs.npz``: the model's raw outputs (logits, scores) at full precision, one row per evaluated row in
the split's order (the last batch's padding rows at the end)."""
from __future__ import annotations

import io
import json
from typing import Any

import jax
import numpy as np

from ptm_jax import fs
from ptm_jax.config import RunConfig
from ptm_jax.export.params import load_params, load_tokenizer
from ptm_jax.objectives.base import WritesPredictions
from ptm_jax.parallel.distributed import barrier
from ptm_jax.parallel.batch_check import check_stage_batches
from ptm_jax.parallel.mesh import finetune_devices, make_mesh
from ptm_jax.errors import ConfigError
from ptm_jax.jobs import registry as job_registry
from ptm_jax.train.finetune import finetune_train_config
from ptm_jax.train.loop import compile_objective, evaluate


def evaluate_task(cfg: RunConfig, model: str, split: str = "dev", out_dir: str | None = None) -> dict[str, Any]:
    check_stage_batches(cfg, ["finetune"])  # evaluation runs on finetune.eval_batch_size (or batch_size) rows
    marked = [j for j in job_registry.jobs().values() if j.model_marker and fs.exists(fs.path(model) / j.model_marker)]
    job = marked[0] if marked else job_registry.get(cfg.finetune.job)
    if job.load_model is not None:  # a model that is not a params directory: the job restores it
        if not marked:
            raise ConfigError(f"{model}: no {job.model_marker} in it; a kept model of finetune.job={job.name!r} is "
                              f"<run>/finetune-<task>/best, which holds {job.model_marker}")
        cfg, objective, tree, description = job.load_model(cfg, model, split)
    elif job.build is not None:
        params, model_cfg, info, tok_dir = load_params(model)
        job_registry.check_family(job, model_cfg.family)
        tokenizer = load_tokenizer(info, tok_dir)
        # the objective of the job that trained the model (finetune.job: the single task, ConSERT, ...); only the
        # split that is scored is read; label lists come from the saved model's ptm.json (info)
        objective, description = job.build(cfg, model_cfg, tokenizer, eval_split=split, train=False, model_info=info)
        tree = {"params": params}
    else:
        raise ConfigError(f"ptm eval does not read the models of finetune.job={job.name!r}; evaluate a model of a job "
                          "that `ptm eval` scores ("
                          + ", ".join(n for n, j in job_registry.jobs().items() if j.build or j.load_model) + ")")
    tcfg = finetune_train_config(cfg, objective.num_train)
    mesh = make_mesh(cfg.mesh, finetune_devices(cfg))
    compiled = compile_objective(objective, tcfg, mesh)
    placed = jax.device_put(tree, compiled.state_shardings.params)
    metrics, outputs = evaluate(objective, compiled, placed, mesh, tcfg.eval_rows(), return_outputs=True)
    out = fs.path(out_dir or fs.path(model) / f"predictions-{split}")
    files = []
    if jax.process_index() == 0:  # every process holds all predictions (gathered); one writes them
        fs.makedirs(out)
        files = objective.write_predictions(outputs, out, split) if isinstance(objective, WritesPredictions) else []
        raw = io.BytesIO()
        np.savez(raw, **outputs)
        fs.write_bytes_atomic(out / "outputs.npz", raw.getvalue())
    result = {"task": cfg.finetune.task if job.name in ("task", "features") else job.name, "split": split,
              "description": description, "model": str(model), "metrics": metrics,
              "primary_metric": objective.primary_metric,
              "prediction_files": [str(f) for f in files]}
    if jax.process_index() == 0:
        fs.write_text_atomic(out / "eval.json", json.dumps(result, indent=2))
    barrier("ptm_eval_written")  # the files exist when any process returns
    return result
