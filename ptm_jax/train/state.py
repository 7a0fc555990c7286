"""The train state: a pytree of (step, params, opt_state, carry); sharded, checkpointed and donated as one.

``carry`` is what an objective feeds from one step to the next (XLNet's Transformer-XL memory, Dai et al. 2019
Sec. 3.2); None for objectives whose steps are independent. Being part of the state, it is checkpointed, so a
resumed run continues with the memory it had."""
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
    carry: Any = None

    @classmethod
    def create(cls, params: Any, tx, carry: Any = None) -> "TrainState":
        zero = jnp.zeros((), jnp.int32)
        return cls(step=zero, params=params, opt_state=tx.init(params), nonfinite_streak=zero, nonfinite_total=zero,
                   carry=carry)
