"""`ptm eval`: score a finetuned model on a task split and write the prediction files (no training)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jax

from ptm_jax.config import RunConfig
from ptm_jax.export.params import load_params, load_tokenizer
from ptm_jax.parallel.mesh import make_mesh
from ptm_jax.train.finetune import build_task, finetune_train_config
from ptm_jax.train.loop import compile_objective, evaluate


def evaluate_task(cfg: RunConfig, model: str, split: str = "dev", out_dir: str | None = None) -> dict[str, Any]:
    params, model_cfg, info, tok_dir = load_params(model)
    tokenizer = load_tokenizer(info, tok_dir)
    # only the split that is scored is read; label lists come from the saved model's ptm.json (info)
    objective, description = build_task(cfg, model_cfg, tokenizer, eval_split=split, train=False, model_info=info)
    tcfg = finetune_train_config(cfg, objective.num_train)
    mesh = make_mesh(cfg.mesh)
    compiled = compile_objective(objective, tcfg, mesh)
    placed = jax.device_put({"params": params}, compiled.state_shardings.params)
    metrics, outputs = evaluate(objective, compiled, placed, mesh, tcfg.batch_size, return_outputs=True)
    out = Path(out_dir or Path(model) / f"predictions-{split}")
    out.mkdir(parents=True, exist_ok=True)
    files = objective.write_predictions(outputs, out, split) if hasattr(objective, "write_predictions") else []
    result = {"task": cfg.finetune.task, "split": split, "description": description, "model": str(model),
              "metrics": metrics, "prediction_files": [str(f) for f in files]}
    if jax.process_index() == 0:
        (out / "eval.json").write_text(json.dumps(result, indent=2))
    return result
