"""ERNIE 1.0's network: BERT's encoder and pretraining heads (Sun et al. 2019 Sec. 3: "the same as BERT"),
imported from the BERT family. Only the params key of the encoder differs: the trunk is ``params["ernie"]``
(``TRUNK``), so ``registry.family_of_params`` tells an ERNIE tree from a BERT one; below the trunk every name is
BERT's (``embeddings``, ``encoder/layers_i``, ``pooler``), and the heads are ``mlm`` and ``nsp`` as in BERT."""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from ptm_jax.families.bert.config import BertConfig
from ptm_jax.families.bert.heads import MlmHead
from ptm_jax.families.bert.model import BertModel
from ptm_jax.models.layers import Dense, gather_positions

TRUNK = "ernie"


class ErnieForPreTraining(nn.Module):
    """BERT encoder (keyed "ernie") + tied MLM head + optional NSP head; same outputs as
    ``BertForPreTraining``: (mlm_logits [B,P,V], nsp_logits [B,2] or None)."""

    cfg: BertConfig
    with_nsp: bool = False

    def setup(self) -> None:
        self.ernie = BertModel(self.cfg)
        self.mlm = MlmHead(self.cfg)
        if self.with_nsp:
            self.nsp = Dense(2, ("embed", "classes"), self.cfg.initializer_range, name="nsp")

    def __call__(self, input_ids, input_mask, segment_ids, masked_lm_positions, *, deterministic: bool = True):
        seq, pooled = self.ernie(input_ids, input_mask, segment_ids, deterministic=deterministic)
        mlm_logits = self.mlm(gather_positions(seq, masked_lm_positions), self.ernie.word_embedding_table())
        nsp_logits = self.nsp(pooled).astype(jnp.float32) if self.with_nsp else None
        return mlm_logits, nsp_logits
