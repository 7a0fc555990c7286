"""The Poincare ball (Nickel & Kiela 2017, Sec. 2-3): the distance, the Riemannian gradient and the retraction,
for jax (the step) and numpy (``ptm neighbors``, the reconstruction evaluation).

* d(u, v) = arcosh(1 + 2 |u - v|^2 / ((1 - |u|^2)(1 - |v|^2))) (eq. 1), computed as log1p(x + sqrt(x^2 + 2x))
  with x = 2 |u - v|^2 / ((1 - |u|^2)(1 - |v|^2)): arcosh(1 + x) without the cancellation of 1 + x - 1 near
  x = 0, where float32 would lose most digits (a fresh table's points are 1e-3 apart: x ~ 1e-5).
* The Riemannian gradient is the Euclidean one times (1 - |theta|^2)^2 / 4 (eq. 4, the inverse of the metric
  tensor's conformal factor), and the update theta - lr x that is retracted into the ball: a point whose norm
  reaches 1 - eps is scaled back to norm 1 - eps (eq. 5's proj; the reference's ``renorm``).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

TINY = 1e-15
"""x is clamped below at this: d(u, u) = 0 has no finite gradient (gensim zeroes it), here it is 0 as well."""


def distance(u: jax.Array, v: jax.Array) -> jax.Array:
    """d(u, v) over the last axis (broadcasting)."""
    sq = jnp.sum(jnp.square(u - v), axis=-1)
    alpha = 1.0 - jnp.sum(jnp.square(u), axis=-1)
    beta = 1.0 - jnp.sum(jnp.square(v), axis=-1)
    x = jnp.maximum(2.0 * sq / (alpha * beta), TINY)
    return jnp.log1p(x + jnp.sqrt(x * (x + 2.0)))


def riemannian_step(table: jax.Array, grads: jax.Array, touched: jax.Array, lr: jax.Array, eps: float
                    ) -> jax.Array:
    """Rows of ``table`` with ``touched`` set moved by -lr x (1 - |theta|^2)^2 / 4 x grad, then retracted; the
    others unchanged."""
    scale = jnp.square(1.0 - jnp.sum(jnp.square(table), axis=-1, keepdims=True)) / 4.0
    moved = retract(table - lr * scale * grads, eps)
    return jnp.where(touched[:, None], moved, table)


def retract(x: jax.Array, eps: float) -> jax.Array:
    norm = jnp.sqrt(jnp.sum(jnp.square(x), axis=-1, keepdims=True))
    limit = 1.0 - eps
    return jnp.where(norm >= limit, x * (limit / jnp.maximum(norm, limit)), x)


def distances_np(query: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """float64 [n]: d(query, row) for every row of ``vectors`` [n, d] (``Inspection.vector_distance``)."""
    q = np.asarray(query, np.float64)
    v = np.asarray(vectors, np.float64)
    sq = np.sum(np.square(v - q), axis=-1)
    x = np.maximum(2.0 * sq / ((1.0 - q @ q) * (1.0 - np.sum(np.square(v), axis=-1))), 0.0)
    return np.log1p(x + np.sqrt(x * (x + 2.0)))
