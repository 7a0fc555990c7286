"""ERNIE 2.0's network (Sun et al. 2020 Sec. 4.1-4.2): BERT's encoder whose input adds a task embedding (the
task id of the row, like transformers' ``ErnieModel`` with ``use_task_id``: word + position + segment + task,
then LayerNorm and dropout) and one head per pretraining task on the shared encoder:

* ``mlm``: BERT's tied masked-LM head (knowledge masking);
* ``capitalisation``, ``token_document``: two-way classifiers on every token's final state;
* ``reorder``: a k!-way classifier on the pooled [CLS] state; ``distance``: a three-way one.

The trunk is ``params["ernie2"]`` (``TRUNK``) with BERT's names below it (``embeddings`` gains
``task_embeddings``)."""
from __future__ import annotations

from typing import ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.families.bert.heads import MlmHead
from ptm_jax.families.bert.model import BertEmbeddings, BertModel
from ptm_jax.models.layers import (
    Dense,
    constrain,
    dtype_of,
    gather_positions,
    partitioned,
    truncated_normal,
)

TRUNK = "ernie2"
TASK_HEADS = ("capitalisation", "token_document", "reorder", "distance")
"""The pretraining heads besides the masked LM (``mlm``), in :class:`Ernie2ForPreTraining`."""


class TaskEmbeddings(BertEmbeddings):
    """BERT's embeddings plus a task-id table (``cfg.task_vocab_size`` rows): word + position + segment + task,
    then LayerNorm and dropout, as transformers' ``ErnieEmbeddings`` with ``use_task_id`` (models/ernie/
    modeling_ernie.py). ``task_ids`` [B] gives each row's task; None gives every row ``cfg.task_id``, the fixed
    task id of finetuning (the ERNIE repo's finetuning readers feed ``task_id`` = 0 to every token,
    PaddlePaddle/ERNIE reader/task_reader.py; transformers uses zeros when ``task_type_ids`` is None)."""

    def setup(self) -> None:
        super().setup()
        c = self.cfg
        self.task_embeddings = nn.Embed(c.task_vocab_size, c.hidden_size, dtype=dtype_of(c.dtype),
                                        param_dtype=jnp.float32, embedding_init=partitioned(
                                            truncated_normal(c.initializer_range), ("types", "embed")))

    def __call__(self, input_ids, segment_ids, position_ids, deterministic: bool, task_ids=None) -> jax.Array:
        if task_ids is None:
            task_ids = jnp.full(input_ids.shape[:1], self.cfg.task_id, jnp.int32)
        x = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        x = x + self.token_type_embeddings(segment_ids)
        x = x + self.task_embeddings(task_ids)[:, None, :]
        x = self.dropout(self.norm(x), deterministic=deterministic)
        return constrain(x, ("batch", "length", "act_embed"))


class Ernie2Model(BertModel):
    """BERT's encoder + pooler (``BertModel``: packed rows, ConSERT's embedding hook, no pooler for taggers) over
    :class:`TaskEmbeddings`; ``task_ids=`` [B] per row (pretraining), else ``cfg.task_id`` for every row.
    Returns (sequence_output [B,S,H], pooled_output [B,H])."""

    embeddings_class: ClassVar[type] = TaskEmbeddings


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
        seq, pooled = self.ernie2(input_ids, input_mask, segment_ids, task_ids=task_ids,
                                  deterministic=deterministic)
        f32 = jnp.float32
        return {"mlm": self.mlm(gather_positions(seq, masked_lm_positions), self.ernie2.word_embedding_table()),
                "capitalisation": self.capitalisation(seq).astype(f32),
                "token_document": self.token_document(seq).astype(f32),
                "reorder": self.reorder(pooled).astype(f32), "distance": self.distance(pooled).astype(f32)}
