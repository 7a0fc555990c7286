"""XLNet (Yang et al. 2019; zihangdai/xlnet modeling.py ``transformer_xl``, transformers' modeling_xlnet.py).

A post-LN Transformer-XL whose layers run two-stream relative attention (``two_stream.py``) and a
position-wise FFN (dense -> activation -> dropout -> dense -> dropout -> add & norm) on both streams with
shared weights. The content stream starts from the word embeddings, the query stream from a learned
``mask_emb`` at each target. No absolute positions: sinusoid encodings of relative distances (XLNet's
bidirectional 'bi' attention: distances klen .. -qlen+1, clamped to ``clamp_len``).

Masks follow XLNet: ``input_mask`` [B, L] is 1.0 at PADDING (0.0 at real tokens); ``perm_mask`` [B, L, L]
is 1.0 where query i may NOT attend to key j (the factorization order); ``target_mapping`` [B, P, L] is
one-hot at each prediction's position (an all-zero row is a padding prediction). Memory positions are
visible to everyone and carry segment id 0. The content stream may always see itself; the query stream
may see itself only where ``perm_mask`` allows it (the data builder forbids it for targets).

Parameter tree (``{'params': ...}`` of ``XLNetModel``, under 'xlnet' in the heads):
``embeddings/{word_embedding/embedding [V, H], mask_emb [H]}``, ``encoder/layers_i/{attention/{q,k,v,r,o}/
kernel [H, N, D], attention/{r_w_bias, r_r_bias, r_s_bias} [N, D], attention/seg_embed [2, N, D],
attention/layer_norm, ff/{layer_1, layer_2, layer_norm}}`` (``encoder/layers/layer/...`` stacked when
``scan_layers``); with ``untie_r`` off the three biases live once at ``{r_w_bias, r_r_bias, r_s_bias}``.
"""
from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.families.xlnet.config import XlnetConfig
from ptm_jax.families.xlnet.two_stream import TwoStreamAttention
from ptm_jax.models.dropout import Dropout
from ptm_jax.models.layers import (
    ACTIVATIONS,
    REMAT_POLICIES,
    Dense,
    LayerNorm,
    constrain,
    dtype_of,
    partitioned,
)
from ptm_jax.models.relative_attention import RelBiases, cache_mem, relative_encoding


def _normal(cfg: XlnetConfig):
    return nn.initializers.normal(cfg.initializer_range)  # XLNet's init="normal", init_std


class FeedForward(nn.Module):
    cfg: XlnetConfig

    @nn.compact
    def __call__(self, x: jax.Array, deterministic: bool) -> jax.Array:
        c, dt = self.cfg, dtype_of(self.cfg.dtype)
        y = Dense(c.intermediate_size, ("embed", "mlp"), c.initializer_range, dtype=dt, name="layer_1")(x)
        y = constrain(ACTIVATIONS[c.hidden_act](y), ("batch", "length", "act_mlp"))
        y = Dropout(c.hidden_dropout)(y, deterministic=deterministic)
        y = Dense(c.hidden_size, ("mlp", "embed"), c.initializer_range, dtype=dt, name="layer_2")(y)
        y = Dropout(c.hidden_dropout)(y, deterministic=deterministic)
        return LayerNorm(c.layer_norm_eps, dtype=dt, name="layer_norm")(x + y)


class XLNetLayer(nn.Module):
    """Two-stream relative attention, then the FFN on each stream (shared weights)."""

    cfg: XlnetConfig
    deterministic: bool = True

    @nn.compact
    def __call__(self, h, g, mem, pos, seg_diff, mask_h, mask_g, target_mapping, biases):
        c, dt = self.cfg, dtype_of(self.cfg.dtype)
        h, g = TwoStreamAttention(c.num_heads, c.hidden_size // c.num_heads, c.initializer_range, c.hidden_dropout,
                                  c.attention_dropout, c.layer_norm_eps, dtype=dt, name="attention")(
            h, g, mem, pos, seg_diff, mask_h, mask_g, target_mapping, biases, self.deterministic)
        ff = FeedForward(c, name="ff")
        h = constrain(ff(h, self.deterministic), ("batch", "length", "act_embed"))
        if g is not None:
            g = constrain(ff(g, self.deterministic), ("batch", "predictions", "act_embed"))
        return h, g


def _layer_cls(cfg: XlnetConfig) -> type[nn.Module]:
    if cfg.remat == "none":
        return XLNetLayer
    return nn.remat(XLNetLayer, policy=REMAT_POLICIES[cfg.remat], prevent_cse=not cfg.scan_layers)


class _ScannedLayer(nn.Module):
    """Scan body: carry (h, g), this layer's memory in, its new memory out."""

    cfg: XlnetConfig
    reuse_len: int
    deterministic: bool = True

    @nn.compact
    def __call__(self, carry, mem, pos, seg_diff, mask_h, mask_g, target_mapping, biases):
        h, g = carry
        new_mem = cache_mem(h, mem, self.cfg.mem_len, self.reuse_len)
        carry = _layer_cls(self.cfg)(self.cfg, self.deterministic, name="layer")(
            h, g, mem, pos, seg_diff, mask_h, mask_g, target_mapping, biases)
        return carry, new_mem


class XLNetEncoder(nn.Module):
    """The layer stack: a Python loop (layers_0..N-1) or ``nn.scan`` (one stacked 'layers' axis)."""

    cfg: XlnetConfig
    reuse_len: int = 0

    @nn.compact
    def __call__(self, h, g, mems_NBMH, pos, seg_diff, mask_h, mask_g, target_mapping, biases,
                 deterministic: bool = True):
        c = self.cfg
        if c.scan_layers:
            stack = nn.scan(_ScannedLayer, variable_axes={"params": 0}, split_rngs={"params": True, "dropout": True},
                            in_axes=(0,) + (nn.broadcast,) * 6, length=c.num_layers,
                            metadata_params={nn.PARTITION_NAME: "layers"})
            (h, g), new = stack(c, self.reuse_len, deterministic, name="layers")(
                (h, g), mems_NBMH, pos, seg_diff, mask_h, mask_g, target_mapping, biases)
            return h, g, (None if new is None else list(new))
        new_mems = []
        for i in range(c.num_layers):
            new_mems.append(cache_mem(h, mems_NBMH[i], c.mem_len, self.reuse_len))
            h, g = _layer_cls(c)(c, deterministic, name=f"layers_{i}")(
                h, g, mems_NBMH[i], pos, seg_diff, mask_h, mask_g, target_mapping, biases)
        return h, g, (None if c.mem_len <= 0 else new_mems)


def attention_masks(input_mask: jax.Array | None, perm_mask: jax.Array | None, mlen: int
                    ) -> tuple[jax.Array | None, jax.Array | None]:
    """(content mask, query mask), boolean [B, 1, L, M + L], True where query i may attend to key j.
    Blocked: padding keys (``input_mask`` 1) and ``perm_mask`` 1; memory is never blocked; the content
    stream additionally always sees its own position. (None, None) when neither mask is given."""
    if input_mask is None and perm_mask is None:
        return None, None
    blocked = jnp.zeros((), jnp.float32)
    if input_mask is not None:
        blocked = blocked + input_mask.astype(jnp.float32)[:, None, :]
    if perm_mask is not None:
        blocked = blocked + perm_mask.astype(jnp.float32)
    blocked = blocked > 0  # [B, 1 or L, L]
    b, l = blocked.shape[0], blocked.shape[-1]
    blocked = jnp.concatenate([jnp.zeros((b, blocked.shape[1], mlen), bool), blocked], axis=-1)
    query = ~blocked
    content = query | jnp.eye(l, mlen + l, k=mlen, dtype=bool)[None]
    return content[:, None], query[:, None]


class XLNetEmbeddings(nn.Module):
    """Word embeddings (content stream input) and ``mask_emb`` (query stream input)."""

    cfg: XlnetConfig

    def setup(self) -> None:
        c = self.cfg
        self.word_embedding = nn.Embed(c.vocab_size, c.hidden_size, dtype=dtype_of(c.dtype), param_dtype=jnp.float32,
                                       embedding_init=partitioned(_normal(c), ("vocab", "embed")))
        self.mask_emb = self.param("mask_emb", partitioned(_normal(c), ("embed",)), (c.hidden_size,), jnp.float32)

    def __call__(self, input_ids: jax.Array) -> jax.Array:
        return self.word_embedding(input_ids)

    def query_start(self, shape: tuple[int, int]) -> jax.Array:
        return jnp.broadcast_to(self.mask_emb.astype(dtype_of(self.cfg.dtype)), tuple(shape) + (self.cfg.hidden_size,))


class XLNetModel(nn.Module):
    """The XLNet trunk. ``__call__`` -> (content [B, L, H], query [B, P, H] or None, new mems or None).

    ``reuse_len``: how many leading tokens of a segment the memory keeps (pretraining: data.reuse_len;
    0 = all); ``bi_data``: the second half of the batch is the reversed stream (pretraining only; the
    batch size must be even)."""

    cfg: XlnetConfig
    reuse_len: int = 0
    bi_data: bool = False

    def setup(self) -> None:
        c = self.cfg
        self.embeddings = XLNetEmbeddings(c)
        self.encoder = XLNetEncoder(c, self.reuse_len)
        if not c.untie_r:
            init = partitioned(_normal(c), ("heads", "kv"))
            shape = (c.num_heads, c.hidden_size // c.num_heads)
            self.r_w_bias = self.param("r_w_bias", init, shape, jnp.float32)
            self.r_r_bias = self.param("r_r_bias", init, shape, jnp.float32)
            self.r_s_bias = self.param("r_s_bias", init, shape, jnp.float32)
        self.dropout = Dropout(c.hidden_dropout)

    def __call__(self, input_ids: jax.Array, segment_ids: jax.Array | None = None,
                 input_mask: jax.Array | None = None, perm_mask: jax.Array | None = None,
                 target_mapping: jax.Array | None = None, mems: Sequence[jax.Array] | None = None, *,
                 deterministic: bool = True):
        c, dt = self.cfg, dtype_of(self.cfg.dtype)
        b, qlen = input_ids.shape
        if mems is None or len(mems) == 0:
            mems_NBMH = jnp.zeros((c.num_layers, b, 0, c.hidden_size), dt)
        elif isinstance(mems, jax.Array) and mems.ndim == 4:  # already stacked [layers, B, M, H]
            if mems.shape[0] != c.num_layers:
                raise ValueError(f"mems has {mems.shape[0]} layers; the model has {c.num_layers}")
            mems_NBMH = mems.astype(dt)
        else:
            if len(mems) != c.num_layers:
                raise ValueError(f"mems has {len(mems)} entries; the model has {c.num_layers} layers")
            mems_NBMH = jnp.stack([m.astype(dt) for m in mems])
        mlen = mems_NBMH.shape[2]
        mask_h, mask_g = attention_masks(input_mask, perm_mask, mlen)
        seg_diff = None
        if segment_ids is not None:
            cat_ids = jnp.concatenate([jnp.zeros((b, mlen), segment_ids.dtype), segment_ids], axis=1)
            seg_diff = segment_ids[:, :, None] != cat_ids[:, None, :]
        pos = relative_encoding(qlen, mlen + qlen, c.hidden_size, c.clamp_len, self.bi_data)
        if self.bi_data:
            if b % 2:
                raise ValueError(f"bi_data needs an even batch size, got {b}")
            pos = jnp.repeat(pos, b // 2, axis=0)
        if not deterministic and c.hidden_dropout > 0.0:  # one dropout mask per example, as the reference
            pos = jnp.broadcast_to(pos, (b,) + pos.shape[1:])
        pos = self.dropout(pos.astype(dt), deterministic=deterministic)

        h = self.dropout(self.embeddings(input_ids), deterministic=deterministic)
        h = constrain(h, ("batch", "length", "act_embed"))
        g = None
        if target_mapping is not None:
            g = self.dropout(self.embeddings.query_start(target_mapping.shape[:2]), deterministic=deterministic)
        biases = None if c.untie_r else RelBiases(self.r_w_bias, self.r_r_bias, self.r_s_bias)
        h, g, new_mems = self.encoder(h, g, mems_NBMH, pos, seg_diff, mask_h, mask_g, target_mapping, biases,
                                      deterministic)
        h = self.dropout(h, deterministic=deterministic)
        if g is not None:
            g = self.dropout(g, deterministic=deterministic)
        return h, g, new_mems

    def word_embedding_table(self) -> jax.Array:
        return self.embeddings.word_embedding.embedding


# ----------------------------------------------------------------------------------------------------
# Heads


class XLNetLMHeadModel(nn.Module):
    """XLNet + tied LM head: logits = out E^T + lm_bias over the vocabulary, float32, from the query stream
    at the P targets when ``target_mapping`` is given ([B, P, V]), else from the content stream ([B, L, V]).
    Returns (logits, new mems or None). Arguments as ``XLNetModel``."""

    cfg: XlnetConfig
    reuse_len: int = 0
    bi_data: bool = False

    def setup(self) -> None:
        self.xlnet = XLNetModel(self.cfg, self.reuse_len, self.bi_data)
        self.lm_bias = self.param("lm_bias", partitioned(nn.initializers.zeros, ("vocab",)), (self.cfg.vocab_size,),
                                  jnp.float32)

    def __call__(self, input_ids, segment_ids=None, input_mask=None, perm_mask=None, target_mapping=None,
                 mems=None, *, deterministic: bool = True):
        h, g, new_mems = self.xlnet(input_ids, segment_ids, input_mask, perm_mask, target_mapping, mems,
                                    deterministic=deterministic)
        out = g if g is not None else h
        table = self.xlnet.word_embedding_table().astype(out.dtype)
        logits = jnp.einsum("bph,vh->bpv", out, table, preferred_element_type=jnp.float32) + self.lm_bias
        return constrain(logits, ("batch", "predictions", "act_vocab")), new_mems


def last_real_token(x_BLH: jax.Array, input_mask: jax.Array | None) -> jax.Array:
    """[B, H] state of the last real token (XLNet puts <cls> last and pads on the left, where this is
    position L-1; with right padding it is the last unpadded position). ``input_mask``: 1 = real token."""
    if input_mask is None:
        return x_BLH[:, -1]
    length = x_BLH.shape[1]
    last = length - 1 - jnp.argmax(input_mask[:, ::-1] > 0, axis=1)
    return jnp.take_along_axis(x_BLH, last[:, None, None], axis=1)[:, 0]


def _padding(input_mask: jax.Array | None) -> jax.Array | None:
    """Task batches carry BERT's input_mask (1 = real token); XLNet's trunk takes 1 = padding."""
    return None if input_mask is None else 1.0 - input_mask.astype(jnp.float32)


class XLNetForSequenceClassification(nn.Module):
    """[B, num_labels] logits (1: regression). Sequence summary 'last' as transformers' XLNet: the last real
    token's content state -> dense(H, tanh) 'sequence_summary' -> dropout -> 'classifier'.
    ``input_mask`` follows the task batches (BERT convention: 1 = real token)."""

    cfg: XlnetConfig
    num_labels: int
    classifier_dropout: float = 0.1

    @nn.compact
    def __call__(self, input_ids, input_mask, segment_ids, *, deterministic: bool = True) -> jax.Array:
        c = self.cfg
        h, _, _ = XLNetModel(c, name="xlnet")(input_ids, segment_ids, _padding(input_mask),
                                              deterministic=deterministic)
        s = Dense(c.hidden_size, ("embed", "embed_out"), c.initializer_range, dtype=dtype_of(c.dtype),
                  name="sequence_summary")(last_real_token(h, input_mask))
        s = Dropout(self.classifier_dropout)(jnp.tanh(s), deterministic=deterministic)
        return Dense(self.num_labels, ("embed", "classes"), c.initializer_range, name="classifier")(s).astype(
            jnp.float32)


class XLNetForQuestionAnswering(nn.Module):
    """(start_logits [B, L], end_logits [B, L]) from the content states ('qa_outputs', as transformers'
    XLNetForQuestionAnsweringSimple); no query stream in finetuning. ``input_mask``: 1 = real token."""

    cfg: XlnetConfig

    @nn.compact
    def __call__(self, input_ids, input_mask, segment_ids, *, deterministic: bool = True):
        c = self.cfg
        h, _, _ = XLNetModel(c, name="xlnet")(input_ids, segment_ids, _padding(input_mask),
                                              deterministic=deterministic)
        logits = Dense(2, ("embed", "classes"), c.initializer_range, name="qa_outputs")(h).astype(jnp.float32)
        return logits[..., 0], logits[..., 1]
