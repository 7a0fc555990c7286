"""The train state: a pytree of (step, params, opt_state); sharded, checkpointed and donated as one."""
from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp


class TrainState(flax.struct.PyTreeNode):
    step: jax.Array
    params: Any
    opt_state: Any
    nonfinite_streak: jax.Array  # consecutive steps skipped for a non-finite loss or gradient
    nonfinite_total: jax.Array

    @classmethod
    def create(cls, params: Any, tx) -> "TrainState":
        zero = jnp.zeros((), jnp.int32)
        return cls(step=zero, params=params, opt_state=tx.init(params), nonfinite_streak=zero, nonfinite_total=zero)
