"""Transformer-XL (Dai et al. 2019; kimiyoung/transformer-xl ``pytorch/mem_transformer.py`` ``MemTransformerLM``
with ``attn_type=0``; transformers' ``TransfoXLModel`` / ``TransfoXLLMHeadModel``).

A causal decoder whose layers attend over [memory; segment] (Sec. 3.2): the memory of layer n is the last
``mem_len`` inputs of layer n from earlier segments, never differentiated (``models/relative_attention.cache_mem``).
No absolute positions: each layer scores content and relative position with the learned u/v biases (Sec. 3.3;
``models/relative_attention.rel_attention_core`` without XLNet's segment term, sinusoids of distances K .. 0).
Post-LN blocks (attention -> dropout -> add & norm, FFN relu -> dropout -> linear -> dropout -> add & norm), or
pre-LN with ``pre_lnorm``; dropout on the embeddings, on the position encodings (one mask for the batch) and on
the last layer's output. Inputs are adaptive embeddings, outputs an adaptive log-softmax (``adaptive.py``).

Memory positions a row does not have yet (its first segment, a reset row) are masked by ``mem_valid`` [B]: the
number of real states at the end of the memory. ``mems=None`` is no memory at all (the reference's empty
``init_mems``); transformers' model instead starts from ``mem_len`` zero states, which is ``mems`` of zeros with
every position valid.

Parameter tree (``{'params': ...}`` of ``TransfoXLLMHeadModel``): ``transfo_xl/word_emb/...`` (``adaptive.py``),
``transfo_xl/decoder/layers_i/{attn/{q,k,v,r,o}/kernel [H, N, D], attn/{r_w_bias, r_r_bias} [N, D],
attn/layer_norm, ff/{layer_1, layer_2, layer_norm}}`` (``r_w_bias``/``r_r_bias`` once under ``transfo_xl`` when
``untie_r`` is off) and the head ``softmax/...``.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.families.transfo_xl.adaptive import AdaptiveEmbedding, AdaptiveLogSoftmax
from ptm_jax.families.transfo_xl.config import TransfoXlConfig
from ptm_jax.models.dropout import Dropout
from ptm_jax.models.layers import ACTIVATIONS, REMAT_POLICIES, Dense, LayerNorm, constrain, dtype_of, partitioned
from ptm_jax.models.relative_attention import (
    HeadProjection,
    RelBiases,
    cache_mem,
    rel_attention_core,
    relative_encoding,
)


def attention_mask(qlen: int, mlen: int, mem_len: int, same_length: bool, mem_valid: jax.Array | None
                   ) -> jax.Array:
    """Boolean [B or 1, 1, L, M + L], True where query i may attend to key j: causal over [memory; segment]
    (j <= M + i), with ``same_length`` only the last ``mem_len`` keys (transformers' ``dec_attn_mask``), and
    memory position j only when it is among the row's last ``mem_valid`` states."""
    i = jnp.arange(qlen)[:, None]
    j = jnp.arange(mlen + qlen)[None, :]
    ok = j <= mlen + i
    if same_length:
        mask_len = mlen + qlen - mem_len
        shift = qlen - mask_len if mask_len > 0 else qlen
        ok = ok & (j > i - shift)
    ok = ok[None, None]
    if mem_valid is not None and mlen > 0:
        real = (j >= mlen - mem_valid[:, None]) | (j >= mlen)  # [B, K]
        ok = ok & real[:, None, None, :]
    return ok


class RelPartialLearnableAttention(nn.Module):
    """One layer's relative attention over [memory; h] with the residual and LayerNorm (post- or pre-LN)."""

    cfg: TransfoXlConfig

    @nn.compact
    def __call__(self, h_BLH, mem_BMH, pos_1RH, mask, biases: RelBiases | None, deterministic: bool):
        c, dt = self.cfg, dtype_of(self.cfg.dtype)
        n, d, hid = c.num_heads, c.d_head, c.hidden_size

        def proj(name: str) -> HeadProjection:
            return HeadProjection(hid, n, d, c.initializer_range, dt, name=name)

        if biases is None:
            init = partitioned(nn.initializers.normal(c.initializer_range), ("heads", "kv"))
            biases = RelBiases(self.param("r_w_bias", init, (n, d), jnp.float32),
                               self.param("r_r_bias", init, (n, d), jnp.float32))
        norm = LayerNorm(c.layer_norm_eps, dtype=dt, name="layer_norm")
        cat = jnp.concatenate([mem_BMH.astype(dt), h_BLH], axis=1)
        if c.pre_lnorm:
            cat = norm(cat)
        q = proj("q")(cat[:, mem_BMH.shape[1]:])
        k, v = proj("k")(cat), proj("v")(cat)
        r = proj("r")(pos_1RH.astype(dt))
        rng = self.make_rng("dropout") if c.attention_dropout > 0.0 and not deterministic else None
        sow = None
        if self.is_mutable_collection("intermediates"):
            sow = lambda p: self.sow("intermediates", "attention_probs", p)  # noqa: E731
        vec = rel_attention_core(q, k, v, r, biases, None, None, mask, dropout_rate=c.attention_dropout,
                                 dropout_rng=rng, on_probs=sow)
        out = Dropout(c.hidden_dropout)(proj("o").back(vec), deterministic=deterministic)
        return h_BLH + out if c.pre_lnorm else norm(h_BLH + out)


class PositionwiseFF(nn.Module):
    cfg: TransfoXlConfig

    @nn.compact
    def __call__(self, x: jax.Array, deterministic: bool) -> jax.Array:
        c, dt = self.cfg, dtype_of(self.cfg.dtype)
        norm = LayerNorm(c.layer_norm_eps, dtype=dt, name="layer_norm")
        y = norm(x) if c.pre_lnorm else x
        y = Dense(c.intermediate_size, ("embed", "mlp"), c.initializer_range, dtype=dt, name="layer_1")(y)
        y = constrain(ACTIVATIONS[c.hidden_act](y), ("batch", "length", "act_mlp"))
        y = Dropout(c.hidden_dropout)(y, deterministic=deterministic)
        y = Dense(c.hidden_size, ("mlp", "embed"), c.initializer_range, dtype=dt, name="layer_2")(y)
        y = Dropout(c.hidden_dropout)(y, deterministic=deterministic)
        return x + y if c.pre_lnorm else norm(x + y)


class TransfoXLLayer(nn.Module):
    cfg: TransfoXlConfig
    deterministic: bool = True

    @nn.compact
    def __call__(self, h, mem, pos, mask, biases):
        h = RelPartialLearnableAttention(self.cfg, name="attn")(h, mem, pos, mask, biases, self.deterministic)
        h = PositionwiseFF(self.cfg, name="ff")(h, self.deterministic)
        return constrain(h, ("batch", "length", "act_embed"))


def _layer_cls(cfg: TransfoXlConfig) -> type[nn.Module]:
    if cfg.remat == "none":
        return TransfoXLLayer
    return nn.remat(TransfoXLLayer, policy=REMAT_POLICIES[cfg.remat])


class TransfoXLDecoder(nn.Module):
    cfg: TransfoXlConfig

    @nn.compact
    def __call__(self, h, mems_NBMH, pos, mask, biases, deterministic: bool = True):
        c = self.cfg
        new_mems = []
        for i in range(c.num_layers):
            new_mems.append(cache_mem(h, mems_NBMH[i], c.mem_len))
            h = _layer_cls(c)(c, deterministic, name=f"layers_{i}")(h, mems_NBMH[i], pos, mask, biases)
        return h, (None if c.mem_len <= 0 else jnp.stack(new_mems))


class TransfoXLModel(nn.Module):
    """The trunk: ``__call__(input_ids [B, L], mems [layers, B, M, H] or None, mem_valid [B] or None)`` ->
    (last hidden states [B, L, H], new mems [layers, B, M', H] or None (``mem_len`` 0), new mem_valid [B])."""

    cfg: TransfoXlConfig

    def setup(self) -> None:
        c = self.cfg
        self.word_emb = AdaptiveEmbedding(c)
        self.decoder = TransfoXLDecoder(c)
        if not c.untie_r:
            init = partitioned(nn.initializers.normal(c.initializer_range), ("heads", "kv"))
            self.r_w_bias = self.param("r_w_bias", init, (c.num_heads, c.d_head), jnp.float32)
            self.r_r_bias = self.param("r_r_bias", init, (c.num_heads, c.d_head), jnp.float32)
        self.drop = Dropout(c.hidden_dropout)

    def __call__(self, input_ids: jax.Array, mems: jax.Array | None = None, mem_valid: jax.Array | None = None, *,
                 deterministic: bool = True):
        c, dt = self.cfg, dtype_of(self.cfg.dtype)
        b, qlen = input_ids.shape
        if mems is None:
            mems = jnp.zeros((c.num_layers, b, 0, c.hidden_size), dt)
        elif mems.ndim != 4 or mems.shape[0] != c.num_layers or mems.shape[1] != b:
            raise ValueError(f"mems has shape {mems.shape}; expected [{c.num_layers}, {b}, M, {c.hidden_size}]")
        mlen = mems.shape[2]
        valid = jnp.full((b,), mlen, jnp.int32) if mem_valid is None else mem_valid.astype(jnp.int32)
        mask = attention_mask(qlen, mlen, c.mem_len, c.same_length, valid if mem_valid is not None else None)
        pos = relative_encoding(qlen, mlen + qlen, c.hidden_size, c.clamp_len, attn_type="uni")
        pos = self.drop(pos.astype(dt), deterministic=deterministic)
        h = self.drop(self.word_emb(input_ids), deterministic=deterministic)
        h = constrain(h, ("batch", "length", "act_embed"))
        biases = None if c.untie_r else RelBiases(self.r_w_bias, self.r_r_bias)
        h, new_mems = self.decoder(h, mems.astype(dt), pos, mask, biases, deterministic)
        h = self.drop(h, deterministic=deterministic)
        new_valid = jnp.minimum(valid + qlen, min(mlen + qlen, c.mem_len))
        return h, new_mems, new_valid

    def output_embeddings(self) -> tuple[list[jax.Array], list[jax.Array | None]]:
        return self.word_emb.tables(), self.word_emb.projections()


class TransfoXLLMHeadModel(nn.Module):
    """Trunk + tied adaptive softmax: ``__call__`` (arguments as ``TransfoXLModel``) -> (float32 log-probabilities
    [B, L, V] of the next token at every position, new mems, new mem_valid). transformers' ``prediction_scores``
    are these log-probabilities."""

    cfg: TransfoXlConfig

    def setup(self) -> None:
        self.transfo_xl = TransfoXLModel(self.cfg)
        self.softmax = AdaptiveLogSoftmax(self.cfg)

    def __call__(self, input_ids, mems=None, mem_valid=None, *, deterministic: bool = True):
        h, new_mems, new_valid = self.transfo_xl(input_ids, mems, mem_valid, deterministic=deterministic)
        tables, projs = self.transfo_xl.output_embeddings()
        logp = self.softmax(h, tables, projs)
        return constrain(logp, ("batch", "length", "act_vocab")), new_mems, new_valid
