"""BERT sequence classification on packed rows (``packing.pack_examples=true``; data/tasks/packing.py).

Training rows hold up to ``packing.max_examples_per_row`` examples, each attending only to itself
(``segment_mask`` of the pack ids), with positions from 0 and its own [CLS] pooled; the loss is the mean over the
examples of the batch, as unpacked. ``finetune.batch_size`` counts rows, so a step sees about
(row length / mean example length) times more examples: the step count of an epoch shrinks by that factor.
Evaluation keeps one example per row, in order, so metrics and prediction files are the unpacked path's.
"""
from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp

from ptm_jax.config import FinetuneConfig
from ptm_jax.models.config import TransformerConfig
from ptm_jax.data.tasks.glue import Example, TaskSpec
from ptm_jax.data.tasks.packing import one_per_row, pack_examples
from ptm_jax.data.tasks.sections import PackingConfig
from ptm_jax.objectives.classification import SequenceClassificationObjective


class PackedSequenceClassificationObjective(SequenceClassificationObjective):
    """The ``[packing]`` section comes as ``packing`` (its defaults when None; ``config.bind_sections``)."""

    config_sections = ("packing",)

    def __init__(self, model_cfg: TransformerConfig, spec: TaskSpec, train: Sequence[Example] | None,
                 dev: Sequence[Example], tokenizer, fcfg: FinetuneConfig, *, packing: PackingConfig | None = None):
        super().__init__(model_cfg, spec, train, dev, tokenizer, fcfg)
        k = (packing or PackingConfig()).max_examples_per_row
        self.num_examples = self.num_train
        if self.train is not None:  # None: evaluation only
            self.train = pack_examples(self.train, k, fcfg.seed)
            self.num_train = len(self.train["input_ids"])  # rows: the loop's epochs and data cursor count rows
        if self.dev is not None:
            self.dev = one_per_row(self.dev, k)

    def init(self, rng, batch):
        b = {k: jnp.asarray(v[:1]) for k, v in batch.items()}
        return self.model.init(rng, b["input_ids"], b["input_mask"], b["segment_ids"],
                               packed=(b["position_ids"], b["pack_ids"], b["cls_positions"]))

    def _logits(self, params, batch, rng, train: bool):
        rngs = {"dropout": rng} if train and rng is not None else None
        return self.model.apply(params, batch["input_ids"], batch["input_mask"], batch["segment_ids"],
                                packed=(batch["position_ids"], batch["pack_ids"], batch["cls_positions"]),
                                deterministic=not train, rngs=rngs)

    def predict(self, params, batch) -> dict[str, jax.Array]:
        return {"logits": self._logits(params, batch, None, False)[:, 0]}  # evaluation rows hold one example
