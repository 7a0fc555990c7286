"""Several train steps in one compiled call (``train.steps_per_call`` = k): the device runs k steps of the same
pure ``train_step`` back to back, and the host transfers one stacked batch and dispatches one program per k
steps instead of one per step.

For the table models (word2vec, fastText, GloVe, NNLM) a step is short; on a GPU the host's share of a step (the
batch's transfer, the dispatch, the hooks) is longer than the step: the skip-gram step at batch 4096 took
0.22 ms on an H200 and the loop 1.4 ms a step (docs/benchmarks.md "word2vec on a GPU"). TensorFlow's Keras
``steps_per_execution`` and the TPU estimators' ``iterations_per_loop`` are the same idea.

A call is the scan of the step over the k batches of ``[k, rows, ...]`` arrays (the batch sharding with an
unsharded leading axis, ``group_sharding``); ``active[i]`` false leaves step i out (the state passes through
unchanged, nothing is computed), so one compiled program also runs the shorter last call of a run. The state
after a call is exactly that of k single steps (the same step function, the same rng per step:
``train_step`` folds the state's step into it). Its metrics are the last active step's, with
``nonfinite_streak`` the longest streak seen in the call, so ``NonFiniteStreak`` misses no streak.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np


def make_multi_step(train_step: Callable) -> Callable:
    """``train_step(state, batch, rng) -> (state, metrics)`` -> ``multi_step(state, batches, rng, active)``,
    ``batches`` a dict of ``[k, rows, ...]`` arrays and ``active`` a [k] bool array whose first entry is true."""

    def multi_step(state: Any, batches: dict, rng: jax.Array, active: jax.Array) -> tuple[Any, dict]:
        first = jax.tree.map(lambda x: x[0], batches)
        state, metrics = train_step(state, first, rng)
        rest = jax.tree.map(lambda x: x[1:], batches)

        def body(carry, xs):
            state, last, longest = carry
            batch, on = xs
            state, m = jax.lax.cond(on, lambda s: train_step(s, batch, rng), lambda s: (s, last), state)
            return (state, m, jnp.maximum(longest, m["nonfinite_streak"])), None

        (state, metrics, longest), _ = jax.lax.scan(body, (state, metrics, metrics["nonfinite_streak"]),
                                                    (rest, active[1:]))
        return state, {**metrics, "nonfinite_streak": longest}

    return multi_step


def stacked_batches(batches: Iterator[dict[str, np.ndarray]], k: int) -> Iterator[dict[str, np.ndarray]]:
    """Host batches -> groups of ``k`` successive ones, each feature stacked on a new leading axis. Training
    streams are endless; a finite one ends with its last whole group."""
    group: list[dict[str, np.ndarray]] = []
    try:
        for b in batches:
            group.append(b)
            if len(group) == k:
                yield {name: np.stack([g[name] for g in group]) for name in group[0]}
                group = []
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()


def active_mask(steps: int, k: int) -> np.ndarray:
    """[k] bools: the first ``steps`` of a call's k steps run."""
    return np.arange(k) < steps
