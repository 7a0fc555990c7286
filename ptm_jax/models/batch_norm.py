"""Batch normalisation of rows [B, D] (Ioffe & Szegedy 2015, Algorithm 1), as PyTorch's ``BatchNorm1d``:

    training:    y = (x - mean_B) / sqrt(var_B + eps) * scale + bias      (mean_B, biased var_B over the batch's rows)
                 running <- (1 - momentum) * running + momentum * batch    (the variance unbiased: var_B * n / (n - 1))
    evaluation:  y = (x - running_mean) / sqrt(running_var + eps) * scale + bias

PyTorch's defaults (eps 1e-5, momentum 0.1, running mean 0 and variance 1 at the start); scale 1 and bias 1e-3 at
the start as fastai's ``BatchNorm`` (``fastai/layers.py`` ``_get_norm``), the layer of fastai's ULMFiT head
(``LinBnDrop``). ``row_mask`` [B] leaves padding rows out of the batch statistics. On a mesh the batch axis is
sharded and the means are over the global batch (synchronised batch norm).

The running statistics live in the ``params`` collection, named ``running_mean`` / ``running_var``
(``STATISTICS_PATTERN``), so that a params directory, the best-model copy and every export carry them with the
weights. They are set, not trained: the family's parameter groups freeze them (the optimizer keeps no state for
them and never changes them), and a training forward pass writes their next values to the ``statistics``
collection when the caller makes it mutable. The objective returns that collection from
``loss_and_statistics`` (``objectives/base.py`` ``SetsStatistics``) and the train step writes it into the
parameters after the optimizer's update (``train/step.py``).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.models.layers import partitioned

STATISTICS = "statistics"
"""The mutable collection a training forward pass writes the new running statistics to."""
STATISTICS_PATTERN = r"(^|/)running_(mean|var)$"
"""Parameter paths of the running statistics (a frozen parameter group)."""


class BatchNorm(nn.Module):
    """``(x [B, D], row_mask [B] or None, deterministic) -> [B, D]`` (module doc)."""

    momentum: float = 0.1
    eps: float = 1e-5
    bias_init: float = 1e-3

    @nn.compact
    def __call__(self, x: jax.Array, row_mask: jax.Array | None = None, deterministic: bool = True) -> jax.Array:
        d = x.shape[-1]
        const = nn.initializers.constant
        scale = self.param("scale", partitioned(nn.initializers.ones, (None,)), (d,), jnp.float32)
        bias = self.param("bias", partitioned(const(self.bias_init), (None,)), (d,), jnp.float32)
        running_mean = self.param("running_mean", partitioned(nn.initializers.zeros, (None,)), (d,), jnp.float32)
        running_var = self.param("running_var", partitioned(nn.initializers.ones, (None,)), (d,), jnp.float32)
        x = x.astype(jnp.float32)
        if deterministic:
            mean, var = jax.lax.stop_gradient(running_mean), jax.lax.stop_gradient(running_var)
        else:
            w = jnp.ones(x.shape[:1], jnp.float32) if row_mask is None else row_mask.astype(jnp.float32)
            n = jnp.sum(w)
            mean = jnp.sum(w[:, None] * x, axis=0) / jnp.maximum(n, 1.0)
            var = jnp.sum(w[:, None] * jnp.square(x - mean), axis=0) / jnp.maximum(n, 1.0)
            if self.is_mutable_collection(STATISTICS):
                m = self.momentum
                unbiased = jax.lax.stop_gradient(var) * n / jnp.maximum(n - 1.0, 1.0)
                self.put_variable(STATISTICS, "running_mean",
                                  (1.0 - m) * running_mean + m * jax.lax.stop_gradient(mean))
                self.put_variable(STATISTICS, "running_var", (1.0 - m) * running_var + m * unbiased)
        return (x - mean) * jax.lax.rsqrt(var + self.eps) * scale + bias
