"""The finetuning stage: pretrained encoder + task head, trained by the same loop, best model kept by metric.

``finetune(cfg)`` runs the job ``finetune.job`` names (``ptm_jax/jobs``: the single task, MT-DNN, ConSERT, heads
over word features). Every job trains through :func:`run_stage`: the pretrained weights (a run, a params
directory or a Hugging Face folder: ``train/pretrained.load_pretrained``) -> the job's objective -> ``fit``
with BERT's finetuning recipe (AdamW, warmup proportion, linear decay, optional layer-wise lr decay;
:func:`finetune_train_config`) -> after each evaluation the best parameters by the task's metric in
``<stage>/best`` (:class:`KeepBest`; a params directory: ``ptm eval --model <stage>/best`` scores it again and
writes the prediction files, dev or test split) -> ``<stage>/summary.json``. An adapter (``finetune.adapter``,
``ptm_jax/adapters``) wraps the objective and its parameter groups in the stage, before the keep-best hook.

:func:`build_task` is the single-task job's objective for ``finetune.task`` (a task of
``data/tasks/registry.py``): the family's sequence classifier for GLUE and the embedded task, the family's
builder (``Finetuning.tasks``) for SQuAD, CoNLL-2003 and SWAG.
"""
from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

from ptm_jax import config_loading as config_lib
from ptm_jax import fs
from ptm_jax.adapters import registry as adapter_registry
from ptm_jax.config import RunConfig, TrainConfig
from ptm_jax.data.tasks import registry as tasks
from ptm_jax.data.tasks.glue import GLUE_TASKS
from ptm_jax.data.tasks.registry import take_subset
from ptm_jax.errors import ConfigError
from ptm_jax.export.params import save_params
from ptm_jax.jobs import registry as job_registry
from ptm_jax.objectives.base import PacksExamples, SavesParams
from ptm_jax.objectives.san_classification import SAN_HEAD, SanClassificationObjective
from ptm_jax.parallel.batch_check import check_stage_batches
from ptm_jax.parallel.mesh import finetune_devices, make_mesh
from ptm_jax.train.hooks import Hook, Run
from ptm_jax.train.pretrained import Pretrained, load_pretrained, merge_encoder
from ptm_jax.train.param_groups import (
    DEFAULT_RULES,
    layerwise_decay_rules,
    rules_from_config,
)

GLUE_DIRS = {name: spec.dirname for name, spec in GLUE_TASKS.items() if name != "ax"}
"""The GLUE tasks ``finetune.task`` names -> their folders (``data/tasks/glue.GLUE_TASKS``)."""


def _classifier_objective(cfg: RunConfig, model_cfg):
    """Sequence classification for the model family (``Finetuning.classifier``: e.g. a pooled [CLS], a decoder's
    input transformation or the final <cls> state), with the sections it reads bound (``config.bind_sections``);
    packed rows (``packing.pack_examples``) for a family with the capability 'pack_examples'."""
    from ptm_jax.families import registry

    fam = registry.get(model_cfg.family)
    if config_lib.section(cfg, "packing").pack_examples:
        if "pack_examples" not in fam.capabilities:
            packs = ", ".join(n for n, f in registry.families().items() if "pack_examples" in f.capabilities)
            raise ConfigError(f"packing.pack_examples=true is not implemented for model.family="
                              f"{model_cfg.family!r} (families that pack: {packs}): set packing.pack_examples=false")
        from ptm_jax.objectives.packed_classification import PackedSequenceClassificationObjective

        cls = PackedSequenceClassificationObjective
    else:
        cls = registry.require(fam, "finetuning.classifier", "sequence classification finetuning")(cfg.finetune)
    return config_lib.bind_sections(cls, cfg)


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

        spec = embedded_task()[0]
        _check_num_labels(model_info, spec, task)
        train_rows = take_subset(tasks.read(task, f.data_dir, "train")[0], f.train_subset, f.subset_seed) \
            if train else None
        dev = tasks.read(task, f.data_dir, "dev")[0]
        return _classifier_objective(cfg, model_cfg)(model_cfg, spec, train_rows, dev, tokenizer, f), DESCRIPTION
    decl = tasks.get(task, among=tasks.FINETUNE_TASKS)
    if decl.glue:
        from ptm_jax.data.tasks.glue import get_task

        spec = get_task(task)
        _check_num_labels(model_info, spec, task)
        train_rows = tasks.read(task, f.data_dir, "train")[0] if train else None
        dev = tasks.read(task, f.data_dir, eval_split)[0]
        counts = f"{len(train_rows)} train / " if train else ""
        desc = f"GLUE {spec.name}: {counts}{len(dev)} {eval_split} examples from {f.data_dir}"
        if train:
            train_rows = take_subset(train_rows, f.train_subset, f.subset_seed)
        if (model_info or {}).get("head") == SAN_HEAD:  # an MT-DNN pair task's best model (mtdnn_answer=san)
            return SanClassificationObjective(model_cfg, spec, train_rows, dev, tokenizer, f, model_info,
                                              mcfg=config_lib.section(cfg, "mtdnn")), desc
        return _classifier_objective(cfg, model_cfg)(model_cfg, spec, train_rows, dev, tokenizer, f), desc
    from ptm_jax.families import registry

    fam = registry.get(model_cfg.family)
    if task not in fam.finetuning.tasks:
        who = {n: sorted(f.finetuning.tasks) for n, f in registry.families().items() if task in f.finetuning.tasks}
        raise ConfigError(f"finetune.task={f.task!r} is not implemented for model.family={model_cfg.family!r} "
                          f"(it supports GLUE and {', '.join(sorted(fam.finetuning.tasks)) or 'nothing more'}); "
                          f"families "
                          f"that finetune on it: {', '.join(who) or 'none'}")
    return fam.finetuning.tasks[task](cfg, model_cfg, tokenizer, eval_split, train=train, model_info=model_info)


def finetune_train_config(cfg: RunConfig, num_train: int) -> TrainConfig:
    f = cfg.finetune
    steps = max(1, math.ceil(f.epochs * num_train / f.batch_size))
    per_epoch = max(1, math.ceil(num_train / f.batch_size))
    every = f.eval_every or per_epoch
    return dataclasses.replace(
        cfg.train, batch_size=f.batch_size, steps=steps, learning_rate=f.learning_rate,
        warmup_steps=int(f.warmup_proportion * steps), weight_decay=f.weight_decay, clip_norm=f.clip_norm,
        grad_accum_steps=1, eval_every=every, checkpoint_every=every, log_every=min(cfg.train.log_every, every),
        seed=f.seed, optimizer=f.optimizer, param_groups=[], eval_batch_size=f.eval_batch_size,
        init_from="", lr_decay_power=1.0)  # pretraining's: phase 2's start and LAMB's decay are not finetuning's


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


def stage_param_groups(cfg: RunConfig, model_cfg: Any) -> list:
    """The stage's parameter-group rules: the model's own (the family's ``param_groups`` for this stage, else the
    weight-decay mask), layer-wise lr decay, then ``finetune.param_groups``."""
    from ptm_jax.families import registry

    f = cfg.finetune
    own = registry.get(model_cfg.family).layout.param_groups
    groups = [*(own(model_cfg, "finetune") if own else DEFAULT_RULES),
              *rules_from_config(f.param_groups, "finetune.param_groups")]
    if f.layerwise_lr_decay != 1.0:
        groups[1:1] = layerwise_decay_rules(f.layerwise_lr_decay, model_cfg.num_layers)
    return groups


@dataclasses.dataclass
class StageResult:
    result: Any
    """``train/loop.fit``'s result."""
    summary: dict[str, Any]
    hooks: list
    """The keep-best hooks (their ``best``)."""
    objective: Any
    """The objective trained (an adapter's wrapper when one wrapped it)."""
    tcfg: TrainConfig


def run_stage(cfg: RunConfig, *, stage: Path, objective: Any, task: str, description: str, init: str,
              init_params: Any, param_groups: list, pretrained: Pretrained | None = None,
              keepers: Callable[[Any], list] | None = None, tcfg: TrainConfig | None = None,
              meta: dict | None = None, summary_extra: Callable[[Any], dict] | None = None,
              write_summary: bool = True, stop_after: int | None = None) -> StageResult:
    """The one finetuning stage every job runs through: the train config of ``finetune.*`` (``tcfg``: a job's
    own), an adapter's wrap (``finetune.adapter``, where the job has ``pretrained`` weights), the keep-best hooks
    (``keepers(objective)``; default :class:`KeepBest` into ``<stage>/best``), ``fit`` into ``stage`` and the
    stage's ``summary.json``. ``summary_extra(result)``: the job's own summary fields."""
    from ptm_jax.families import registry
    from ptm_jax.train.loop import fit

    f = cfg.finetune
    tcfg = tcfg or finetune_train_config(cfg, objective.num_train)
    if f.adapter:  # a parameter-efficient adapter (ptm_jax/adapters) wraps the objective and its groups
        if f.from_scratch:
            raise ConfigError(f"finetune.adapter={f.adapter!r} trains updates of frozen pretrained weights; "
                              "finetune.from_scratch=true has none: set one of them off")
        if pretrained is None:
            raise ConfigError(f"finetune.adapter={f.adapter!r} wraps a pretrained model; finetune.job={f.job!r} "
                              "starts from none: set finetune.adapter=''")
        model_cfg = pretrained.model_cfg
        objective, param_groups = adapter_registry.get(f.adapter).wrap(
            config_lib.section(cfg, f.adapter), objective, param_groups, model_cfg=model_cfg,
            trunk=registry.get(model_cfg.family).layout.trunk, pretrained=pretrained.params)
    if keepers is None:
        # an objective with a training-only head (ConSERT's NLI classifier) or an adapter says what the kept model
        # holds (saved_params)
        hooks = [KeepBest(stage, objective, pretrained.model_cfg, task, pretrained.tok_info, pretrained.tok_files,
                          select=objective.saved_params if isinstance(objective, SavesParams) else None)]
    else:
        hooks = keepers(objective)
    meta = meta or {"config": config_lib.to_dict(cfg), "head": objective.head, "task": task, "init": str(init)}
    result = fit(objective, tcfg, make_mesh(cfg.mesh, finetune_devices(cfg)), stage, init_params=init_params,
                 param_groups=param_groups, meta=meta, stop_after=stop_after, hooks=hooks)
    best = hooks[0].best if hooks else {"step": -1, "metrics": {}}
    summary = {"stage": "finetune", "task": task, "description": description, "step": result.step,
               "steps": tcfg.steps, "preempted": result.preempted, "init": str(init),
               "from_scratch": f.from_scratch, "train": result.train_metrics, "final_eval": result.eval_metrics,
               "best": {"step": best["step"], "metrics": best["metrics"]},
               "primary_metric": objective.primary_metric, "train_rows": objective.num_train,
               **(summary_extra(result) if summary_extra else {})}
    if write_summary and jax.process_index() == 0:
        fs.write_text_atomic(stage / "summary.json", json.dumps(summary, indent=2))
    return StageResult(result, summary, hooks, objective, tcfg)


def stage_name(cfg: RunConfig, name: str) -> str:
    """The folder of a job's stage under ``output_dir``: ``finetune-<name>`` (lower case), with
    ``-from-scratch`` for the no-pretraining control (``finetune.from_scratch``), so both live side by side."""
    return f"finetune-{name.lower()}" + ("-from-scratch" if cfg.finetune.from_scratch else "")


def single_task(cfg: RunConfig, build: Callable[..., tuple[Any, str]], *, task: str,
                stop_after: int | None = None) -> dict[str, Any]:
    """A job of one objective on the pretrained model (the single-task job, ConSERT): load the pretrained
    weights (or only the network: ``finetune.from_scratch``), ``build(cfg, model_cfg, tokenizer)`` -> (objective,
    description), :func:`run_stage` into ``<output_dir>/``:func:`stage_name`."""
    from ptm_jax.families import registry

    pre = load_pretrained(cfg)
    objective, description = build(cfg, pre.model_cfg, pre.tokenizer)
    examples = objective.num_examples if isinstance(objective, PacksExamples) else objective.num_train
    if examples != objective.num_train:
        description += (f"; packed: {examples} training examples in {objective.num_train} rows "
                        f"(batch_size counts rows)")
    trunk = registry.get(pre.model_cfg.family).layout.trunk
    done = run_stage(cfg, stage=fs.path(cfg.output_dir) / stage_name(cfg, task), objective=objective, task=task,
                     description=description, init=pre.init, pretrained=pre,
                     init_params=merge_encoder(pre.params, trunk, cfg.finetune.keep_head, pre.init),
                     param_groups=stage_param_groups(cfg, pre.model_cfg), stop_after=stop_after,
                     summary_extra=lambda _: {"train_examples": examples})
    return done.summary


def check_job_family(cfg: RunConfig) -> None:
    """Before any stage runs (``ptm run`` before pretraining, ``ptm finetune`` before loading): a job that the
    family of this run's own model cannot run (``jobs/registry.check_family``). A model that ``finetune.init``
    names is checked where it is loaded (``train/pretrained.load_pretrained``)."""
    if not cfg.finetune.init:
        job_registry.check_family(job_registry.get(cfg.finetune.job), cfg.model.family)


def finetune(cfg: RunConfig, *, stop_after: int | None = None) -> dict[str, Any]:
    """Runs the finetuning job ``finetune.job`` (``ptm_jax/jobs``); returns its summary."""
    check_stage_batches(cfg, ["finetune"])  # every job trains on finetune.batch_size, evaluates on eval_batch_size
    check_job_family(cfg)
    return job_registry.get(cfg.finetune.job).run(cfg, stop_after=stop_after)
