"""The one training loop, shared by every stage (pretrain, finetune) and every objective.

fit(): build shardings from the model's logical axes -> restore the latest checkpoint or initialise ->
jit the pure train step with in/out shardings and a donated state -> stream this process's rows of each
global batch from the data cursor -> after each step, the hooks (train/hooks.py) in order: the non-finite
streak check, loss-spike rollback, metrics one step late (train.metrics_one_step_late; with model FLOP/s, MFU
and the share of time blocked on the feed), the profiler window (train.profile_steps), periodic evaluation,
the caller's hooks, checkpointing (on SIGTERM: a checkpoint at the next step boundary, then return; the caller
exits 0).
"""
from __future__ import annotations

import dataclasses
import gc
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh

from ptm_jax import fs
from ptm_jax.bench import flops as flops_lib
from ptm_jax.checkpoint import Checkpointer, abstract_with_shardings
from ptm_jax.config import TrainConfig
from ptm_jax.objectives.base import (BuildsGroups, CarriesState, Objective, ReadsRows, TaskObjective,
                                     check_grad_accum)
from ptm_jax.parallel.feed import (
    Prefetcher,
    gather_rows,
    host_value,
    local_batches,
    to_global,
)
from ptm_jax.parallel.rules import (
    LOGICAL_RULES,
    batch_sharding,
    group_sharding,
    replicated,
    state_shardings,
)
from ptm_jax.train.hooks import (
    ROLLED_BACK,
    Checkpointing,
    Evaluation,
    Hook,
    MetricsLog,
    NonFiniteStreak,
    Profile,
    Run,
    parse_profile_steps,
    SpikeRollback,
)
from ptm_jax.train.metrics import MetricsWriter
from ptm_jax.train.multi_step import active_mask, make_multi_step, stacked_batches
from ptm_jax.train.optim import make_optimizer
from ptm_jax.train.param_groups import Rule
from ptm_jax.train.state import TrainState
from ptm_jax.train.step import make_eval_step, make_train_step
from ptm_jax.train.warm_start import warm_state

log = logging.getLogger(__name__)


@dataclasses.dataclass
class FitResult:
    state: TrainState
    step: int
    train_metrics: dict[str, float]
    eval_metrics: dict[str, float]
    preempted: bool
    stage_dir: Path


_EARLY_SIGTERM = threading.Event()


def install_startup_sigterm_handler() -> None:
    """Called by the CLI before any work: a SIGTERM during start-up (tokenizer training, cache building,
    compilation) is remembered instead of killing the process, and the loop stops at its first step boundary
    with a checkpoint. Single-process runs only: with several processes JAX's own notifier handles SIGTERM."""
    from ptm_jax.parallel.distributed import _in_cluster

    multi = "PTM_NUM_PROCESSES" in os.environ or "PTM_COORDINATOR" in os.environ or _in_cluster()
    if threading.current_thread() is threading.main_thread() and not multi:
        signal.signal(signal.SIGTERM, lambda signum, frame: _EARLY_SIGTERM.set())


class _Preemption:
    """SIGTERM -> stop at a step boundary. Without jax.distributed: a Python handler sets a flag. With it (several
    processes, or one Cloud TPU VM / cluster process that started the runtime): JAX's preemption notifier owns
    SIGTERM and its sync point says when to stop, so every process agrees on the same step even if only one got
    the signal; no Python handler is installed (it would switch the notifier off). A single process also honours
    a SIGTERM its start-up handler caught before the runtime started."""

    def __init__(self) -> None:
        from jax._src import distributed as jax_distributed

        self._flag = _EARLY_SIGTERM.is_set()
        self._old = None
        self._single = jax.process_count() == 1
        self._notifier = getattr(jax_distributed.global_state, "preemption_sync_manager", None) is not None

    def __enter__(self) -> "_Preemption":
        if not self._notifier and threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGTERM, self._handle)
        return self

    def requested(self, step: int) -> bool:
        if self._notifier:
            from jax.experimental import multihost_utils

            synced = bool(multihost_utils.reached_preemption_sync_point(step))  # every process calls it each step
            if synced:
                _EARLY_SIGTERM.set()  # a later stage of the same run must not start
            return synced or (self._single and (self._flag or _EARLY_SIGTERM.is_set()))
        return self._flag or _EARLY_SIGTERM.is_set()

    def _handle(self, signum, frame) -> None:
        self._flag = True
        _EARLY_SIGTERM.set()  # a later stage of the same run (finetune after pretrain) must not start

    def __exit__(self, *exc) -> None:
        if self._old is not None:
            signal.signal(signal.SIGTERM, self._old)


@dataclasses.dataclass
class Compiled:
    """Everything fit() needs about a (objective, train config, mesh) triple; also used by `ptm bench`."""

    tx: Any
    schedule: Callable
    state_shardings: Any
    abstract_state: Any
    init_fn: Callable[[jax.Array], TrainState]
    train_step: Callable
    eval_step: Callable
    predict_step: Callable | None
    """(params, batch) -> (loss terms, predictions) in one call, for objectives with ``predict``."""
    batch_keys: list[str]
    multi_step: Callable | None = None
    """(state, stacked batches, rng, active) -> (state, metrics): ``train.steps_per_call`` steps in one call
    (``train/multi_step.py``); None when it is 1."""
    fresh_state: Callable | None = None
    """rng -> the state ``fit`` starts from when there is no checkpoint (``init_fn`` of ``fold_in(rng, 1)``): one
    program with the key's fold-in (an eager fold_in compiles a program of its own: 0.08 s)."""


def compile_objective(objective: Objective, tcfg: TrainConfig, mesh: Mesh,
                      param_groups: Sequence[Rule] | None = None) -> Compiled:
    example = objective.example_batch(tcfg.batch_size)
    tx, schedule = make_optimizer(tcfg, param_groups)

    check_grad_accum(objective, tcfg.grad_accum_steps)
    init_carry = objective.init_carry if isinstance(objective, CarriesState) else None

    def init_boxed(rng):
        carry = init_carry(tcfg.batch_size) if init_carry is not None else None
        return TrainState.create(objective.init(rng, example), tx, carry)

    with nn.logical_axis_rules(LOGICAL_RULES):
        abstract_boxed = jax.eval_shape(init_boxed, jax.random.key(0))
    shardings = state_shardings(abstract_boxed, mesh)
    abstract = abstract_with_shardings(nn.meta.unbox(abstract_boxed), shardings)

    def init_fn(rng):
        return nn.meta.unbox(init_boxed(rng))

    batch_sh = {k: batch_sharding(mesh, v.ndim) for k, v in example.items()}
    step = make_train_step(objective, tx, schedule, tcfg.grad_accum_steps)

    def ruled(fn):
        """Traces ``fn`` with the logical rules and the mesh in context: without a mesh the models' activation
        constraints (layers.constrain) are silently dropped, and XLA's partitioner, left to itself, computed
        wrong MLM-head gradients for one row per batch shard on a (2,2,2) mesh (docs/architecture.md)."""
        def wrapped(*args):
            with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), nn.logical_axis_rules(LOGICAL_RULES):
                return fn(*args)
        return wrapped

    train_step = jax.jit(ruled(step), in_shardings=(shardings, batch_sh, replicated(mesh)),
                         out_shardings=(shardings, replicated(mesh)), donate_argnums=0 if tcfg.donate_state else ())
    eval_step = jax.jit(ruled(make_eval_step(objective)), in_shardings=(shardings.params, batch_sh),
                        out_shardings=replicated(mesh))
    init_jit = jax.jit(ruled(init_fn), out_shardings=shardings)
    predict_step = None
    if isinstance(objective, TaskObjective):
        eval_fn = make_eval_step(objective)

        def eval_and_predict(params, batch):
            """Loss terms and predictions of one batch: XLA's common-subexpression elimination computes their
            shared forward pass once, so evaluation costs one forward pass per batch, not two."""
            return eval_fn(params, batch), objective.predict(params, batch)

        predict_step = jax.jit(ruled(eval_and_predict), in_shardings=(shardings.params, batch_sh))
    multi_step = None
    if tcfg.steps_per_call > 1:
        group_sh = {k: group_sharding(mesh, v.ndim + 1) for k, v in example.items()}
        multi_step = jax.jit(ruled(make_multi_step(step)),
                             in_shardings=(shardings, group_sh, replicated(mesh), replicated(mesh)),
                             out_shardings=(shardings, replicated(mesh)),
                             donate_argnums=0 if tcfg.donate_state else ())
    fresh_state = jax.jit(lambda r: init_jit(jax.random.fold_in(r, 1)), out_shardings=shardings)
    return Compiled(tx, schedule, shardings, abstract, init_jit, train_step, eval_step, predict_step,
                    list(example), multi_step, fresh_state)


def evaluate(objective: Objective, compiled: Compiled, params: Any, mesh: Mesh, global_batch: int,
             max_batches: int | None = None, return_outputs: bool = False):
    """Loss terms over the held-out batches; objectives with ``predict``/``score`` (finetuning tasks) predict
    every held-out example and add the task metrics. ``return_outputs`` also returns the predictions.

    Each process feeds exactly the rows its devices hold (``local_batches``), so row r of the k-th global
    batch is held-out example k * global_batch + r on any mesh, and the gathered predictions (global order)
    are in example order."""
    totals: dict[str, list[float]] = {}
    outputs: dict[str, list[np.ndarray]] = {}
    open_rows = ((lambda rows: objective.eval_row_batches(global_batch, rows))
                 if isinstance(objective, ReadsRows) else None)
    batches = local_batches(lambda i, n: objective.eval_batches(global_batch, i, n), mesh, global_batch,
                            open_rows=open_rows)
    for i, host_batch in enumerate(batches):
        if max_batches is not None and compiled.predict_step is None and i >= max_batches:
            break
        batch = to_global(host_batch, mesh, compiled.batch_keys, global_batch)
        if compiled.predict_step is not None:
            terms, predictions = compiled.predict_step(params, batch)
            for k, v in gather_rows(predictions).items():
                outputs.setdefault(k, []).append(v)
        else:
            terms = compiled.eval_step(params, batch)
        terms = host_value(terms)
        for k, (num, den) in terms.items():
            acc = totals.setdefault(k, [0.0, 0.0])
            acc[0] += float(num)
            acc[1] += float(den)
    metrics = {k: (n / d if d else float("nan")) for k, (n, d) in totals.items()}
    joined = {k: np.concatenate(v) for k, v in outputs.items()}
    if compiled.predict_step is not None and joined:
        metrics.update(objective.score(joined))
    return (metrics, joined) if return_outputs else metrics


def train_call(compiled: Compiled, state: Any, batch: dict, rng: jax.Array, k: int, remaining: int, mesh: Mesh,
               masks: dict) -> tuple[Any, dict, int]:
    """One call of ``fit``'s loop: one step (k = 1), or ``train.steps_per_call`` = k steps over a stacked batch,
    of which the first ``min(k, remaining)`` run (``masks``: the device masks of the calls so far, by steps).
    Returns the state, the call's metrics and the steps it ran."""
    if k == 1:
        state, metrics = compiled.train_step(state, batch, rng)
        return state, metrics, 1
    n = min(k, remaining)
    if n not in masks:
        masks[n] = jax.device_put(active_mask(n, k), replicated(mesh))
    state, metrics = compiled.multi_step(state, batch, rng, masks[n])
    return state, metrics, n


def fit(objective: Objective, tcfg: TrainConfig, mesh: Mesh, stage_dir: str | Path, *,
        init_params: Any = None, param_groups: Sequence[Rule] | None = None, meta: dict[str, Any] | None = None,
        stop_after: int | None = None, hooks: Sequence[Hook] = (), compiled: Compiled | None = None) -> FitResult:
    """Trains ``objective`` for ``tcfg.steps`` steps, resuming from ``stage_dir/checkpoints`` if present.

    ``init_params``: parameters to start from when there is no checkpoint yet (finetuning from a pretrained
    encoder); a callable ``(fresh_params) -> params`` that merges pretrained weights into a fresh init.
    ``param_groups``: parameter-group rules for the optimizer (train/param_groups.py; default: the weight-decay
    mask ``DEFAULT_RULES``).
    ``stop_after``: stop (with a checkpoint) after this many steps in this call — used by tests and benchmarks.
    ``hooks``: more hooks (train/hooks.py), run after evaluation and before checkpointing; e.g. finetuning's
    ``KeepBest.on_eval`` keeps the best model.
    ``compiled``: ``compile_objective(objective, tcfg, mesh, param_groups)`` of an earlier call in this process,
    whose programs this call runs again without tracing them anew (a stopped run resumed in the same process, as
    the conformance tests do); None compiles them here.
    """
    stage_dir = fs.path(stage_dir)  # local or gs:// (a pathlib.Path would turn gs://b/x into gs:/b/x)
    parse_profile_steps(tcfg.profile_steps)  # a bad value fails before any compilation
    if compiled is None:
        compiled = compile_objective(objective, tcfg, mesh, param_groups)
    ckpt = Checkpointer(stage_dir / "checkpoints", keep=tcfg.keep_checkpoints, async_save=tcfg.async_checkpoints,
                        compression=tcfg.checkpoint_compression)
    rng = jax.random.key(tcfg.seed)
    state = None
    if ckpt.latest_step() is not None:
        state, saved = ckpt.restore(compiled.abstract_state)
        cursor, start, rollbacks = int(saved["cursor"]), int(saved["step"]), int(saved.get("rollbacks", 0))
    else:
        cursor, start, rollbacks = 0, 0, 0
        if tcfg.init_from:  # another run's state, counters at 0 (train/warm_start.py: BERT's phase 2)
            state, was_at = warm_state(tcfg.init_from, stage_dir.name, compiled.abstract_state)
            log.info("%s: parameters and optimizer state from %s (step %d); step, schedule and data from 0",
                     stage_dir.name, tcfg.init_from, was_at)

    global_batch = tcfg.batch_size
    example = objective.example_batch(global_batch)
    # the feed starts before a fresh state is initialised: its first batches are built while init compiles
    k = tcfg.steps_per_call
    if k > 1 and isinstance(objective, BuildsGroups):
        host_batches = local_batches(lambda i, n: objective.train_groups(cursor, global_batch, k, i, n), mesh,
                                     global_batch, axis=1)
    else:
        open_rows = ((lambda rows: objective.train_row_batches(cursor, global_batch, rows))
                     if isinstance(objective, ReadsRows) else None)
        host_batches = local_batches(lambda i, n: objective.train_batches(cursor, global_batch, i, n), mesh,
                                     global_batch, open_rows=open_rows)
        if k > 1:
            host_batches = stacked_batches(host_batches, k)
    feed = Prefetcher(host_batches, mesh, compiled.batch_keys, depth=tcfg.prefetch_batches,
                      global_rows=global_batch, stacked=k > 1)
    try:
        if state is None:
            state = compiled.fresh_state(rng)
            if init_params is not None:
                params = init_params(state.params)
                state = jax.jit(lambda p, c: TrainState.create(p, compiled.tx, c),
                                out_shardings=compiled.state_shardings)(params, state.carry)
        writer = MetricsWriter(stage_dir, tcfg.steps, tcfg.progress_bar, initial_step=start)
    except BaseException:
        feed.close()
        ckpt.close()
        raise
    if start >= tcfg.steps:
        writer.log(f"{stage_dir.name}: already at step {start} of {tcfg.steps}")
    run = Run(tcfg, stage_dir, state, start, start, ckpt, writer, compiled.abstract_state,
              {"objective": objective.name, **(meta or {})},
              skipped=cursor - start * global_batch, rollbacks=rollbacks)  # skipped: by loss-spike rollbacks
    tokens_per_step = int(np.prod(example[compiled.batch_keys[0]].shape))
    flops_per_step = flops_lib.loop_step_flops(objective, tcfg)
    peak = flops_lib.device_peak_flops(tcfg.peak_tflops, mesh.devices.flat[0].device_kind, int(mesh.devices.size))
    with _Preemption() as preemption:
        run.hooks = [NonFiniteStreak(tcfg), SpikeRollback(tcfg),
                     MetricsLog(tcfg, tokens_per_step, start, flops_per_step, peak), Profile(tcfg, stage_dir, start),
                     Evaluation(tcfg, lambda params: evaluate(objective, compiled, params, mesh, tcfg.eval_rows(),
                                                              tcfg.eval_batches)),
                     *hooks, Checkpointing(tcfg, preemption, stop_after)]
        # what exists before the loop (libraries, model, data tables) stays out of the cyclic collector's scans
        # for the run: a full collection otherwise walks those 0.6M objects (0.4 s of an 8 s word2vec run)
        gc.freeze()
        try:
            masks: dict = {}
            while run.step < tcfg.steps and run.stop is None:
                waiting = time.perf_counter()
                _, batch = next(feed)
                run.input_wait_s += time.perf_counter() - waiting
                with jax.profiler.StepTraceAnnotation("train", step_num=run.step + 1):  # XProf's steps
                    run.state, metrics, run.advanced = train_call(compiled, run.state, batch, rng, k,
                                                                  tcfg.steps - run.step, mesh, masks)
                run.skipped += (k - run.advanced) * global_batch  # a last, shorter call: its unused batches
                run.step += run.advanced
                for hook in run.hooks:
                    if hook.after_step(run, metrics) == ROLLED_BACK:
                        for h in run.hooks:
                            h.on_rollback(run)
                        break
            for hook in reversed(run.hooks):
                hook.on_stop(run)
        finally:
            gc.unfreeze()
            feed.close()
            ckpt.close()
            writer.close()
    return FitResult(run.state, run.step, run.last_train, run.last_eval, run.preempted, stage_dir)
