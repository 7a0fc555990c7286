"""Dropout (Srivastava et al. 2014) with four keep/drop decisions per Threefry-2x32 hash.

``jax.random.bernoulli`` spends one Threefry-2x32 hash (64 random bits) on every 32-bit uniform it compares, so
on a CPU the random bits of BERT's dropout cost about as much as a quarter of the train step. Here each hash
gives four 16-bit uniforms, so the same masks cost a quarter of the hashes:

- the counter of a hash is (flat index over the leading axes, index of a group of four along the last axis), so the
  mask is elementwise in the leading axes and shards with the activation it masks, like the partitionable
  Threefry of ``jax.random``;
- a position is dropped when its 16-bit uniform is below ``round(rate * 65536)``, so the drop probability is the
  rate rounded to a multiple of 2**-16 (0.1 -> 0.1000061); kept values are scaled by the inverse of that exact
  keep probability, so ``E[dropout(x)] = x`` holds exactly.

Keys of another PRNG implementation (``prng=rbg``) fall back to ``jax.random.bernoulli``.

Two computations give the same masks: off a TPU, a quarter of the hashes, their four decisions interleaved along the
last axis (a reshape, free in a row-major layout); on a TPU, where that interleave is a relayout of the whole mask
(the TPU tiles the last two axes 8 x 128), every position hashes its own group's counter and takes its 16 bits
(``keep_mask_per_position``: four times the hashes, no relayout; the TPU compiler's estimates in
docs/benchmarks.md, "The relative shift as a kernel; dropout masks without a relayout").
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax
from jax.extend.random import threefry2x32_p

_DECISIONS_PER_HASH = 4
_RESOLUTION = 1 << 16


def drop_threshold(rate: float) -> int:
    """Positions whose 16-bit uniform is below this are dropped."""
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
    return int(round(rate * _RESOLUTION))


def keep_probability(rate: float) -> float:
    """The exact keep probability that ``keep_mask`` draws for ``rate``."""
    return 1.0 - drop_threshold(rate) / _RESOLUTION


def _is_threefry(rng: jax.Array) -> bool:
    if jax.dtypes.issubdtype(rng.dtype, jax.dtypes.prng_key):
        return str(jax.random.key_impl(rng)) == "threefry2x32"
    return rng.shape == (2,) and rng.dtype == jnp.uint32  # a raw legacy threefry key


def keep_mask(rng: jax.Array, shape: tuple[int, ...], rate: float) -> jax.Array:
    """Boolean mask of ``shape``: True (keep) with probability ``keep_probability(rate)``, independently."""
    shape = tuple(int(d) for d in shape)
    if not shape or not _is_threefry(rng):
        return jax.random.bernoulli(rng, keep_probability(rate), shape)
    data = jax.random.key_data(rng) if jax.dtypes.issubdtype(rng.dtype, jax.dtypes.prng_key) else rng
    from ptm_jax.models.layers import backend_platform

    if backend_platform() == "tpu":
        return keep_mask_per_position(data, shape, rate)
    lead, last = shape[:-1], shape[-1]
    hashes = lead + (-(-last // _DECISIONS_PER_HASH),)
    a, b = _hash(data, hashes, lax.broadcasted_iota(jnp.uint32, hashes, len(lead)))
    t = jnp.uint32(drop_threshold(rate))
    halves = (a & 0xFFFF, a >> 16, b & 0xFFFF, b >> 16)
    keep = jnp.stack([h >= t for h in halves], axis=-1).reshape(lead + (hashes[-1] * _DECISIONS_PER_HASH,))
    return keep[..., :last]


def _hash(key_data: jax.Array, shape: tuple[int, ...], col: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The two Threefry-2x32 words of every entry of ``shape``: counter (flat index over the leading axes, ``col``)."""
    row = jnp.zeros(shape, jnp.uint32)
    for axis, size in enumerate(shape[:-1]):
        row = row * jnp.uint32(size) + lax.broadcasted_iota(jnp.uint32, shape, axis)
    k1, k2 = (jnp.broadcast_to(key_data[i], shape) for i in range(2))
    return threefry2x32_p.bind(k1, k2, row, col)


def keep_mask_per_position(key_data: jax.Array, shape: tuple[int, ...], rate: float) -> jax.Array:
    """``keep_mask``'s masks (threefry ``key_data``) with one hash per position: position e of the last axis
    hashes the counter of its group of four, (flat leading index, e // 4), and keeps the 16 bits e % 4 of the
    hash's two words (low half of the first word, high half, then the second's), so no decision is moved."""
    e = lax.broadcasted_iota(jnp.uint32, shape, len(shape) - 1)
    a, b = _hash(key_data, shape, e // _DECISIONS_PER_HASH)
    j = e % _DECISIONS_PER_HASH
    word = jnp.where(j < 2, a, b)
    keep = jnp.where(j % 2 == 0, word & 0xFFFF, word >> 16) >= jnp.uint32(drop_threshold(rate))
    # written out once, as the interleaved mask is: fused into a consumer, the hashes would be recomputed there,
    # inside a matmul's operand fusion too (the TPU compiler estimates bert_tiny's unrolled step 10% slower so)
    return lax.optimization_barrier(keep)


def dropout(x: jax.Array, rate: float, rng: jax.Array, broadcast_dims: tuple[int, ...] = ()) -> jax.Array:
    """Inverted dropout of ``x`` with the mask of ``keep_mask``; the mask is shared along ``broadcast_dims``
    (as ``flax.linen.Dropout``'s: e.g. (1,) for one mask per row and feature over all positions of [B, S, H],
    variational dropout)."""
    if rate == 0.0:
        return x
    shape = tuple(1 if i in {d % x.ndim for d in broadcast_dims} else n for i, n in enumerate(x.shape))
    keep = keep_mask(rng, shape, rate)
    return jnp.where(keep, x / jnp.asarray(keep_probability(rate), x.dtype), jnp.zeros((), x.dtype))


class Dropout(nn.Module):
    """Drop-in for ``flax.linen.Dropout`` (rng collection 'dropout', ``broadcast_dims``) built on ``keep_mask``."""

    rate: float
    broadcast_dims: tuple[int, ...] = ()

    @nn.compact
    def __call__(self, x: jax.Array, deterministic: bool) -> jax.Array:
        if deterministic or self.rate == 0.0:
            return x
        return dropout(x, self.rate, self.make_rng("dropout"), self.broadcast_dims)
