"""Shared building blocks with logical axis names on every parameter (BERT modeling.py conventions)."""
from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

Dtype = Any

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),  # released BERT weights use erf GELU
    "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),  # GPT
    "relu": jax.nn.relu,
}


def dtype_of(name: str) -> Dtype:
    """``model.dtype`` -> the compute dtype. 'auto': bfloat16 when the model is traced for a GPU or TPU (the
    mesh in context, else JAX's default backend), float32 on CPU; parameters stay float32 either way.
    'float64' (a family that allows it, for parity checks against a float64 reference; JAX's 64-bit mode must be
    on): parameters, compute and state all float64 (:func:`param_dtype_of`, :func:`accum_dtype`)."""
    if name == "auto":
        return _auto_dtype(backend_platform())
    return {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float64": jnp.float64}[name]


def accum_dtype(dtype: Dtype) -> Dtype:
    """The dtype sums, states and losses are kept in for compute ``dtype``: float32 for float32 and bfloat16,
    float64 for float64."""
    return jnp.promote_types(dtype, jnp.float32)


def param_dtype_of(dtype: Dtype) -> Dtype:
    """The parameters' dtype for compute ``dtype``: float32 (bfloat16 compute too), float64 for float64."""
    return accum_dtype(dtype)


def backend_platform() -> str:
    """'cpu' | 'gpu' | 'tpu' of the mesh being traced for (an AOT compile for a TPU topology on a CPU host
    says 'tpu'), else of JAX's default backend."""
    mesh = jax.sharding.get_abstract_mesh()
    platform = None
    if not mesh.empty:
        platform = getattr(getattr(mesh, "abstract_device", None), "platform", None)
    platform = (platform or jax.default_backend()).lower()
    return "gpu" if platform in ("cuda", "rocm", "gpu") else platform


@functools.lru_cache(maxsize=None)
def _auto_dtype(platform: str) -> Dtype:
    dtype = jnp.bfloat16 if platform in ("gpu", "tpu") else jnp.float32
    logging.getLogger(__name__).info("model.dtype=auto: %s compute on %s (parameters and optimizer state "
                                    "float32)", jnp.dtype(dtype).name, platform)
    return dtype


def truncated_normal(stddev: float) -> Callable:
    """BERT's truncated normal (cut at 2 sigma), as tf.truncated_normal_initializer."""
    return nn.initializers.truncated_normal(stddev=stddev)


class Partitioned(nn.LogicallyPartitioned):
    """A parameter with logical axis names. Unboxing adds no sharding constraint: the jitted init's out_shardings
    place the parameters, and flax's DenseGeneral unboxes its kernel while it is still flat (a rank the names do
    not fit), also in apply, where flax re-runs the initialiser abstractly to check shapes."""

    def unbox(self, apply_constraint: bool = True) -> Any:
        return self.value


def partitioned(init: Callable, names: Sequence[str | None]) -> Callable:
    """``init`` whose result carries the logical axis ``names`` (the sharding rules map them to mesh axes)."""

    def boxed(*args, **kwargs):
        return Partitioned(init(*args, **kwargs), tuple(names))

    return boxed


def constrain(x: jax.Array, names: Sequence[str | None]) -> jax.Array:
    """Activation sharding by logical names. The loop traces the model with the mesh in context
    (train/loop.py); outside one this is a no-op."""
    return nn.with_logical_constraint(x, tuple(names))


def gather_positions(sequence: jax.Array, positions: jax.Array) -> jax.Array:
    """[B, S, H] x [B, P] -> [B, P, H]."""
    return jnp.take_along_axis(sequence, positions[..., None].astype(jnp.int32), axis=1)


class LayerNorm(nn.Module):
    eps: float = 1e-12
    dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.LayerNorm(
            epsilon=self.eps,
            dtype=self.dtype,
            param_dtype=jnp.float32,
            scale_init=partitioned(nn.initializers.ones, ("embed",)),
            bias_init=partitioned(nn.initializers.zeros, ("embed",)),
            name="norm",
        )(x)


class Dense(nn.Module):
    """Dense layer [.., in] -> [.., features] with named kernel/bias axes."""

    features: int
    axes: tuple[str, str]
    init_std: float = 0.02
    use_bias: bool = True
    dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Dense(
            self.features,
            use_bias=self.use_bias,
            dtype=self.dtype,
            param_dtype=jnp.float32,
            kernel_init=partitioned(truncated_normal(self.init_std), self.axes),
            bias_init=partitioned(nn.initializers.zeros, (self.axes[1],)),
            name="dense",
        )(x)


REMAT_POLICIES = {
    "full": None,  # save nothing, recompute the whole block
    "save_dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}
"""``model.remat`` -> the ``jax.checkpoint`` policy of one Transformer block (``nn.remat``)."""
