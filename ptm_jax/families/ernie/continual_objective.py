"""``ernie2``: ERNIE 2.0's continual multi-task pretraining as one objective (Sun et al. 2020 Sec. 3-4): the
shared encoder with task embeddings and one head per task (``continual_model.py``), the task examples
(``continual_data.py``) and the schedule (``continual.py``: one task per step, sampled over the tasks whose stage
has begun).

Loss: the loss of each task over the rows of that task, summed over tasks (a batch holds one task, so it is that
task's loss): knowledge masking is BERT's masked-LM loss (``families/bert/mlm.py``); capitalisation and
token-document relation the mean token cross-entropy over the weighted tokens; reorder and distance the mean
cross-entropy over the rows. Each task reports ``<task>_loss`` and ``<task>_accuracy`` (knowledge masking as
``mlm_loss`` / ``mlm_accuracy``); a task absent from a step has denominator 0 there (NaN in that step's log line;
evaluation covers every task, one batch each in turn)."""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ptm_jax.errors import ConfigError
from ptm_jax.families.bert.mlm import mlm_loss, mlm_terms
from ptm_jax.families.ernie import continual
from ptm_jax.families.ernie.continual_data import (
    PERMUTATIONS,
    TaskExamples,
    continual_dataset,
)
from ptm_jax.families.ernie.continual_model import Ernie2ForPreTraining
from ptm_jax.objectives.base import SourceStreams

ROW_TASKS = ("reorder", "distance")


def _row_terms(logits, labels, rows) -> tuple[tuple, tuple]:
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    hit = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
    n = jnp.sum(rows)
    return (jnp.sum(ce * rows), n), (jnp.sum(hit * rows), n)


class ContinualObjective(SourceStreams):
    def __init__(self, cfg: Any, corpus: Any):
        from ptm_jax.data.pretraining.source import SubsetSource

        self.cfg, self.name, self.special = cfg, cfg.objective, corpus.special
        arts = getattr(corpus, "artifacts", {}) or {}
        if arts.get("units") is None or arts.get("case") is None:
            raise ConfigError("objective 'ernie2' reads the 'units' and 'case' artifacts that "
                              "train/stages.prepare_corpus builds beside the token cache; prepare the corpus with it")
        if cfg.model.task_vocab_size < len(continual.TASKS):
            raise ConfigError(f"model.task_vocab_size={cfg.model.task_vocab_size}: the task embedding needs "
                              f"{len(continual.TASKS)} rows (one per task of {', '.join(continual.TASKS)})")
        tasks = cfg.data.task_list()
        self.primary_metric = ("mlm_accuracy" if tasks[0] == "knowledge_masking" else f"{tasks[0]}_accuracy")
        self.reorder_classes = len(PERMUTATIONS[cfg.data.reorder_segments])
        self.model = Ernie2ForPreTraining(cfg.model, reorder_classes=self.reorder_classes)
        self.train_source, self.eval_source = corpus.train, corpus.eval
        self.builders = {}
        for source in (corpus.train, corpus.eval):
            if source is not None:
                sub = [SubsetSource(arts[k], source.doc_indices) for k in ("units", "case")]
                self.builders[id(source)] = TaskExamples(source, *sub, corpus.special, cfg.data)

    def example_batch(self, batch_size: int) -> dict[str, np.ndarray]:
        L, P = self.cfg.data.max_seq_length, self.cfg.data.max_predictions_per_seq
        z = lambda *s, t=np.int32: np.zeros(s, t)
        return {"input_ids": z(batch_size, L), "input_mask": np.ones((batch_size, L), np.int32),
                "segment_ids": z(batch_size, L), "task_ids": z(batch_size),
                "masked_lm_positions": z(batch_size, P), "masked_lm_ids": z(batch_size, P),
                "masked_lm_weights": z(batch_size, P, t=np.float32), "token_labels": z(batch_size, L),
                "token_weights": z(batch_size, L, t=np.float32), "sentence_labels": z(batch_size)}

    def init(self, rng: jax.Array, batch: dict[str, Any]) -> Any:
        b = {k: jnp.asarray(v[:1]) for k, v in batch.items()}
        return self.model.init(rng, b["input_ids"], b["input_mask"], b["segment_ids"], b["task_ids"],
                               b["masked_lm_positions"])

    def _rows(self, batch, task: str) -> jax.Array:
        return (batch["task_ids"] == continual.TASKS.index(task)).astype(jnp.float32)

    def normalizers(self, batch: dict[str, Any]) -> dict[str, jax.Array]:
        out = {"mlm": jnp.sum(batch["masked_lm_weights"].astype(jnp.float32))}
        w = batch["token_weights"].astype(jnp.float32)
        for task in continual.TOKEN_TASKS:
            out[task] = jnp.sum(w * self._rows(batch, task)[:, None])
        for task in ROW_TASKS:
            out[task] = jnp.sum(self._rows(batch, task))
        return out

    def loss(self, params, batch, rng, normalizers, train: bool):
        rngs = {"dropout": rng} if train and rng is not None else None
        logits = self.model.apply(params, batch["input_ids"], batch["input_mask"], batch["segment_ids"],
                                  batch["task_ids"], batch["masked_lm_positions"], deterministic=not train,
                                  rngs=rngs)
        terms = mlm_terms(logits["mlm"], batch["masked_lm_ids"], batch["masked_lm_weights"])
        loss = mlm_loss(terms["mlm_loss"][0], normalizers["mlm"])
        w = batch["token_weights"].astype(jnp.float32)
        for task in continual.TOKEN_TASKS:
            tw = w * self._rows(batch, task)[:, None]
            ce = optax.softmax_cross_entropy_with_integer_labels(logits[task], batch["token_labels"])
            hit = (jnp.argmax(logits[task], -1) == batch["token_labels"]).astype(jnp.float32)
            terms[f"{task}_loss"] = (jnp.sum(ce * tw), jnp.sum(tw))
            terms[f"{task}_accuracy"] = (jnp.sum(hit * tw), jnp.sum(tw))
            loss = loss + terms[f"{task}_loss"][0] / jnp.maximum(normalizers[task], 1.0)
        for task in ROW_TASKS:
            terms[f"{task}_loss"], terms[f"{task}_accuracy"] = _row_terms(
                logits[task], batch["sentence_labels"], self._rows(batch, task))
            loss = loss + terms[f"{task}_loss"][0] / jnp.maximum(normalizers[task], 1.0)
        return loss, terms

    def dataset(self, source, start: int, global_batch: int, pi: int, pc: int, repeat: bool):
        return continual_dataset(self.builders[id(source)], self.cfg.data, seed=self.cfg.data.seed,
                                 start_index=start, global_batch=global_batch, process_index=pi, process_count=pc,
                                 repeat=repeat)

    def summarize(self, metrics: dict[str, float]) -> dict[str, float]:
        return metrics
