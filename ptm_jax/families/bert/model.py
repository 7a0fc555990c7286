"""BERT encoder (Devlin et al. 2019, Sec. 3; google-research/bert modeling.py).

Token + segment + learned position embeddings -> LayerNorm -> dropout; post-LN Transformer blocks
(self-attention -> dropout -> add & norm -> FFN(gelu) -> dropout -> add & norm); pooler tanh(W h[CLS]).
Every parameter carries logical axis names; the model never sees the mesh.
"""
from __future__ import annotations

from typing import ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.families.bert.config import BertConfig
from ptm_jax.models.attention import SelfAttention, as_mask, padding_mask
from ptm_jax.models.dropout import Dropout
from ptm_jax.models.layers import (
    ACTIVATIONS,
    REMAT_POLICIES,
    Dense,
    LayerNorm,
    constrain,
    dtype_of,
    gather_positions,
    partitioned,
    truncated_normal,
)


class BertEmbeddings(nn.Module):
    cfg: BertConfig

    def setup(self) -> None:
        c, dt = self.cfg, dtype_of(self.cfg.dtype)

        def embed(num: int, axis: str) -> nn.Embed:
            return nn.Embed(num, c.hidden_size, dtype=dt, param_dtype=jnp.float32,
                            embedding_init=partitioned(truncated_normal(c.initializer_range), (axis, "embed")))

        self.word_embeddings = embed(c.vocab_size, "vocab")
        self.position_embeddings = embed(c.max_position_embeddings, "positions")
        self.token_type_embeddings = embed(c.type_vocab_size, "types")
        self.norm = LayerNorm(c.layer_norm_eps, dtype=dt)
        self.dropout = Dropout(c.hidden_dropout)

    def __call__(self, input_ids, segment_ids, position_ids, deterministic: bool) -> jax.Array:
        x = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        x = x + self.token_type_embeddings(segment_ids)
        x = self.dropout(self.norm(x), deterministic=deterministic)
        return constrain(x, ("batch", "length", "act_embed"))


class BertLayer(nn.Module):
    """One post-LN Transformer block."""

    cfg: BertConfig
    deterministic: bool = True

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        c, dt = self.cfg, dtype_of(self.cfg.dtype)
        attn = SelfAttention(c.num_heads, c.hidden_size // c.num_heads, c.attention_dropout, c.initializer_range,
                             dtype=dt, implementation=c.attention_impl, name="attention")(x, mask, self.deterministic)
        attn = Dropout(c.hidden_dropout)(attn, deterministic=self.deterministic)
        x = LayerNorm(c.layer_norm_eps, dtype=dt, name="attention_norm")(x + attn)
        h = Dense(c.intermediate_size, ("embed", "mlp"), c.initializer_range, dtype=dt, name="intermediate")(x)
        h = constrain(ACTIVATIONS[c.hidden_act](h), ("batch", "length", "act_mlp"))
        h = Dense(c.hidden_size, ("mlp", "embed"), c.initializer_range, dtype=dt, name="output")(h)
        h = Dropout(c.hidden_dropout)(h, deterministic=self.deterministic)
        x = LayerNorm(c.layer_norm_eps, dtype=dt, name="output_norm")(x + h)
        return constrain(x, ("batch", "length", "act_embed"))


class _ScannedLayer(nn.Module):
    cfg: BertConfig
    deterministic: bool = True

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array):
        return _layer_cls(self.cfg)(self.cfg, self.deterministic, name="layer")(x, mask), None


def _layer_cls(cfg: BertConfig) -> type[nn.Module]:
    if cfg.remat == "none":
        return BertLayer
    return nn.remat(BertLayer, policy=REMAT_POLICIES[cfg.remat], prevent_cse=not cfg.scan_layers)


class BertEncoder(nn.Module):
    """A stack of blocks: a Python loop (layers_0..N-1) or ``nn.scan`` (one stacked 'layers' axis)."""

    cfg: BertConfig

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array, deterministic: bool = True) -> jax.Array:
        c = self.cfg
        if c.scan_layers:
            stack = nn.scan(_ScannedLayer, variable_axes={"params": 0}, split_rngs={"params": True, "dropout": True},
                            in_axes=nn.broadcast, length=c.num_layers,
                            metadata_params={nn.PARTITION_NAME: "layers"})
            x, _ = stack(c, deterministic, name="layers")(x, mask)
            return x
        for i in range(c.num_layers):
            x = _layer_cls(c)(c, deterministic, name=f"layers_{i}")(x, mask)
        return x


class BertModel(nn.Module):
    """Encoder + pooler; returns (sequence_output [B,S,H], pooled_output [B,H]).

    A family that extends BERT's input (a further embedding added before the LayerNorm) subclasses it with its
    own ``embeddings_class``; keyword arguments the encoder does not take go to that class's ``__call__``."""

    cfg: BertConfig
    add_pooler: bool = True
    embeddings_class: ClassVar[type] = BertEmbeddings

    def setup(self) -> None:
        c = self.cfg
        self.embeddings = self.embeddings_class(c)
        self.encoder = BertEncoder(c)
        if self.add_pooler:
            self.pooler = Dense(c.hidden_size, ("embed", "embed_out"), c.initializer_range,
                                dtype=dtype_of(c.dtype))

    def __call__(self, input_ids, input_mask, segment_ids, position_ids=None, *, deterministic: bool = True,
                 attention_mask=None, cls_positions=None, embedding_hook=None, **embedding_inputs):
        """``attention_mask`` (a ``models.attention.AttentionMask``, or a boolean array broadcastable to
        [B, N, S, S]) replaces the padding mask (packed rows: ``segment_mask``, segment ids as such);
        ``cls_positions`` [B, K] pools K [CLS] states per row ([B, K, H]) instead of position 0 ([B, H]);
        ``embedding_hook``: a function [B, S, H] -> [B, S, H] applied to the embedding output (after its
        LayerNorm and dropout, before the first layer), where ConSERT perturbs a view (token/feature cutoff,
        adversarial noise: ``objectives/augmentations.py``; Yan et al. 2021 Sec. 3.2)."""
        if position_ids is None:
            position_ids = jnp.broadcast_to(jnp.arange(input_ids.shape[-1]), input_ids.shape)
        x = self.embeddings(input_ids, segment_ids, position_ids, deterministic, **embedding_inputs)
        if embedding_hook is not None:
            x = embedding_hook(x)
        mask = padding_mask(input_mask) if attention_mask is None else as_mask(attention_mask)
        x = self.encoder(x, mask, deterministic)
        pooled = None
        if self.add_pooler:
            first = x[:, 0] if cls_positions is None else gather_positions(x, cls_positions)
            pooled = jnp.tanh(self.pooler(first))
        return x, pooled

    def word_embedding_table(self) -> jax.Array:
        return self.embeddings.word_embeddings.embedding
