"""ERNIE 2.0's network (Sun et al. 2020 Sec. 4.1-4.2): BERT's encoder whose input adds a task embedding (the
task id of the row, like transformers' ``ErnieModel`` with ``use_task_id``: word + position + segment + task,
then LayerNorm and dropout) and one head per pretraining task on the shared encoder:

* ``mlm``: BERT's tied masked-LM head (knowledge masking);
* ``capitalisation``, ``token_document``: two-way classifiers on every token's final state;
* ``reorder``: a k!-way classifier on the pooled [CLS] state; ``distance``: a three-way one.

The trunk is ``params["ernie2"]`` (``TRUNK``) with BERT's names below it (``embeddings`` gains
``task_embeddings``)."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.families.bert.heads import MlmHead
from ptm_jax.families.bert.model import BertEmbeddings, BertEncoder
from ptm_jax.models.attention import padding_mask
from ptm_jax.models.layers import (
    Dense,
    constrain,
    dtype_of,
    gather_positions,
    partitioned,
    truncated_normal,
)

TRUNK = "ernie2"


class TaskEmbeddings(BertEmbeddings):
    """BERT's embeddings plus a task-id table (``cfg.task_vocab_size`` rows)."""

    def setup(self) -> None:
        super().setup()
        c = self.cfg
        self.task_embeddings = nn.Embed(c.task_vocab_size, c.hidden_size, dtype=dtype_of(c.dtype),
                                        param_dtype=jnp.float32, embedding_init=partitioned(
                                            truncated_normal(c.initializer_range), ("types", "embed")))

    def __call__(self, input_ids, segment_ids, position_ids, deterministic: bool, task_ids=None) -> jax.Array:
        x = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        x = x + self.token_type_embeddings(segment_ids)
        if task_ids is not None:
            x = x + self.task_embeddings(task_ids)[:, None, :]
        x = self.dropout(self.norm(x), deterministic=deterministic)
        return constrain(x, ("batch", "length", "act_embed"))


class Ernie2Model(nn.Module):
    """Encoder + pooler with task embeddings; returns (sequence_output [B,S,H], pooled_output [B,H])."""

    cfg: object

    def setup(self) -> None:
        c = self.cfg
        self.embeddings = TaskEmbeddings(c)
        self.encoder = BertEncoder(c)
        self.pooler = Dense(c.hidden_size, ("embed", "embed_out"), c.initializer_range, dtype=dtype_of(c.dtype))

    def __call__(self, input_ids, input_mask, segment_ids, task_ids, *, deterministic: bool = True):
        position_ids = jnp.broadcast_to(jnp.arange(input_ids.shape[-1]), input_ids.shape)
        x = self.embeddings(input_ids, segment_ids, position_ids, deterministic, task_ids)
        x = self.encoder(x, padding_mask(input_mask), deterministic)
        return x, jnp.tanh(self.pooler(x[:, 0]))

    def word_embedding_table(self) -> jax.Array:
        return self.embeddings.word_embeddings.embedding


class Ernie2ForPreTraining(nn.Module):
    """The shared encoder and the five task heads; returns a dict of float32 logits: ``mlm`` [B,P,V],
    ``capitalisation`` and ``token_document`` [B,S,2], ``reorder`` [B,k!], ``distance`` [B,3]."""

    cfg: object
    reorder_classes: int = 6

    def setup(self) -> None:
        c = self.cfg
        self.ernie2 = Ernie2Model(c)
        self.mlm = MlmHead(c)
        init = c.initializer_range
        self.capitalisation = Dense(2, ("embed", "classes"), init)
        self.token_document = Dense(2, ("embed", "classes"), init)
        self.reorder = Dense(self.reorder_classes, ("embed", "classes"), init)
        self.distance = Dense(3, ("embed", "classes"), init)

    def __call__(self, input_ids, input_mask, segment_ids, task_ids, masked_lm_positions, *,
                 deterministic: bool = True) -> dict[str, jax.Array]:
        seq, pooled = self.ernie2(input_ids, input_mask, segment_ids, task_ids, deterministic=deterministic)
        f32 = jnp.float32
        return {"mlm": self.mlm(gather_positions(seq, masked_lm_positions), self.ernie2.word_embedding_table()),
                "capitalisation": self.capitalisation(seq).astype(f32),
                "token_document": self.token_document(seq).astype(f32),
                "reorder": self.reorder(pooled).astype(f32), "distance": self.distance(pooled).astype(f32)}
