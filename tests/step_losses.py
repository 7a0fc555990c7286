"""The first steps of a compiled objective on a mesh, for the tests that compare meshes and accumulation."""
from __future__ import annotations

import jax
import numpy as np

from ptm_jax.parallel.feed import to_global
from ptm_jax.train.loop import compile_objective


def step_losses(objective, tcfg, mesh, steps: int, param_groups=None):
    """(loss and grad_norm of each of ``steps`` train steps from init key 7 on the objective's stream, as a
    [steps, 2] array; the final state)."""
    compiled = compile_objective(objective, tcfg, mesh, param_groups)
    state = compiled.init_fn(jax.random.key(7))
    batches = objective.train_batches(0, tcfg.batch_size, 0, 1)
    out = []
    for _ in range(steps):
        state, metrics = compiled.train_step(state, to_global(next(batches), mesh, compiled.batch_keys),
                                             jax.random.key(0))
        out.append([float(metrics["loss"]), float(metrics["grad_norm"])])
    return np.array(out), state
