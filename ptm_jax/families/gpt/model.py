"""GPT decoder (Radford et al. 2018 Sec. 3.1; Radford et al. 2019 Sec. 2.3; openai/gpt-2 src/model.py).

Token + learned position embeddings -> dropout -> N causal Transformer blocks; GPT-1 blocks are post-LN
(``x = LN(x + attn(x))``), GPT-2 blocks are pre-LN (``x = x + attn(LN(x))``) with a final LayerNorm.
Weights are drawn from N(0, initializer_range); GPT-2 scales the two residual output projections of each
block by 1/sqrt(2 * num_layers) and draws positions from N(0, 0.01) (2019 paper Sec. 2.3; openai/gpt-2 model.py).
The output layer is tied to the token embedding.

Attention is causal within a segment: ``segment_ids`` (1..n = document index in a packed row, 0 = padding)
restrict a token to earlier tokens of its own document (padding tokens see earlier padding). Training passes
causality and segments as such to ``models/attention.py`` (``is_causal`` + segment ids), never a dense mask. In decode mode every layer keeps a fixed-size key /
value cache (plus the keys' segment ids) in the Flax ``cache`` collection, so each new token attends over the
same ``cache_length`` slots whatever the prompt length. Parameter layout (loop): gpt/{wte, wpe,
decoder/layers_i/{ln_1, attn/{query,key,value,output}, ln_2, mlp/{fc,proj}}, ln_f}; scan layout:
gpt/decoder/layers/layer with a leading layer axis.
"""
from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.families.gpt.config import GptConfig
from ptm_jax.models.attention import AttentionMask, call_site_seed, dot_product_attention, sow_probs
from ptm_jax.models.dropout import Dropout
from ptm_jax.models.layers import (
    ACTIVATIONS,
    REMAT_POLICIES,
    LayerNorm,
    constrain,
    dtype_of,
    partitioned,
)

normal = nn.initializers.normal


def residual_std(cfg: GptConfig) -> float:
    """Init std of the residual output projections: scaled by 1/sqrt(2N) for GPT-2 (pre-LN), plain for GPT-1."""
    if cfg.layer_norm_position == "pre":
        return cfg.initializer_range / math.sqrt(2 * cfg.num_layers)
    return cfg.initializer_range


def default_positions(segment_ids: jax.Array | None, shape: tuple[int, ...]) -> jax.Array:
    """0..L-1, restarting at 0 wherever the segment id changes (each packed document starts at position 0)."""
    idx = jnp.broadcast_to(jnp.arange(shape[-1], dtype=jnp.int32), shape)
    if segment_ids is None:
        return idx
    starts = jnp.concatenate([jnp.ones_like(segment_ids[:, :1], bool),
                              segment_ids[:, 1:] != segment_ids[:, :-1]], axis=1)
    return idx - jax.lax.cummax(jnp.where(starts, idx, 0), axis=1)


def causal_segment_mask(q_segments: jax.Array, k_segments: jax.Array, q_offset: jax.Array | int) -> jax.Array:
    """[B,T] query / [B,S] key segment ids, queries at absolute positions q_offset..q_offset+T-1 ->
    boolean [B,1,T,S]: key j is visible iff j <= i, same segment, key segment > 0. A padding query sees
    itself only, so no softmax row is empty."""
    t, s = q_segments.shape[1], k_segments.shape[1]
    q_pos = q_offset + jnp.arange(t)[:, None]
    k_pos = jnp.arange(s)[None, :]
    same = (q_segments[:, :, None] == k_segments[:, None, :]) & (k_segments[:, None, :] > 0)
    mask = (same & (k_pos <= q_pos)[None]) | (k_pos == q_pos)[None]
    return mask[:, None]


class _StackModule(nn.Module):
    """The settings every module of the block stack carries: the config, ``deterministic`` (no dropout),
    ``decode`` (the KV cache) and ``cache_length`` (its slots; 0 = ``max_position_embeddings``)."""

    cfg: GptConfig
    deterministic: bool = True
    decode: bool = False
    cache_length: int = 0


class CausalSelfAttention(_StackModule):
    """Multi-head causal self-attention; q/k/v [embed, heads, kv], output [heads, kv, embed]."""

    @nn.compact
    def __call__(self, x: jax.Array, segment_ids: jax.Array) -> jax.Array:
        c, dt = self.cfg, dtype_of(self.cfg.dtype)
        n, d = c.num_heads, c.hidden_size // c.num_heads

        def proj(name: str) -> jax.Array:
            return nn.DenseGeneral((n, d), dtype=dt, param_dtype=jnp.float32,
                                   kernel_init=partitioned(normal(c.initializer_range), ("embed", "heads", "kv")),
                                   bias_init=partitioned(nn.initializers.zeros, ("heads", "kv")), name=name)(x)

        q, k, v = proj("query"), proj("key"), proj("value")
        q = constrain(q, ("batch", "length", "act_heads", "act_kv"))
        if self.decode:  # queries at a traced offset into the cache: a dense mask
            k, v, k_segments, offset = self._cached(k, v, segment_ids)
            mask = AttentionMask(dense=causal_segment_mask(segment_ids, k_segments, offset))
        else:  # causality and packed documents as such (cuDNN and splash skip the upper triangle)
            mask = AttentionMask(causal=True, segments=None if segment_ids is None else (segment_ids, segment_ids))
        sow_probs(self, q, k, mask)
        rng = self.make_rng("dropout") if c.attention_dropout > 0.0 and not self.deterministic else None
        out = dot_product_attention(q, k, v, mask, dropout_rate=c.attention_dropout,
                                    deterministic=self.deterministic, dropout_rng=rng,
                                    implementation=c.attention_impl, cudnn_seed=call_site_seed(self))
        return nn.DenseGeneral(x.shape[-1], axis=(-2, -1), dtype=dt, param_dtype=jnp.float32,
                               kernel_init=partitioned(normal(residual_std(c)), ("heads", "kv", "embed")),
                               bias_init=partitioned(nn.initializers.zeros, ("embed",)), name="output")(out)

    def _cached(self, k: jax.Array, v: jax.Array, segment_ids: jax.Array):
        """Writes the new keys/values at the cache index; returns the whole cache and the old index."""
        b, t, n, d = k.shape
        length = self.cache_length or self.cfg.max_position_embeddings
        ck = self.variable("cache", "cached_key", jnp.zeros, (b, length, n, d), k.dtype)
        cv = self.variable("cache", "cached_value", jnp.zeros, (b, length, n, d), v.dtype)
        cs = self.variable("cache", "cached_segments", jnp.zeros, (b, length), jnp.int32)
        ci = self.variable("cache", "cache_index", lambda: jnp.zeros((), jnp.int32))
        idx = ci.value
        ck.value = jax.lax.dynamic_update_slice(ck.value, k.astype(ck.value.dtype), (0, idx, 0, 0))
        cv.value = jax.lax.dynamic_update_slice(cv.value, v.astype(cv.value.dtype), (0, idx, 0, 0))
        cs.value = jax.lax.dynamic_update_slice(cs.value, segment_ids.astype(jnp.int32), (0, idx))
        ci.value = idx + t
        return ck.value, cv.value, cs.value, idx


class GPTMlp(nn.Module):
    cfg: GptConfig

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c, dt = self.cfg, dtype_of(self.cfg.dtype)
        h = nn.Dense(c.intermediate_size, dtype=dt, param_dtype=jnp.float32,
                     kernel_init=partitioned(normal(c.initializer_range), ("embed", "mlp")),
                     bias_init=partitioned(nn.initializers.zeros, ("mlp",)), name="fc")(x)
        h = constrain(ACTIVATIONS[c.hidden_act](h), ("batch", "length", "act_mlp"))
        return nn.Dense(c.hidden_size, dtype=dt, param_dtype=jnp.float32,
                        kernel_init=partitioned(normal(residual_std(c)), ("mlp", "embed")),
                        bias_init=partitioned(nn.initializers.zeros, ("embed",)), name="proj")(h)


class GPTBlock(_StackModule):
    """One block: post-LN (GPT-1) or pre-LN (GPT-2), residual dropout after attention and after the MLP."""

    @nn.compact
    def __call__(self, x: jax.Array, segment_ids: jax.Array) -> jax.Array:
        c, dt = self.cfg, dtype_of(self.cfg.dtype)
        attn = CausalSelfAttention(c, self.deterministic, self.decode, self.cache_length, name="attn")
        mlp = GPTMlp(c, name="mlp")
        ln_1 = LayerNorm(c.layer_norm_eps, dtype=dt, name="ln_1")
        ln_2 = LayerNorm(c.layer_norm_eps, dtype=dt, name="ln_2")
        drop = Dropout(c.hidden_dropout)
        if c.layer_norm_position == "pre":
            x = x + drop(attn(ln_1(x), segment_ids), deterministic=self.deterministic)
            x = x + drop(mlp(ln_2(x)), deterministic=self.deterministic)
        else:
            x = ln_1(x + drop(attn(x, segment_ids), deterministic=self.deterministic))
            x = ln_2(x + drop(mlp(x), deterministic=self.deterministic))
        return constrain(x, ("batch", "length", "act_embed"))


def _block_cls(cfg: GptConfig, decode: bool) -> type[nn.Module]:
    if cfg.remat == "none" or decode:
        return GPTBlock
    return nn.remat(GPTBlock, policy=REMAT_POLICIES[cfg.remat], prevent_cse=not cfg.scan_layers)


class _ScannedBlock(_StackModule):
    @nn.compact
    def __call__(self, x: jax.Array, segment_ids: jax.Array):
        block = _block_cls(self.cfg, self.decode)
        return block(self.cfg, self.deterministic, self.decode, self.cache_length, name="layer")(x, segment_ids), None


class GPTDecoder(nn.Module):
    """The block stack: a Python loop (layers_0..N-1) or ``nn.scan`` (one stacked 'layers' axis)."""

    cfg: GptConfig
    cache_length: int = 0

    @nn.compact
    def __call__(self, x: jax.Array, segment_ids: jax.Array, deterministic: bool, decode: bool) -> jax.Array:
        c = self.cfg
        if c.scan_layers:
            stack = nn.scan(_ScannedBlock, variable_axes={"params": 0, "cache": 0},
                            split_rngs={"params": True, "dropout": True}, in_axes=nn.broadcast,
                            length=c.num_layers, metadata_params={nn.PARTITION_NAME: "layers"})
            x, _ = stack(c, deterministic, decode, self.cache_length, name="layers")(x, segment_ids)
            return x
        block = _block_cls(c, decode)
        for i in range(c.num_layers):
            x = block(c, deterministic, decode, self.cache_length, name=f"layers_{i}")(x, segment_ids)
        return x


class GPTModel(nn.Module):
    """The trunk. ``__call__(input_ids [B,L], segment_ids [B,L] | None, position_ids [B,L] | None,
    *, deterministic, decode) -> hidden [B,L,H]`` (after the final LayerNorm for pre-LN).

    ``segment_ids`` None = plain causal attention over the row. ``position_ids`` None = 0..L-1 restarting at
    every segment change (decode mode: continuing from the tokens already cached; pass position_ids on every
    decode call or on none). ``cache_length`` is the decode cache size (0 = ``max_position_embeddings``)."""

    cfg: GptConfig
    cache_length: int = 0

    @nn.compact
    def __call__(self, input_ids: jax.Array, segment_ids: jax.Array | None = None,
                 position_ids: jax.Array | None = None, *, deterministic: bool = True,
                 decode: bool = False) -> jax.Array:
        c, dt = self.cfg, dtype_of(self.cfg.dtype)
        wpe_std = 0.01 if c.layer_norm_position == "pre" else c.initializer_range
        wte = nn.Embed(c.vocab_size, c.hidden_size, dtype=dt, param_dtype=jnp.float32,
                       embedding_init=partitioned(normal(c.initializer_range), ("vocab", "embed")), name="wte")
        wpe = nn.Embed(c.max_position_embeddings, c.hidden_size, dtype=dt, param_dtype=jnp.float32,
                       embedding_init=partitioned(normal(wpe_std), ("positions", "embed")), name="wpe")
        if position_ids is None:
            position_ids = default_positions(segment_ids, input_ids.shape)
            if decode:
                start = self.variable("cache", "position_index", lambda: jnp.zeros((), jnp.int32))
                position_ids = position_ids + start.value
                start.value = start.value + input_ids.shape[1]
        if segment_ids is None and decode:  # the cache keeps the keys' segments
            segment_ids = jnp.ones_like(input_ids, dtype=jnp.int32)
        if segment_ids is not None:
            segment_ids = segment_ids.astype(jnp.int32)
        x = wte(input_ids) + wpe(position_ids)
        x = Dropout(c.hidden_dropout)(x, deterministic=deterministic)
        x = constrain(x, ("batch", "length", "act_embed"))
        x = GPTDecoder(c, self.cache_length, name="decoder")(x, segment_ids, deterministic, decode)
        if c.layer_norm_position == "pre":
            x = LayerNorm(c.layer_norm_eps, dtype=dt, name="ln_f")(x)
        return x

    def embedding_table(self) -> jax.Array:
        return nn.meta.unbox(self.variables["params"]["wte"]["embedding"])


class GPTLMHeadModel(nn.Module):
    """GPT + tied LM head; params {'gpt': trunk}. Returns (logits [B,L,V] float32, hidden [B,L,H])."""

    cfg: GptConfig
    cache_length: int = 0

    def setup(self) -> None:
        self.gpt = GPTModel(self.cfg, self.cache_length)

    def __call__(self, input_ids: jax.Array, segment_ids: jax.Array | None = None,
                 position_ids: jax.Array | None = None, *, deterministic: bool = True,
                 decode: bool = False) -> tuple[jax.Array, jax.Array]:
        hidden = self.gpt(input_ids, segment_ids, position_ids, deterministic=deterministic, decode=decode)
        return self.logits(hidden), hidden

    def logits(self, hidden: jax.Array) -> jax.Array:
        """hidden [..., H] -> float32 logits [..., V] through the tied token embedding (no bias)."""
        dt = dtype_of(self.cfg.dtype)
        table = self.gpt.embedding_table().astype(dt)
        out = jnp.einsum("...h,vh->...v", hidden.astype(dt), table).astype(jnp.float32)
        return constrain(out, ("batch", "length", "act_vocab")) if out.ndim == 3 else out
