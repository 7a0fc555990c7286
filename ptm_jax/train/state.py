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

    @classmethod
    def create(cls, params: Any, tx) -> "TrainState":
        return cls(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))
