"""Finetuning heads on one BERT encoder (Devlin et al. 2019, Sec. 4; google-research/bert run_classifier.py,
run_squad.py). Each reads the same encoder; names mirror the Hugging Face heads for checkpoint interop.

- sequence classification / regression: pooled [CLS] -> dropout -> [H, num_labels] ('classifier');
- token tagging: every token state -> dropout -> [H, num_labels] ('classifier');
- span extraction: every token state -> [H, 2] start/end logits ('qa_outputs'); SQuAD v2's null answer is
  the span (0, 0) at [CLS];
- multiple choice: one sequence per option, pooled -> dropout -> [H, 1], softmax over the options.
"""
from __future__ import annotations

from typing import ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.families.bert.config import BertConfig
from ptm_jax.families.bert.model import BertModel
from ptm_jax.models.attention import segment_mask
from ptm_jax.models.dropout import Dropout
from ptm_jax.models.layers import Dense


def _classifier(cfg: BertConfig, n: int, name: str) -> Dense:
    return Dense(n, ("embed", "classes"), cfg.initializer_range, name=name)


class BertForSequenceClassification(nn.Module):
    """[B, num_labels] logits (num_labels = 1: a regression score, STS-B)."""

    cfg: BertConfig
    num_labels: int
    classifier_dropout: float = 0.1
    trunk: str = "bert"
    """params key of the encoder (``ParamLayout.trunk``): a family reusing these heads names its own."""
    encoder_class: ClassVar[type] = BertModel
    """The encoder module (a family reusing these heads on a subclass of BERT's encoder names it)."""

    @nn.compact
    def __call__(self, input_ids, input_mask, segment_ids, *, deterministic: bool = True, packed=None) -> jax.Array:
        """``packed``: (position_ids, pack_ids, cls_positions [B, K]) of rows holding several examples
        (``data/tasks/packing.py``) -> [B, K, num_labels]; attention stays inside each example."""
        kw = {}
        if packed is not None:
            position_ids, pack_ids, cls_positions = packed
            kw = dict(position_ids=position_ids, attention_mask=segment_mask(pack_ids), cls_positions=cls_positions)
        _, pooled = self.encoder_class(self.cfg, name=self.trunk)(input_ids, input_mask, segment_ids,
                                                                  deterministic=deterministic, **kw)
        pooled = Dropout(self.classifier_dropout)(pooled, deterministic=deterministic)
        return _classifier(self.cfg, self.num_labels, "classifier")(pooled).astype(jnp.float32)


class BertForTokenClassification(nn.Module):
    """[B, S, num_labels] logits; the loss reads the first sub-word of each word only."""

    cfg: BertConfig
    num_labels: int
    classifier_dropout: float = 0.1
    trunk: str = "bert"
    """params key of the encoder (``ParamLayout.trunk``): a family reusing these heads names its own."""
    encoder_class: ClassVar[type] = BertModel
    """The encoder module (a family reusing these heads on a subclass of BERT's encoder names it)."""

    @nn.compact
    def __call__(self, input_ids, input_mask, segment_ids, *, deterministic: bool = True) -> jax.Array:
        seq, _ = self.encoder_class(self.cfg, add_pooler=False, name=self.trunk)(
            input_ids, input_mask, segment_ids, deterministic=deterministic)
        seq = Dropout(self.classifier_dropout)(seq, deterministic=deterministic)
        return _classifier(self.cfg, self.num_labels, "classifier")(seq).astype(jnp.float32)


class BertForQuestionAnswering(nn.Module):
    """(start_logits [B, S], end_logits [B, S])."""

    cfg: BertConfig
    trunk: str = "bert"
    """params key of the encoder (``ParamLayout.trunk``): a family reusing these heads names its own."""
    encoder_class: ClassVar[type] = BertModel
    """The encoder module (a family reusing these heads on a subclass of BERT's encoder names it)."""

    @nn.compact
    def __call__(self, input_ids, input_mask, segment_ids, *, deterministic: bool = True):
        seq, _ = self.encoder_class(self.cfg, add_pooler=False, name=self.trunk)(
            input_ids, input_mask, segment_ids, deterministic=deterministic)
        logits = _classifier(self.cfg, 2, "qa_outputs")(seq).astype(jnp.float32)
        return logits[..., 0], logits[..., 1]


class BertForMultipleChoice(nn.Module):
    """Inputs [B, C, S] (C options) -> [B, C] logits."""

    cfg: BertConfig
    classifier_dropout: float = 0.1
    trunk: str = "bert"
    """params key of the encoder (``ParamLayout.trunk``): a family reusing these heads names its own."""
    encoder_class: ClassVar[type] = BertModel
    """The encoder module (a family reusing these heads on a subclass of BERT's encoder names it)."""

    @nn.compact
    def __call__(self, input_ids, input_mask, segment_ids, *, deterministic: bool = True) -> jax.Array:
        b, c, s = input_ids.shape
        flat = lambda x: x.reshape(b * c, s)  # noqa: E731
        _, pooled = self.encoder_class(self.cfg, name=self.trunk)(flat(input_ids), flat(input_mask),
                                                                  flat(segment_ids), deterministic=deterministic)
        pooled = Dropout(self.classifier_dropout)(pooled, deterministic=deterministic)
        return _classifier(self.cfg, 1, "classifier")(pooled).astype(jnp.float32).reshape(b, c)
