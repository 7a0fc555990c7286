"""The finetuning stage: pretrained encoder + task head, trained by the same loop, best model kept by metric.

Steps: load the pretrained weights (a run, a params directory or a Hugging Face folder: one loader,
``ptm_jax.export.params.load_params``) -> read the task -> build its objective -> ``fit`` with BERT's
finetuning recipe (AdamW, warmup proportion, linear decay, optional layer-wise lr decay) -> after each
evaluation keep the best parameters by the task's metric in ``<stage>/best`` (a params directory:
``ptm eval --model <stage>/best`` scores it again and writes the prediction files, dev or test split).
"""
from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ptm_jax import config as config_lib
from ptm_jax import fs
from ptm_jax.adapters import registry as adapter_registry
from ptm_jax.config import RunConfig, TrainConfig
from ptm_jax.data.tasks import registry as tasks
from ptm_jax.data.tasks.glue import GLUE_TASKS
from ptm_jax.data.tasks.registry import take_subset
from ptm_jax.errors import ConfigError
from ptm_jax.export.params import load_params, load_tokenizer, save_params
from ptm_jax.objectives.san_classification import SAN_HEAD, SanClassificationObjective
from ptm_jax.parallel.batch_check import check_stage_batches
from ptm_jax.parallel.mesh import make_mesh
from ptm_jax.train.hooks import Hook, Run
from ptm_jax.train.param_groups import (
    DEFAULT_RULES,
    layerwise_decay_rules,
    rules_from_config,
)

GLUE_DIRS = {name: spec.dirname for name, spec in GLUE_TASKS.items() if name != "ax"}
"""The GLUE tasks ``finetune.task`` names -> their folders (``data/tasks/glue.GLUE_TASKS``)."""


def _classifier_objective(model_cfg, fcfg):
    """Sequence classification for the model family (``Family.classifier``: e.g. a pooled [CLS], a decoder's
    input transformation or the final <cls> state)."""
    from ptm_jax.families import registry

    fam = registry.get(model_cfg.family)
    if fcfg.pack_examples and "pack_examples" not in fam.capabilities:
        raise ConfigError(f"finetune.pack_examples=true is not implemented for model.family={model_cfg.family!r}: "
                          "set finetune.pack_examples=false")
    return registry.require(fam, "classifier", "sequence classification finetuning")(fcfg)


def _check_num_labels(model_info: dict | None, spec, task: str) -> None:
    n = (model_info or {}).get("num_labels")
    if n is not None and spec.num_labels is not None and int(n) != spec.num_labels:
        raise ConfigError(f"finetune.task={task}: the model has {n} outputs (its ptm.json num_labels) but "
                          f"{spec.name} has {spec.num_labels} labels; evaluate a model finetuned on {spec.name}")


def build_task(cfg: RunConfig, model_cfg, tokenizer, eval_split: str = "dev", *, train: bool = True,
               model_info: dict | None = None) -> tuple[Any, str]:
    """-> (objective, description of the task). ``eval_split``: 'dev' or 'test' (unlabelled, for submissions).

    ``train=False`` (``ptm eval``): only the evaluation split is read and featurised; what the objective
    would derive from the training split comes from ``model_info`` (the saved model's ptm.json:
    ``label_names``, ``num_labels``) or the task's spec."""
    f = cfg.finetune
    task = tasks.key(f.task)
    if task == "embedded":
        from ptm_jax.data.tasks.embedded_task import DESCRIPTION, embedded_task

        spec, train_rows, dev = embedded_task()
        _check_num_labels(model_info, spec, task)
        train_rows = take_subset(train_rows, f.train_subset, f.subset_seed) if train else None
        return _classifier_objective(model_cfg, f)(model_cfg, spec, train_rows, dev, tokenizer, f), DESCRIPTION
    decl = tasks.get(task, among=tasks.FINETUNE_TASKS + ("consert",))
    if decl.glue:
        from ptm_jax.data.tasks.glue import get_task

        spec = get_task(task)
        _check_num_labels(model_info, spec, task)
        train_rows = tasks.glue_rows(f.data_dir, task, "train") if train else None
        dev = tasks.glue_rows(f.data_dir, task, eval_split)
        counts = f"{len(train_rows)} train / " if train else ""
        desc = f"GLUE {spec.name}: {counts}{len(dev)} {eval_split} examples from {f.data_dir}"
        if train:
            train_rows = take_subset(train_rows, f.train_subset, f.subset_seed)
        if (model_info or {}).get("head") == SAN_HEAD:  # an MT-DNN pair task's best model (mtdnn_answer=san)
            return SanClassificationObjective(model_cfg, spec, train_rows, dev, tokenizer, f, model_info), desc
        return _classifier_objective(model_cfg, f)(model_cfg, spec, train_rows, dev, tokenizer, f), desc
    from ptm_jax.families import registry

    fam = registry.get(model_cfg.family)
    if task not in fam.tasks:
        who = {n: sorted(f.tasks) for n, f in registry.families().items() if task in f.tasks}
        raise ConfigError(f"finetune.task={f.task!r} is not implemented for model.family={model_cfg.family!r} "
                          f"(it supports GLUE and {', '.join(sorted(fam.tasks)) or 'nothing more'}); families "
                          f"that finetune on it: {', '.join(who) or 'none'}")
    return fam.tasks[task](cfg, model_cfg, tokenizer, eval_split, train=train, model_info=model_info)


def finetune_train_config(cfg: RunConfig, num_train: int) -> TrainConfig:
    f = cfg.finetune
    steps = max(1, math.ceil(f.epochs * num_train / f.batch_size))
    per_epoch = max(1, math.ceil(num_train / f.batch_size))
    every = f.eval_every or per_epoch
    return dataclasses.replace(
        cfg.train, batch_size=f.batch_size, steps=steps, learning_rate=f.learning_rate,
        warmup_steps=int(f.warmup_proportion * steps), weight_decay=f.weight_decay, clip_norm=f.clip_norm,
        grad_accum_steps=1, eval_every=every, checkpoint_every=every, log_every=min(cfg.train.log_every, every),
        seed=f.seed, optimizer=f.optimizer, param_groups=[])


def _fit(fresh: Any, value: Any, where: str, strict: bool = False) -> Any:
    """``value`` (pretrained) placed into ``fresh``'s structure. An embedding table with fewer rows than the
    finetuning vocabulary (tokens the task adds, such as GPT's start/delimiter/extract) keeps its pretrained
    rows; the new rows keep their fresh initialisation. Any other shape difference is an error; so is, when
    ``strict``, a tensor the checkpoint lacks (a kept task head must be whole)."""
    if isinstance(fresh, dict):
        if not isinstance(value, dict):
            raise ConfigError(f"pretrained parameter '{where}' is a tensor where the finetuning model has a table")
        missing = [k for k in fresh if k not in value]
        if strict and missing:
            raise ConfigError(f"the checkpoint's '{where}' lacks {', '.join(missing)} (it holds "
                              f"{', '.join(value)}); set finetune.keep_head=false for a fresh head")
        return {k: (_fit(f, value[k], f"{where}/{k}", strict) if k in value else f) for k, f in fresh.items()}
    ref, got = np.shape(fresh), np.shape(value)
    if ref == got:
        return value
    if len(got) == len(ref) == 2 and got[1] == ref[1] and got[0] < ref[0]:
        return np.concatenate([np.asarray(value), np.asarray(fresh)[got[0]:]], axis=0)
    raise ConfigError(f"pretrained parameter '{where}' does not fit the finetuning model: {got} vs {ref}")


def _merge_encoder(pretrained: dict, trunk: str, keep_head: bool = False, where: str = "finetune.init"):
    """Fresh head + pretrained trunk (a pooler missing from the checkpoint stays freshly initialised).
    ``keep_head``: the checkpoint's task head too (finetune.keep_head); it must exist and fit."""

    def merge(fresh):
        fresh = jax.tree.map(lambda x: x, fresh)
        if trunk not in pretrained:
            raise ConfigError(f"the pretrained checkpoint has no '{trunk}' parameters (it holds "
                              f"{', '.join(pretrained)}); pick a {trunk} checkpoint for finetune.init")
        enc = fresh["params"][trunk]
        for key, value in pretrained[trunk].items():
            if key in enc:
                enc[key] = _fit(enc[key], value, key)
        if keep_head:
            head = [k for k in fresh["params"] if k != trunk]
            missing = [k for k in head if k not in pretrained]
            if missing:
                raise ConfigError(f"finetune.keep_head=true but {where} has no '{', '.join(missing)}' head "
                                  f"parameters (it holds {', '.join(pretrained)}); set finetune.keep_head=false "
                                  f"for a fresh head")
            for k in head:
                fresh["params"][k] = _fit(fresh["params"][k], pretrained[k], k, strict=True)
        return fresh

    return merge


class KeepBest(Hook):
    """After each evaluation: when the task's primary metric is the best so far, the parameters go to
    ``<stage>/best`` (a params directory with the tokenizer files) and the step and metrics to ``best.json``.
    A resumed run starts from the best it stored, if ``best/`` was written in full. ``select``: the part of the
    parameters to save (MT-DNN: the encoder and one task's head, ``objectives/multi_task.single_task_params``; an
    adapter: the merged weights). An objective with ``save_beside_best(stage, params, model_cfg, head, extra,
    tokenizer_files)`` writes more beside ``best/`` at the same moment (an adapter's weights alone)."""

    def __init__(self, stage: Path, objective: Any, model_cfg: Any, task: str, tok_info: dict,
                 tok_files: list[Path], select: Callable[[Any], Any] | None = None):
        self.stage, self.objective, self.model_cfg, self.task = stage, objective, model_cfg, task
        self.tok_info, self.tok_files, self.select = tok_info, tok_files, select
        self.file = stage / "best.json"
        self.sign = -1.0 if objective.primary_metric.endswith("loss") else 1.0  # a loss: lower is better
        self.best = {"step": -1, "value": -math.inf, "metrics": {}}
        if self.file.exists() and fs.exists(stage / "best" / "ptm.json") and (
                not fs.is_remote(stage) or fs.is_complete(stage / "best")):  # best/ written in full
            self.best = json.loads(fs.read_text(self.file))

    def on_eval(self, run: Run, metrics: dict[str, float]) -> None:
        value = self.sign * metrics.get(self.objective.primary_metric, float("nan"))
        if not (math.isfinite(value) and value > self.best["value"]):
            return
        # every process: the metrics are the same on all (computed from gathered predictions), and orbax's save
        # inside save_params synchronises all processes
        self.best.update(step=run.step, value=value, metrics=metrics)
        params = run.state.params if self.select is None else self.select(run.state.params)
        extra = {"task": self.task, "step": run.step, "metrics": metrics, "tokenizer": self.tok_info,
                 "label_names": getattr(getattr(self.objective, "spec", None), "labels", None),
                 "num_labels": getattr(self.objective, "num_labels", None),
                 **getattr(self.objective, "extra_info", {})}
        save_params(self.stage / "best", params, self.model_cfg, self.objective.head, overwrite=True, extra=extra,
                    tokenizer_files=self.tok_files)
        beside = getattr(self.objective, "save_beside_best", None)
        if beside is not None:  # more than best/: an adapter's own weights (ptm_jax/adapters)
            beside(self.stage, run.state.params, self.model_cfg, self.objective.head, extra, self.tok_files)
        if jax.process_index() == 0:
            fs.write_text_atomic(self.file, json.dumps(self.best, indent=2))


def finetune(cfg: RunConfig, *, stop_after: int | None = None) -> dict[str, Any]:
    f = cfg.finetune
    check_stage_batches(cfg, ["finetune"])  # every job below trains and evaluates on finetune.batch_size
    if f.task.lower() == "mtdnn":  # several tasks in one job (train/multi_task.py)
        from ptm_jax.train.multi_task import mtdnn

        return mtdnn(cfg, stop_after=stop_after)
    if f.head:  # a classic head on word features (objectives/feature_tasks.py)
        from ptm_jax.objectives.feature_tasks import finetune_features

        return finetune_features(cfg, stop_after=stop_after)
    init = f.init or fs.to_str(fs.path(cfg.output_dir) / "pretrain")
    pretrained, model_cfg, info, tok_dir = load_params(init)
    # architecture from the checkpoint; compute settings (dtype, attention, remat, and the fields a family's config
    # class lists in ``run_settings``: ULMFiT's classifier-stage switches) from this run's config
    keep = ("dtype", "attention_impl", "remat", *getattr(type(model_cfg), "run_settings", ()))
    model_cfg = dataclasses.replace(model_cfg, **{k: getattr(cfg.model, k) for k in keep
                                                  if hasattr(model_cfg, k) and hasattr(cfg.model, k)})
    if f.max_seq_length > getattr(model_cfg, "max_position_embeddings", f.max_seq_length):
        raise ConfigError(f"finetune.max_seq_length={f.max_seq_length} exceeds the pretrained model's "
                          f"max_position_embeddings={model_cfg.max_position_embeddings} ({init}); lower it")
    tokenizer = load_tokenizer(info, tok_dir)
    from ptm_jax.families import registry

    prepare = registry.get(model_cfg.family).prepare_finetune
    if prepare is not None:  # e.g. a vocabulary grown by the task's special tokens
        model_cfg = prepare(model_cfg, tokenizer)
    objective, description = build_task(cfg, model_cfg, tokenizer)
    if getattr(objective, "num_examples", objective.num_train) != objective.num_train:
        description += (f"; packed: {objective.num_examples} training examples in {objective.num_train} rows "
                        f"(batch_size counts rows)")
    tcfg = finetune_train_config(cfg, objective.num_train)
    stage = fs.path(cfg.output_dir) / f"finetune-{f.task.lower()}"
    mesh = make_mesh(cfg.mesh)
    # parameter groups: the model's own (the family's ``param_groups`` for this stage, else the weight-decay mask),
    # layer-wise lr decay, then finetune.param_groups
    own = registry.get(model_cfg.family).param_groups
    param_groups = [*(own(model_cfg, "finetune") if own else DEFAULT_RULES),
                    *rules_from_config(f.param_groups, "finetune.param_groups")]
    if f.layerwise_lr_decay != 1.0:
        param_groups[1:1] = layerwise_decay_rules(f.layerwise_lr_decay, model_cfg.num_layers)
    if f.adapter:  # a parameter-efficient adapter (ptm_jax/adapters) wraps the objective and its groups
        objective, param_groups = adapter_registry.get(f.adapter).wrap(
            config_lib.section(cfg, f.adapter), objective, param_groups, model_cfg=model_cfg,
            trunk=registry.get(model_cfg.family).trunk, pretrained=pretrained)
    tok_info = dict(info.get("tokenizer") or {})
    tok_files = [tok_dir / name for name in tok_info.get("files", [])] if tok_dir else []
    # an objective with a training-only head (ConSERT's NLI classifier) says what the kept model holds
    keep_best = KeepBest(stage, objective, model_cfg, f.task, tok_info, tok_files,
                         select=getattr(objective, "saved_params", None))
    best = keep_best.best

    from ptm_jax.train.loop import fit

    merge = _merge_encoder(pretrained, registry.get(model_cfg.family).trunk, f.keep_head, init)
    result = fit(objective, tcfg, mesh, stage, init_params=merge, param_groups=param_groups,
                 meta={"config": config_lib.to_dict(cfg), "head": objective.head, "task": f.task,
                       "init": str(init)}, stop_after=stop_after, hooks=[keep_best])
    summary = {"stage": "finetune", "task": f.task, "description": description, "step": result.step,
               "steps": tcfg.steps, "preempted": result.preempted, "init": str(init),
               "train": result.train_metrics, "final_eval": result.eval_metrics,
               "best": {"step": best["step"], "metrics": best["metrics"]},
               "primary_metric": objective.primary_metric, "train_rows": objective.num_train,
               "train_examples": getattr(objective, "num_examples", objective.num_train)}
    if jax.process_index() == 0:
        fs.write_text_atomic(stage / "summary.json", json.dumps(summary, indent=2))
    return summary
