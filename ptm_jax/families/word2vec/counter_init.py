"""Uniform initial tables from a counter-based hash of each element's index: word2vec.c's ``InitNet`` (syn0
uniform in [-0.5, 0.5] / size) and fastText's ``Matrix::uniform`` (the input matrix in [-1/dim, 1/dim]).

The value of element (row, column) is a function of the key's bits and that index only: two rounds of
MurmurHash3's 32-bit finaliser (Appleby, ``fmix32``), the row hashed with the key's first word, then that hash
plus the column times the golden ratio with its last word; the top 24 bits make a float32 in [0, 1). XLA
partitions the iotas, so a table sharded over any mesh, on any number of hosts, holds the same values.

Why not ``jax.random.uniform``: threefry over fastText's 2M-bucket x 100 input table took 5.5 s on the 2-core
CPU of docs/benchmarks.md and 0.25 s to compile (the whole of a 3-epoch CBOW run is about 4 s); this hash took
0.2 s and compiles in 0.06 s. Its columns, rows and 256-bin histogram pass the correlation and chi-squared checks
of ``tests/test_word2vec.py::test_counter_init_is_uniform_uncorrelated_and_the_same_on_any_mesh``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

_GOLDEN = 0x9E3779B9


def fmix32(h: jax.Array) -> jax.Array:
    """MurmurHash3's finaliser on uint32 (wrapping arithmetic): every input bit flips each output bit with
    probability about 1/2."""
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x85EBCA6B)
    h = h ^ (h >> 13)
    h = h * jnp.uint32(0xC2B2AE35)
    return h ^ (h >> 16)


def counter_uniform(key: jax.Array, shape: tuple[int, int], lo: float, hi: float,
                    dtype=jnp.float32) -> jax.Array:
    """A [rows, columns] table uniform in [lo, hi) (see the module doc). Tables of up to 2^32 rows."""
    if len(shape) != 2:
        raise ValueError(f"counter_uniform makes 2-D tables, not shape {shape}")
    words = jax.random.key_data(key).reshape(-1).astype(jnp.uint32)
    rows = lax.broadcasted_iota(jnp.uint32, shape, 0)
    cols = lax.broadcasted_iota(jnp.uint32, shape, 1)
    h = fmix32(fmix32(rows ^ fmix32(words[0])) + cols * jnp.uint32(_GOLDEN) + words[-1])
    unit = (h >> 8).astype(jnp.float32) * jnp.float32(2.0 ** -24)
    return (lo + (hi - lo) * unit).astype(dtype)


def uniform_init(bound: float):
    """A Flax initializer: uniform in [-bound, bound) by ``counter_uniform``."""

    def init(key, shape, dtype=jnp.float32):
        return counter_uniform(key, tuple(shape), -bound, bound, dtype)

    return init
