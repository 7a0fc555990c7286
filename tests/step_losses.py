"""The first steps of a compiled objective on a mesh, for the tests that compare meshes and accumulation, and for
the step-by-step parity with reference implementations (``benchmarks/pretrain_parity.py``)."""
from __future__ import annotations

import jax
import numpy as np

from ptm_jax.parallel.feed import to_global
from ptm_jax.train.loop import compile_objective


def initial_state(objective, tcfg, mesh, param_groups=None, key: int = 7):
    """(the compiled objective, its train state initialised from ``jax.random.key(key)``)."""
    compiled = compile_objective(objective, tcfg, mesh, param_groups)
    return compiled, compiled.init_fn(jax.random.key(key))


def run_steps(compiled, state, batches, mesh, steps: int, dropout_key: int = 0):
    """(loss and grad_norm of each of ``steps`` train steps over ``batches`` (host batches), as a [steps, 2]
    array; the final state). Every step gets ``jax.random.key(dropout_key)`` as ``fit`` gets its seed's key (the
    step folds in its number)."""
    rng = jax.random.key(dropout_key)
    out = []
    for _, batch in zip(range(steps), batches):
        state, metrics = compiled.train_step(state, to_global(batch, mesh, compiled.batch_keys), rng)
        out.append([float(metrics["loss"]), float(metrics["grad_norm"])])
    return np.array(out), state


def step_losses(objective, tcfg, mesh, steps: int, param_groups=None):
    """(loss and grad_norm of each of ``steps`` train steps from init key 7 on the objective's stream, as a
    [steps, 2] array; the final state)."""
    compiled, state = initial_state(objective, tcfg, mesh, param_groups)
    return run_steps(compiled, state, objective.train_batches(0, tcfg.batch_size, 0, 1), mesh, steps)
