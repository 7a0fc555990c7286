"""Sequence classification and regression finetuning (Devlin et al. 2019 Sec. 4.1; run_classifier.py).

Pooled [CLS] -> dropout -> linear; cross-entropy over the labels, or mean squared error for a regression
task (STS-B). Evaluation predicts every dev example (the last batch is padded with weight-0 rows) and scores
with the task's GLUE metrics.
"""
from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ptm_jax.config import FinetuneConfig
from ptm_jax.models.config import TransformerConfig
from ptm_jax.data.tasks.features import encode_inputs, pad_rows
from ptm_jax.data.tasks.glue import Example, TaskSpec
from ptm_jax.errors import DataError
from ptm_jax.evaluate.glue_metrics import accuracy, task_metrics
from ptm_jax.objectives.task_data import ArrayTaskData, task_head
from ptm_jax.data.tasks.registry import PRIMARY  # the metric that keeps a task's best model



def featurize(examples: Sequence[Example], tokenizer, max_len: int, regression: bool) -> dict[str, np.ndarray]:
    pairs = [e.text_b or "" for e in examples] if any(e.text_b is not None for e in examples) else None
    ids, segs = encode_inputs(tokenizer, [e.text_a for e in examples], pairs, max_len)
    labels = [(-1 if e.label is None else e.label) for e in examples]
    return {"input_ids": pad_rows(ids, max_len), "input_mask": pad_rows([np.ones(len(x), np.int32) for x in ids],
                                                                        max_len),
            "segment_ids": pad_rows(segs, max_len),
            "labels": np.asarray(labels, np.float32 if regression else np.int32),
            "weights": np.ones(len(examples), np.float32)}


class SequenceClassificationObjective(ArrayTaskData):
    head = "sequence_classification"

    def __init__(self, model_cfg: TransformerConfig, spec: TaskSpec, train: Sequence[Example] | None,
                 dev: Sequence[Example], tokenizer, fcfg: FinetuneConfig):
        """``train=None``: evaluation only (``ptm eval``), no training split is read or featurised."""
        if train is not None and not train:
            raise DataError(f"task {spec.name}: no training examples")
        self.name, self.spec, self.fcfg = f"finetune-{spec.name}", spec, fcfg
        self.regression = spec.is_regression
        self.num_labels = spec.num_labels
        self.model = self.build_model(model_cfg)
        self.train = self.featurize(train, tokenizer) if train else None
        self.dev = self.featurize(dev, tokenizer) if dev else None
        self.dev_labels = None if self.dev is None else self.dev["labels"]  # one per dev example, in order
        self.dev_examples = list(dev)
        self.num_train = len(train or ())
        self.primary_metric = PRIMARY.get(spec.name, "accuracy")

    # the two hooks a model family overrides (its Finetuning.classifier class)
    def build_model(self, model_cfg: TransformerConfig):
        return task_head(model_cfg, "sequence_classification")(model_cfg, self.num_labels, self.fcfg.classifier_dropout)

    def featurize(self, examples: Sequence[Example], tokenizer) -> dict[str, np.ndarray]:
        return featurize(examples, tokenizer, self.fcfg.max_seq_length, self.regression)

    def init(self, rng, batch):
        b = {k: jnp.asarray(v[:1]) for k, v in batch.items()}
        return self.model.init(rng, b["input_ids"], b["input_mask"], b["segment_ids"])

    def normalizers(self, batch):
        return {"n": jnp.sum(batch["weights"])}

    def _logits(self, params, batch, rng, train: bool):
        rngs = {"dropout": rng} if train and rng is not None else None
        return self.model.apply(params, batch["input_ids"], batch["input_mask"], batch["segment_ids"],
                                deterministic=not train, rngs=rngs)

    def loss(self, params, batch, rng, normalizers, train: bool):
        return self.task_loss(self._logits(params, batch, rng, train), batch, normalizers)

    def task_loss(self, logits, batch, normalizers):
        """Cross-entropy (or squared error for regression) and the accuracy terms."""
        w = batch["weights"]
        if self.regression:
            per = jnp.square(logits[..., 0] - batch["labels"])
            terms = {"loss": (jnp.sum(per * w), jnp.sum(w))}
        else:
            per = optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"])
            hit = (jnp.argmax(logits, -1) == batch["labels"]).astype(jnp.float32)
            terms = {"loss": (jnp.sum(per * w), jnp.sum(w)), "accuracy": (jnp.sum(hit * w), jnp.sum(w))}
        return jnp.sum(per * w) / normalizers["n"], terms

    def predict(self, params, batch) -> dict[str, jax.Array]:
        return {"logits": self._logits(params, batch, None, False)}

    def score(self, outputs: dict[str, np.ndarray]) -> dict[str, float]:
        labels = self.dev_labels
        n = len(labels)
        if not self.regression and np.any(labels < 0):
            return {}  # an unlabelled (test) split: predictions only
        logits = outputs["logits"][:n]
        preds = logits[:, 0] if self.regression else logits
        if self.spec.name == "embedded":
            return {"accuracy": accuracy(np.argmax(logits, -1), labels)}
        return task_metrics(self.spec.name, preds, labels)

    def write_predictions(self, outputs: dict[str, np.ndarray], out_dir, split: str) -> list[str]:
        """GLUE submission TSV (test split) or dev predictions in the same format."""
        from ptm_jax.evaluate.predictions import (
            atomic_write_text,
            write_glue_submission,
        )

        logits = outputs["logits"][: len(self.dev_labels)]
        preds = logits[:, 0] if self.regression else np.argmax(logits, -1)
        indices = [e.guid.split("-")[-1] for e in self.dev_examples]
        if self.spec.name == "embedded":
            rows = ["index\tprediction\tlabel"] + [f"{i}\t{self.spec.labels[p]}\t{self.spec.labels[y]}"
                                                     for i, p, y in zip(indices, preds, self.dev_labels)]
            return [atomic_write_text(f"{out_dir}/embedded-{split}.tsv", "\n".join(rows) + "\n")]
        return [write_glue_submission(out_dir, self.spec.name, preds, split="test", indices=indices,
                                      suffix="" if split == "test" else f".{split}")]



def sequence_classifier(fcfg: FinetuneConfig) -> type:
    """``Finetuning.classifier`` of the families that classify with the pooled [CLS] of the task head
    ``sequence_classification`` (BERT, ERNIE): this objective (packed rows are chosen by the spine,
    ``train/finetune._classifier_objective``)."""
    return SequenceClassificationObjective
