"""Pretraining heads on a BERT encoder (google-research/bert run_pretraining.py).

The MLM head gathers the masked positions first, so the [.., V] logits exist only for the P predictions
per sequence, not for all S tokens (the fast path BERT itself used): dense(H, gelu) -> LayerNorm -> h E^T + b
with E the tied word-embedding table. The NSP head is a [H, 2] classifier on the pooled output.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.families.bert.config import BertConfig
from ptm_jax.families.bert.model import BertModel
from ptm_jax.models.layers import (
    ACTIVATIONS,
    Dense,
    LayerNorm,
    constrain,
    dtype_of,
    gather_positions,
    partitioned,
)


class MlmHead(nn.Module):
    cfg: BertConfig

    @nn.compact
    def __call__(self, h: jax.Array, embedding_table: jax.Array) -> jax.Array:
        c, dt = self.cfg, dtype_of(self.cfg.dtype)
        rows = ("batch", "predictions", "act_embed")
        h = Dense(c.hidden_size, ("embed", "embed_out"), c.initializer_range, dtype=dt, name="transform")(
            constrain(h, rows))
        # the transform's activation is pinned to the batch sharding on both sides of the nonlinearity: left to
        # itself, XLA's partitioner (jax 0.10, Shardy and GSPMD) got this head's gradients wrong with one row per
        # (data, fsdp) shard on a (2,2,2) mesh (benchmarks/xla_one_row_shard_repro.py, tests/test_one_row_shards.py)
        h = constrain(ACTIVATIONS[c.hidden_act](constrain(h, rows)), rows)
        h = LayerNorm(c.layer_norm_eps, dtype=dt, name="transform_norm")(h)
        bias = self.param("output_bias", partitioned(nn.initializers.zeros, ("vocab",)), (c.vocab_size,),
                          jnp.float32)
        logits = jnp.einsum("bph,vh->bpv", h, embedding_table.astype(dt)).astype(jnp.float32) + bias
        return constrain(logits, ("batch", "predictions", "act_vocab"))


class BertForPreTraining(nn.Module):
    """BERT + MLM head (tied) + NSP head. Returns (mlm_logits [B,P,V], nsp_logits [B,2] or None)."""

    cfg: BertConfig
    with_nsp: bool = True

    def setup(self) -> None:
        self.bert = BertModel(self.cfg)
        self.mlm = MlmHead(self.cfg)
        if self.with_nsp:
            self.nsp = Dense(2, ("embed", "classes"), self.cfg.initializer_range, name="nsp")

    def __call__(self, input_ids, input_mask, segment_ids, masked_lm_positions, *, deterministic: bool = True):
        seq, pooled = self.bert(input_ids, input_mask, segment_ids, deterministic=deterministic)
        mlm_logits = self.mlm(gather_positions(seq, masked_lm_positions), self.bert.word_embedding_table())
        nsp_logits = self.nsp(pooled).astype(jnp.float32) if self.with_nsp else None
        return mlm_logits, nsp_logits
