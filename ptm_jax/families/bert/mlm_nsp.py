"""BERT pretraining objective: masked LM (+ next-sentence prediction), Devlin et al. 2019 Sec. 3.1.

Binds BertForPreTraining, the MLM/NSP loss terms and the tf.data example stream built from the tokenized
corpus cache (``ptm_jax.families.bert.mlm_nsp_data``). ``objective = "mlm"`` drops the NSP head and loss
(RoBERTa/Cramming style) but keeps the same examples.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.config import RunConfig
from ptm_jax.data.pretraining.source import DocumentSource, SpecialIds
from ptm_jax.families.bert.heads import BertForPreTraining
from ptm_jax.families.bert.mlm import mlm_loss, mlm_terms
from ptm_jax.families.bert.nsp import nsp_terms
from ptm_jax.objectives.base import RowStreams

INPUT_KEYS = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
              "masked_lm_weights", "next_sentence_labels")


class MlmNspObjective(RowStreams):
    primary_metric = "mlm_accuracy"

    def __init__(self, cfg: RunConfig, train_source: DocumentSource, eval_source: DocumentSource | None,
                 special: SpecialIds, plan: Any = None):
        self.cfg = cfg
        self.name = cfg.objective
        self.with_nsp = cfg.objective == "mlm_nsp"
        self.model = BertForPreTraining(cfg.model, with_nsp=self.with_nsp)
        self.train_source, self.eval_source, self.special = train_source, eval_source, special
        self.plan = plan  # the training documents' stored pairing plan (data/pretraining/plan_store.py), or None

    # -- shapes and parameters -------------------------------------------------------------------------
    def example_batch(self, batch_size: int) -> dict[str, np.ndarray]:
        L, P = self.cfg.data.max_seq_length, self.cfg.data.max_predictions_per_seq
        return {
            "input_ids": np.zeros((batch_size, L), np.int32),
            "input_mask": np.ones((batch_size, L), np.int32),
            "segment_ids": np.zeros((batch_size, L), np.int32),
            "masked_lm_positions": np.zeros((batch_size, P), np.int32),
            "masked_lm_ids": np.zeros((batch_size, P), np.int32),
            "masked_lm_weights": np.zeros((batch_size, P), np.float32),
            "next_sentence_labels": np.zeros((batch_size,), np.int32),
        }

    def init(self, rng: jax.Array, batch: dict[str, Any]) -> Any:
        b = {k: jnp.asarray(v[:1]) for k, v in batch.items()}
        return self.model.init(rng, b["input_ids"], b["input_mask"], b["segment_ids"], b["masked_lm_positions"])

    # -- loss -------------------------------------------------------------------------------------------
    def normalizers(self, batch: dict[str, Any]) -> dict[str, jax.Array]:
        return {"mlm": jnp.sum(batch["masked_lm_weights"].astype(jnp.float32)),
                "nsp": jnp.asarray(batch["input_ids"].shape[0], jnp.float32)}

    def loss(self, params, batch, rng, normalizers, train: bool):
        rngs = {"dropout": rng} if train and rng is not None else None
        mlm_logits, nsp_logits = self.model.apply(
            params, batch["input_ids"], batch["input_mask"], batch["segment_ids"], batch["masked_lm_positions"],
            deterministic=not train, rngs=rngs)
        terms = mlm_terms(mlm_logits, batch["masked_lm_ids"], batch["masked_lm_weights"])
        loss = mlm_loss(terms["mlm_loss"][0], normalizers["mlm"])
        if self.with_nsp:
            nsp = nsp_terms(nsp_logits, batch["next_sentence_labels"])
            loss = loss + nsp["nsp_loss"][0] / normalizers["nsp"]
            terms.update(nsp)
        return loss, terms

    # -- data -------------------------------------------------------------------------------------------
    def dataset(self, source, start: int, global_batch: int, pi: int, pc: int, repeat: bool, rows=None):
        # lazy: the model, its loss and `ptm bench` run where TensorFlow is not installed (a GPU host)
        from ptm_jax.families.bert.mlm_nsp_data import mlm_nsp_dataset

        # grouped: a process with few rows gets several local batches per element (RowStreams splits them)
        return mlm_nsp_dataset(source, self.special, self.cfg.data, seed=self.cfg.data.seed, start_index=start,
                               global_batch=global_batch, process_index=pi, process_count=pc, repeat=repeat,
                               plan=self.plan if source is self.train_source else None, grouped=True, rows=rows)

    def summarize(self, metrics: dict[str, float]) -> dict[str, float]:
        return metrics

    def baseline(self, global_batch: int) -> dict[str, float]:
        return majority_baseline(self, global_batch, eval_batches=self.cfg.train.eval_batches)


def majority_baseline(objective: MlmNspObjective, global_batch: int, train_batches: int = 20,
                      eval_batches: int = 8) -> dict[str, float]:
    """Accuracy of always predicting the most frequent masked token of the training stream, on eval data."""
    counts: dict[int, float] = {}
    it = objective.train_batches(0, global_batch, 0, 1)
    for _ in range(train_batches):
        b = next(it)
        ids, w = b["masked_lm_ids"].ravel(), b["masked_lm_weights"].ravel()
        for tok, weight in zip(*np.unique(ids[w > 0], return_counts=True)):
            counts[int(tok)] = counts.get(int(tok), 0.0) + float(weight)
    if not counts:
        return {"majority_token": -1, "majority_accuracy": float("nan")}
    top = max(counts, key=counts.get)
    hit = total = 0.0
    for i, b in enumerate(objective.eval_batches(global_batch, 0, 1)):
        if i >= eval_batches:
            break
        w = b["masked_lm_weights"]
        hit += float(np.sum((b["masked_lm_ids"] == top) * w))
        total += float(np.sum(w))
    return {"majority_token": top, "majority_accuracy": hit / total if total else float("nan")}
