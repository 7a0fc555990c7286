"""Attention: padding/segment masks and one entry point over ``jax.nn.dot_product_attention``.

Scaled dot-product attention (Vaswani et al. 2017, Sec. 3.2.1) with BERT's additive-mask semantics.
With attention-probability dropout active (BERT's 0.1 during pretraining) the probabilities must be
materialised, so the explicit XLA einsum path runs; otherwise ``jax.nn.dot_product_attention`` runs with the
configured implementation (``cudnn`` gives the fused flash kernel on GPU, ``xla`` everywhere).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.models.dropout import dropout
from ptm_jax.models.layers import partitioned


def padding_mask(input_mask: jax.Array) -> jax.Array:
    """[B, S] (1 = real token) -> boolean [B, 1, 1, S] key mask."""
    return input_mask.astype(bool)[:, None, None, :]


def segment_mask(segment_ids: jax.Array) -> jax.Array:
    """Packed rows: [B, S] segment ids (0 = padding) -> [B, 1, S, S]; a token sees only its own segment."""
    same = segment_ids[:, :, None] == segment_ids[:, None, :]
    return (same & (segment_ids[:, None, :] > 0))[:, None, :, :]


def causal_mask(length: int) -> jax.Array:
    return jnp.tril(jnp.ones((length, length), dtype=bool))[None, None]


def attention_probs(q: jax.Array, k: jax.Array, mask: jax.Array | None) -> jax.Array:
    """q [B,T,N,H], k [B,S,N,H] -> float32 softmax(q k^T / sqrt(H)) [B,N,T,S], blocked keys at probability 0."""
    logits = jnp.einsum("btnh,bsnh->bnts", q, k).astype(jnp.float32) * q.shape[-1] ** -0.5
    if mask is not None:
        logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
    return jax.nn.softmax(logits, axis=-1)


def sow_probs(module: nn.Module, q: jax.Array, k: jax.Array, mask: jax.Array | None) -> None:
    """Keeps the attention probabilities in the 'intermediates' collection as ``attention_probs`` when the caller
    made it mutable (``ptm attention``: ``evaluate/attention_maps.py``); a no-op otherwise."""
    if module.is_mutable_collection("intermediates"):
        module.sow("intermediates", "attention_probs", attention_probs(q, k, mask))


def dot_product_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: jax.Array | None,
    *,
    dropout_rate: float,
    deterministic: bool,
    dropout_rng: jax.Array | None,
    implementation: str = "auto",
) -> jax.Array:
    """q [B,T,N,H], k/v [B,S,N,H], boolean mask broadcastable to [B,N,T,S] -> [B,T,N,H]."""
    if dropout_rate > 0.0 and not deterministic:
        probs = dropout(attention_probs(q, k, mask), dropout_rate, dropout_rng).astype(v.dtype)
        return jnp.einsum("bnts,bsnh->btnh", probs, v)
    impl = None if implementation == "auto" else implementation
    if mask is not None:
        mask = jnp.broadcast_to(mask, (q.shape[0], q.shape[2], q.shape[1], k.shape[1]))
    return jax.nn.dot_product_attention(q, k, v, mask=mask, implementation=impl)


class SelfAttention(nn.Module):
    """Multi-head self-attention with q/k/v/o projections named ('embed', 'heads', 'kv')."""

    num_heads: int
    head_dim: int
    dropout_rate: float
    init_std: float
    dtype: jnp.dtype = jnp.float32
    implementation: str = "auto"
    use_bias: bool = True

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array | None, deterministic: bool) -> jax.Array:
        def proj(name: str) -> jax.Array:
            return nn.DenseGeneral(
                (self.num_heads, self.head_dim),
                use_bias=self.use_bias,
                dtype=self.dtype,
                param_dtype=jnp.float32,
                kernel_init=partitioned(nn.initializers.truncated_normal(self.init_std), ("embed", "heads", "kv")),
                bias_init=partitioned(nn.initializers.zeros, ("heads", "kv")),
                name=name,
            )(x)

        q, k, v = proj("query"), proj("key"), proj("value")
        q = nn.with_logical_constraint(q, ("batch", "length", "act_heads", "act_kv"))
        sow_probs(self, q, k, mask)
        rng = None
        if self.dropout_rate > 0.0 and not deterministic:
            rng = self.make_rng("dropout")
        out = dot_product_attention(q, k, v, mask, dropout_rate=self.dropout_rate, deterministic=deterministic,
                                    dropout_rng=rng, implementation=self.implementation)
        return nn.DenseGeneral(
            x.shape[-1],
            axis=(-2, -1),
            use_bias=self.use_bias,
            dtype=self.dtype,
            param_dtype=jnp.float32,
            kernel_init=partitioned(nn.initializers.truncated_normal(self.init_std), ("heads", "kv", "embed")),
            bias_init=partitioned(nn.initializers.zeros, ("embed",)),
            name="output",
        )(out)
