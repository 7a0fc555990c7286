"""ptm's side of the training-trajectory parity checks (tests/test_pretrain_parity_recurrent.py,
benchmarks/pretrain_parity_recurrent.py): the objective's own train step, compiled by the loop's
``compile_objective`` with the optimizer, clipping, parameter groups and schedule a run uses, fed the objective's
own stream (``train_batches``, what ``fit`` reads), each host batch kept so that the reference can be fed the same
rows; and the gap figures between two trajectories."""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import jax
import numpy as np

from ptm_jax.parallel.feed import to_global
from ptm_jax.train.loop import compile_objective
from ptm_jax.train.state import TrainState


@dataclasses.dataclass
class Trajectory:
    losses: np.ndarray
    """The loss each step minimised, [steps]."""
    terms: dict[str, np.ndarray]
    """Per-step means of the objective's (sum, count) terms (``lm_loss``, ...), [steps] each."""
    params: Any
    """The final parameters (numpy)."""
    batches: list[dict[str, np.ndarray]] = dataclasses.field(default_factory=list)
    """The host batches of every step, in order."""


def run_ptm(objective, tcfg, mesh, steps: int, params: Any = None, param_groups: Sequence | None = None,
            seed: int = 0, keep_batches: bool = True) -> Trajectory:
    """``steps`` train steps of ``objective`` as ``train/loop.fit`` takes them (its init key, its per-step key
    ``jax.random.key(seed)``, the stream from example 0); ``params``: the initial ``{'params': ...}`` tree in place
    of the objective's init."""
    compiled = compile_objective(objective, tcfg, mesh, param_groups)
    rng = jax.random.key(seed)
    state = jax.jit(lambda r: compiled.init_fn(jax.random.fold_in(r, 1)), out_shardings=compiled.state_shardings)(rng)
    if params is not None:
        state = jax.jit(lambda p, c: TrainState.create(p, compiled.tx, c),
                        out_shardings=compiled.state_shardings)(jax.tree.map(np.asarray, params), state.carry)
    stream = objective.train_batches(0, tcfg.batch_size, 0, 1)
    losses, terms, kept = [], {}, []
    for _ in range(steps):
        host = {k: np.array(v) for k, v in next(stream).items()}
        if keep_batches:
            kept.append(host)
        state, metrics = compiled.train_step(state, to_global(host, mesh, compiled.batch_keys), rng)
        metrics = jax.device_get(metrics)
        losses.append(float(metrics["loss"]))
        for k, v in metrics.items():
            if isinstance(v, tuple) and len(v) == 2:
                terms.setdefault(k, []).append(float(v[0]) / max(float(v[1]), 1e-30))
    return Trajectory(np.array(losses), {k: np.array(v) for k, v in terms.items()},
                      jax.device_get(state.params), kept)


def initial_params(objective, tcfg, mesh, seed: int = 0) -> Any:
    """The parameters ``fit`` starts from with ``train.seed = seed`` (numpy)."""
    compiled = compile_objective(objective, tcfg, mesh)
    state = jax.jit(lambda r: compiled.init_fn(jax.random.fold_in(r, 1)),
                    out_shardings=compiled.state_shardings)(jax.random.key(seed))
    return jax.device_get(state.params)


def loss_gap(ours: np.ndarray, theirs: np.ndarray) -> float:
    """The largest per-step loss difference."""
    return float(np.max(np.abs(np.asarray(ours, np.float64) - np.asarray(theirs, np.float64))))


def param_gap(ours: Any, theirs: Any) -> tuple[float, str]:
    """The largest elementwise difference over two parameter trees of the same structure, and its leaf."""
    flat_a = {jax.tree_util.keystr(k): np.asarray(v) for k, v in jax.tree_util.tree_flatten_with_path(ours)[0]}
    flat_b = {jax.tree_util.keystr(k): np.asarray(v) for k, v in jax.tree_util.tree_flatten_with_path(theirs)[0]}
    assert sorted(flat_a) == sorted(flat_b), (sorted(set(flat_a) ^ set(flat_b)))
    worst, where = 0.0, ""
    for k, a in flat_a.items():
        assert a.shape == flat_b[k].shape, (k, a.shape, flat_b[k].shape)
        d = float(np.max(np.abs(a.astype(np.float64) - flat_b[k].astype(np.float64)))) if a.size else 0.0
        if d > worst:
            worst, where = d, k
    return worst, where
