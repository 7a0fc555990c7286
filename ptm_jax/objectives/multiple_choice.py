"""Multiple choice: one sequence per option, a score per option, softmax over the options
(Devlin et al. 2019 Sec. 4.4, SWAG; Radford et al. 2018 Sec. 3.3, "multiple choice" input transform).

Option i of an example is encoded as the pair ``[CLS] context [SEP] option_i [SEP]`` (segments 0 / 1,
run_classifier's pair truncation); the inputs are [B, C, S] and the family's ``multiple_choice`` head scores each
option from its pooled [CLS]. Loss: cross-entropy of the gold option; metric: accuracy.

SWAG (Zellers et al. 2018) files, the layout of the public release (train.csv, val.csv, test.csv):
a header with at least ``sent1, sent2, ending0..ending3`` and (not in test.csv) ``label``. The context is
``sent1``; option i is ``sent2 + ' ' + ending_i`` (the grounded start phrase and its candidate ending).
"""
from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ptm_jax.config import FinetuneConfig
from ptm_jax.models.config import TransformerConfig
from ptm_jax.data.tasks.features import encode_inputs, pad_rows
from ptm_jax.errors import DataError
from ptm_jax.objectives.task_data import ArrayTaskData, task_head

SWAG_ENDINGS = 4


@dataclass
class ChoiceExample:
    """A context, its candidate continuations and the gold option (-1: unlabelled)."""

    guid: str
    context: str
    options: list[str]
    label: int = -1


def read_swag(path: str | os.PathLike, labelled: bool = True) -> list[ChoiceExample]:
    """Read a SWAG CSV (train.csv / val.csv; test.csv with ``labelled=False``)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DataError(f"{path}: SWAG file not found; download train.csv/val.csv/test.csv of the SWAG "
                        f"release (rowanz/swagaf, data/) into finetune.data_dir")
    need = ["sent1", "sent2"] + [f"ending{i}" for i in range(SWAG_ENDINGS)] + (["label"] if labelled else [])
    out: list[ChoiceExample] = []
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in need if c not in (reader.fieldnames or [])]
        if missing:
            raise DataError(f"{path}:1: header lacks the column(s) {', '.join(missing)}; expected the SWAG "
                            f"layout (sent1, sent2, ending0..ending3, label)")
        for row in reader:
            line = reader.line_num
            if any(row.get(c) is None for c in need):
                raise DataError(f"{path}:{line}: fewer fields than the header names; fix or remove the row")
            label = -1
            if labelled:
                try:
                    label = int(row["label"])
                except ValueError:
                    raise DataError(f"{path}:{line}: label {row['label']!r} is not an integer 0-3") from None
                if not 0 <= label < SWAG_ENDINGS:
                    raise DataError(f"{path}:{line}: label {label} is outside 0-{SWAG_ENDINGS - 1}")
            guid = row.get("") or row.get("video-id") or str(len(out))
            out.append(ChoiceExample(guid=f"{guid}", context=row["sent1"],
                                     options=[f"{row['sent2']} {row[f'ending{i}']}".strip()
                                              for i in range(SWAG_ENDINGS)], label=label))
    if not out:
        raise DataError(f"{path}: no examples after the header")
    return out


def featurize_choices(examples: Sequence[ChoiceExample], tokenizer, max_len: int) -> dict[str, np.ndarray]:
    """[N, C, max_len] input_ids / input_mask / segment_ids, labels [N], weights [N]."""
    c = len(examples[0].options)
    bad = next((e for e in examples if len(e.options) != c), None)
    if bad is not None:
        raise DataError(f"example {bad.guid}: {len(bad.options)} options where the first example has {c}; "
                        f"every example needs the same number of options")
    contexts = [e.context for e in examples for _ in range(c)]
    options = [o for e in examples for o in e.options]
    ids, segs = encode_inputs(tokenizer, contexts, options, max_len)
    n = len(examples)
    mask = pad_rows([np.ones(len(x), np.int32) for x in ids], max_len)
    return {"input_ids": pad_rows(ids, max_len).reshape(n, c, max_len),
            "input_mask": mask.reshape(n, c, max_len),
            "segment_ids": pad_rows(segs, max_len).reshape(n, c, max_len),
            "labels": np.asarray([e.label for e in examples], np.int32),
            "weights": np.ones(n, np.float32)}


class MultipleChoiceObjective(ArrayTaskData):
    head = "multiple_choice"
    primary_metric = "accuracy"

    def __init__(self, model_cfg: TransformerConfig, fcfg: FinetuneConfig, train: Sequence[ChoiceExample] | None,
                 dev: Sequence[ChoiceExample], tokenizer, *, name: str = "swag"):
        """``train=None``: evaluation only (``ptm eval``), no training split is read or featurised."""
        if train is not None and not train:
            raise DataError(f"{name}: no training examples")
        if not train and not dev:
            raise DataError(f"{name}: no examples to evaluate")
        self.name, self.fcfg = f"finetune-{name}", fcfg
        self.task = name
        self.model = self.build_model(model_cfg)
        self.train = self.featurize(train, tokenizer) if train else None
        self.num_train = len(train or ())
        self.dev_examples = list(dev)
        self.dev = self.featurize(dev, tokenizer) if dev else None
        self.num_choices = (self.train if self.train is not None else self.dev)["input_ids"].shape[1]
        if self.dev is not None and self.dev["input_ids"].shape[1] != self.num_choices:
            raise DataError(f"{name}: dev examples have {self.dev['input_ids'].shape[1]} options, training "
                            f"examples {self.num_choices}")

    # the two hooks a model family overrides (its Finetuning.task_objectives['multiple_choice'])
    def build_model(self, model_cfg: TransformerConfig):
        return task_head(model_cfg, "multiple_choice")(model_cfg, self.fcfg.classifier_dropout)

    def featurize(self, examples: Sequence[ChoiceExample], tokenizer) -> dict[str, np.ndarray]:
        return featurize_choices(examples, tokenizer, self.fcfg.max_seq_length)

    def init(self, rng, batch):
        b = {k: jnp.asarray(batch[k][:1]) for k in ("input_ids", "input_mask", "segment_ids")}
        return self.model.init(rng, b["input_ids"], b["input_mask"], b["segment_ids"])

    def normalizers(self, batch):
        return {"n": jnp.sum(batch["weights"] * (batch["labels"] >= 0))}

    def _logits(self, params, batch, rng, train: bool) -> jax.Array:
        rngs = {"dropout": rng} if train and rng is not None else None
        return self.model.apply(params, batch["input_ids"], batch["input_mask"], batch["segment_ids"],
                                deterministic=not train, rngs=rngs)

    def loss(self, params, batch, rng, normalizers, train: bool):
        return self.task_loss(self._logits(params, batch, rng, train), batch, normalizers)

    def task_loss(self, logits, batch, normalizers):
        """Cross-entropy of the gold option (unlabelled rows weigh 0) and the accuracy terms."""
        w = batch["weights"] * (batch["labels"] >= 0)
        labels = jnp.maximum(batch["labels"], 0)
        per = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
        hit = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
        terms = {"loss": (jnp.sum(per * w), jnp.sum(w)), "accuracy": (jnp.sum(hit * w), jnp.sum(w))}
        return jnp.sum(per * w) / jnp.maximum(normalizers["n"], 1.0), terms

    def predict(self, params, batch) -> dict[str, jax.Array]:
        return {"logits": self._logits(params, batch, None, False)}

    def score(self, outputs: dict[str, np.ndarray]) -> dict[str, float]:
        if self.dev is None or np.any(self.dev["labels"] < 0):
            return {}  # unlabelled (test) split: predictions only
        pred = np.argmax(outputs["logits"][: len(self.dev["labels"])], axis=-1)
        return {"accuracy": float(np.mean(pred == self.dev["labels"]))}

    def write_predictions(self, outputs: dict[str, np.ndarray], out_dir, split: str) -> list[str]:
        """``<task>-<split>.tsv``: id, predicted option, gold option (-1 when unlabelled)."""
        from ptm_jax.evaluate.predictions import atomic_write_text

        pred = np.argmax(outputs["logits"][: len(self.dev_examples)], axis=-1)
        rows = ["id\tprediction\tlabel"] + [f"{e.guid}\t{int(p)}\t{e.label}" for e, p in zip(self.dev_examples, pred)]
        return [atomic_write_text(f"{out_dir}/{self.task}-{split}.tsv", "\n".join(rows) + "\n")]

