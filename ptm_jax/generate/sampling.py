"""Next-token choice from logits: greedy, temperature, top-k and nucleus (top-p) filtering; pure jnp.

Top-k keeps the k largest logits (Fan et al. 2018); top-p keeps the smallest set of most probable tokens
whose total probability reaches p (Holtzman et al. 2020, Sec. 3.1), always at least the most probable one.
Filtered logits are set to -inf, so ``jax.random.categorical`` never draws them. Ties at a threshold are
kept (a few more than k tokens can survive when logits are equal).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

NEG_INF = -jnp.inf


def top_k_filter(logits: jax.Array, k: int) -> jax.Array:
    """[..., V] -> the same with every logit below the k-th largest set to -inf; k <= 0 or k >= V: unchanged."""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = jax.lax.top_k(logits, k)[0][..., -1:]
    return jnp.where(logits < kth, NEG_INF, logits)


def top_p_filter(logits: jax.Array, p: float | jax.Array) -> jax.Array:
    """[..., V] -> logits outside the minimal nucleus of probability mass >= p set to -inf; p >= 1: unchanged.

    A token is kept iff the probability of the tokens strictly more probable than it is < p. ``p`` may be a
    traced scalar (one compiled program for every p)."""
    if isinstance(p, (int, float)) and p >= 1.0:
        return logits
    sorted_logits = jnp.sort(logits, axis=-1)[..., ::-1]
    probs = jax.nn.softmax(sorted_logits.astype(jnp.float32), axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs
    keep = before < p
    keep = keep.at[..., 0].set(True)
    threshold = jnp.min(jnp.where(keep, sorted_logits, jnp.inf), axis=-1, keepdims=True)
    return jnp.where(logits < threshold, NEG_INF, logits)


def filter_logits(logits: jax.Array, *, temperature: float | jax.Array = 1.0, top_k: int = 0,
                  top_p: float | jax.Array = 1.0) -> jax.Array:
    """Temperature, then top-k, then top-p (the order transformers' samplers use). ``top_k`` is static;
    ``temperature`` and ``top_p`` may be traced scalars."""
    logits = logits.astype(jnp.float32)
    if not (isinstance(temperature, (int, float)) and temperature == 1.0):
        logits = logits / temperature
    return top_p_filter(top_k_filter(logits, top_k), top_p)


def sample(logits: jax.Array, key: jax.Array, *, greedy: bool = False, temperature: float | jax.Array = 1.0,
           top_k: int = 0, top_p: float | jax.Array = 1.0) -> jax.Array:
    """[B, V] logits -> [B] int32 token ids (argmax when greedy, else one categorical draw per row)."""
    if greedy:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    filtered = filter_logits(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    return jax.random.categorical(key, filtered, axis=-1).astype(jnp.int32)
