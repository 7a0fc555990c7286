"""The MT-DNN job: multi-task training of a shared encoder, then per-task finetuning from it, keeping the best
model per task (Liu et al. 2019 Sec. 4, "the training procedure ... consists of two stages: pretraining and
multi-task learning", followed by task-specific finetuning, Sec. 5.2).

``ptm finetune finetune.job=mtdnn mtdnn.tasks=[rte,mrpc,stsb] --init MODEL --glue-dir GLUE output_dir=OUT``:

1. ``OUT/mtdnn/multitask``: the multi-task stage, ``finetune.epochs`` epochs of the task plan
   (``objectives/multi_task.py``: every step one task's mini-batch, tasks in proportion to their size and
   ``mtdnn.task_weights``), through the one finetuning stage (``train/finetune.run_stage``: ``train/loop.fit``
   with its checkpoints and exact resume). Every evaluation scores every task's dev split.
2. ``OUT/mtdnn/<task>/finetune``: for each task, ``mtdnn.finetune_epochs`` epochs on that task alone,
   starting from the multi-task encoder and the task's multi-task head, linear or SAN (0: no such stage).
3. ``OUT/mtdnn/<task>/best``: the best model of the task over both stages by the task's dev metric
   (``train/finetune.KeepBest``, one per task), saved as a single-task classifier: ``ptm eval --model
   OUT/mtdnn/rte/best --task rte`` scores it again (a SAN task's model: head ``san_classification``, the encoder
   and its answer module, ``models/san.EncoderWithSAN``). ``best.json`` beside it holds its step and metrics;
   ``OUT/mtdnn/summary.json`` the figures of both stages.

The same command resumes: each stage restarts from its latest checkpoint, a finished stage is not rerun.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any

import jax

from ptm_jax import config_loading as config_lib
from ptm_jax import fs
from ptm_jax.config import RunConfig
from ptm_jax.errors import ConfigError
from ptm_jax.objectives.multi_task import (
    MultiTaskObjective,
    read_task,
    single_task_params,
    san_settings,
    task_names,
    task_view,
    task_weights,
)
from ptm_jax.train.finetune import KeepBest, finetune_train_config, run_stage
from ptm_jax.train.param_groups import (
    DEFAULT_RULES,
    layerwise_decay_rules,
    rules_from_config,
)
from ptm_jax.train.pretrained import load_pretrained, merge_encoder


def _stage_config(cfg: RunConfig, epochs: float) -> RunConfig:
    return dataclasses.replace(cfg, finetune=dataclasses.replace(cfg.finetune, epochs=epochs))


def mtdnn(cfg: RunConfig, *, stop_after: int | None = None) -> dict[str, Any]:
    """Runs (or resumes) the job; returns its summary (also written to ``OUT/mtdnn/summary.json``).
    ``stop_after``: stop (with a checkpoint) after this many steps of the current stage."""
    from ptm_jax.families import registry

    f = cfg.finetune
    m = config_lib.section(cfg, "mtdnn")
    names = task_names(m.tasks)
    weights = task_weights(m.task_weights, len(names))
    san_settings(m)  # mtdnn.answer, san_steps, san_step_dropout
    if m.finetune_epochs < 0:
        raise ConfigError(f"mtdnn.finetune_epochs={m.finetune_epochs} must be >= 0 (0: no per-task finetuning)")
    pre = load_pretrained(cfg)
    model_cfg, init = pre.model_cfg, pre.init
    fam = registry.get(model_cfg.family)
    tasks = [read_task(cfg, n, pre.tokenizer) for n in names]
    objective = MultiTaskObjective(model_cfg, tasks, weights, f, m)
    root = fs.path(cfg.output_dir) / ("mtdnn-from-scratch" if f.from_scratch else "mtdnn")  # beside the pretrained
    groups = [*DEFAULT_RULES, *rules_from_config(f.param_groups, "finetune.param_groups")]
    if f.layerwise_lr_decay != 1.0:
        groups[1:1] = layerwise_decay_rules(f.layerwise_lr_decay, model_cfg.num_layers)
    trunk = fam.layout.trunk

    def keeper(t, index):
        return KeepBest(root / t.name, task_view(t, m), model_cfg, t.name, pre.tok_info, pre.tok_files,
                        select=lambda p: single_task_params(p, trunk, index))

    meta = {"config": config_lib.to_dict(cfg), "head": objective.head, "task": "mtdnn", "init": str(init)}
    stage = run_stage(cfg, stage=root / "multitask", objective=objective, task="mtdnn", description="", init=init,
                      init_params=merge_encoder(pre.params, trunk), param_groups=groups, meta=meta,
                      keepers=lambda _: [keeper(t, i) for i, t in enumerate(tasks)], write_summary=False,
                      stop_after=stop_after)
    result, tcfg, keep = stage.result, stage.tcfg, stage.hooks
    summary: dict[str, Any] = {
        "stage": "mtdnn", "task": "mtdnn", "init": str(init), "tasks": names, "task_weights": weights,
        "plan": {t.name: int(k) for t, k in zip(tasks, objective.plan.k)}, "steps": tcfg.steps,
        "step": result.step, "preempted": result.preempted, "multitask": {"final_eval": result.eval_metrics},
        "tasks_detail": {t.name: t.description for t in tasks}, "primary_metric": objective.primary_metric,
        "answers": dict(zip(names, objective.answers)),
    }
    summary["multitask"]["best"] = {t.name: {"step": k.best["step"], t.primary: k.best["metrics"].get(
        f"{t.name}/{t.primary}")} for t, k in zip(tasks, keep)}
    done = result.step >= tcfg.steps
    finetuned: dict[str, Any] = {}
    if done and m.finetune_epochs > 0:
        shared = result.state.params
        for i, t in enumerate(tasks):
            if t.train is None or weights[i] == 0:  # weight 0: left out of training, still evaluated
                continue
            single = MultiTaskObjective(model_cfg, [t], [1.0], f, m, name=f"mtdnn-{t.name}")
            tcfg_t = finetune_train_config(_stage_config(cfg, m.finetune_epochs), single.num_train)
            # keep-best goes on from the multi-task stage's best of the task
            r = run_stage(cfg, stage=root / t.name / "finetune", objective=single, task=t.name, description="",
                          init=init, init_params=_from_multitask(shared, trunk, i), param_groups=groups,
                          tcfg=tcfg_t, meta={**meta, "task": t.name}, keepers=lambda _, t=t: [keeper(t, 0)],
                          write_summary=False, stop_after=stop_after).result
            finetuned[t.name] = {"step": r.step, "steps": tcfg_t.steps, "final_eval": r.eval_metrics}
            if r.step < tcfg_t.steps:
                done = False
                break
    summary["finetune"] = finetuned
    summary["best_per_task"] = {}
    for t in tasks:
        file = root / t.name / "best.json"
        if fs.exists(file):
            b = json.loads(fs.read_text(file))
            summary["best_per_task"][t.name] = {"model": fs.to_str(root / t.name / "best"), "step": b["step"],
                                                t.primary: b["metrics"].get(f"{t.name}/{t.primary}")}
    summary["complete"] = bool(done)
    summary["description"] = _describe(summary)
    if jax.process_index() == 0:
        fs.write_text_atomic(root / "summary.json", json.dumps(summary, indent=2))
    return summary


def _from_multitask(shared: Any, trunk: str, index: int):
    """init_params of a per-task stage: the multi-task encoder and the head of task ``index`` (its one head:
    a linear head or a SAN answer module, whole)."""

    def merge(fresh):
        src = shared["params"]
        out = {"params": {trunk: src[trunk], "head_0": src[f"head_{index}"]}}
        if set(out["params"]) != set(fresh["params"]):
            raise ConfigError(f"the multi-task model has {sorted(src)}, the per-task model {sorted(fresh['params'])}")
        return out

    return merge


def _describe(summary: dict[str, Any]) -> str:
    head = (f"MT-DNN over {', '.join(summary['tasks'])} (batches per epoch {summary['plan']}), "
            f"multi-task step {summary['step']} of {summary['steps']}")
    lines = [head]
    for name, b in summary["best_per_task"].items():
        figures = ", ".join(f"{k}={v:.4f}" for k, v in b.items() if isinstance(v, float))
        lines.append(f"  {name}: best {figures} -> {b['model']}")
    return "\n".join(lines)
