"""ULMFiT's target-task classifier (Howard & Ruder 2018 Sec. 3.3): the AWD-LSTM trunk, concat pooling and the
two-layer head (``families/ulmfit/model.py``), trained through the spine's sequence-classification objective
(``objectives/classification.py``: loss, metrics, prediction files and best-model selection are the same code).

Only the model and the featurisation differ: a sentence is its word ids (the pretraining tokenizer, no [CLS] or
[SEP]), cut to ``finetune.max_seq_length`` and right-padded with ``<pad>``; ``input_mask`` marks the words.
The stage's discriminative rates and gradual unfreezing are the family's parameter groups (``hooks.py``).
The head's batch norms keep running statistics: a training step returns their new values
(``loss_and_statistics``, ``objectives/base.py`` ``SetsStatistics``) and the train step stores them.
"""
from __future__ import annotations

from typing import Sequence

import jax.numpy as jnp
import numpy as np

from ptm_jax.data.tasks.glue import Example
from ptm_jax.errors import DataError
from ptm_jax.families.ulmfit.model import AwdLstmClassifier
from ptm_jax.models.batch_norm import STATISTICS
from ptm_jax.objectives.classification import SequenceClassificationObjective


def encode_sentences(texts: Sequence[str], tokenizer, max_len: int, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    ids = np.full((len(texts), max_len), pad_id, np.int32)
    mask = np.zeros((len(texts), max_len), np.int32)
    for i, row in enumerate(tokenizer.encode_batch(list(texts))):
        row = row[:max_len] or [pad_id]
        ids[i, :len(row)] = row
        mask[i, :len(row)] = 1
    return ids, mask


class UlmfitClassifierObjective(SequenceClassificationObjective):
    head = "sequence_classification"

    def build_model(self, model_cfg):
        self.model_cfg = model_cfg
        return AwdLstmClassifier(model_cfg, self.num_labels)

    def featurize(self, examples: Sequence[Example], tokenizer) -> dict[str, np.ndarray]:
        if any(e.text_b is not None for e in examples):
            raise DataError(f"task {self.spec.name}: the ULMFiT classifier reads single sentences; this task has "
                            "sentence pairs")
        ids, mask = encode_sentences([e.text_a for e in examples], tokenizer, self.fcfg.max_seq_length,
                                     self.model_cfg.pad_id)
        labels = [(-1 if e.label is None else e.label) for e in examples]
        return {"input_ids": ids, "input_mask": mask,
                "labels": np.asarray(labels, np.float32 if self.regression else np.int32),
                "weights": np.ones(len(examples), np.float32)}

    def init(self, rng, batch):
        return self.model.init(rng, jnp.asarray(batch["input_ids"][:1]), jnp.asarray(batch["input_mask"][:1]))

    def _logits(self, params, batch, rng, train: bool):
        rngs = {"dropout": rng} if train and rng is not None else None
        return self.model.apply(params, batch["input_ids"], batch["input_mask"], not train, batch["weights"] > 0,
                                rngs=rngs)

    def loss_and_statistics(self, params, batch, rng, normalizers, train: bool):
        """``loss`` and the head's next BatchNorm running statistics, as a ``{'params': ...}`` tree holding
        only those leaves."""
        rngs = {"dropout": rng} if train and rng is not None else None
        logits, new = self.model.apply(params, batch["input_ids"], batch["input_mask"], not train,
                                       batch["weights"] > 0, rngs=rngs, mutable=[STATISTICS])
        loss, terms = self.task_loss(logits, batch, normalizers)
        return loss, terms, {"params": new.get(STATISTICS, {})}


def classifier(fcfg) -> type:
    return UlmfitClassifierObjective
