"""Token tagging, CoNLL-2003 NER (Devlin et al. 2019 Sec. 5.3, the fine-tuning, "first sub-token" setup).

Each sentence is one row ``[CLS] pieces [SEP]``; a word's label sits on its first piece and every other
position carries the ignore index (``conll.align_labels``). The loss is the mean cross-entropy over the
labelled positions of the global batch. Evaluation maps the prediction at each word's first piece back to
the word (``conll.word_predictions``; words cut by truncation are predicted 'O') and scores entities with
conlleval's rules (``ner_metrics``): micro precision, recall and F1 plus F1 per entity type.

The output layer is ``[tagging] head`` (``data/tasks/sections.TaggingConfig``): a softmax per word, or a
linear-chain CRF over the words (``models/crf.py``; Lample et al. 2016 Sec. 2.2). With the CRF the emissions are
the head's scores at each word's first piece (``word_index``), its parameters sit beside the model's under
``crf`` (transitions, start, end), the loss is the sentences' negative log-likelihood divided by the labelled
words (the same normaliser as the softmax's cross-entropy), and the prediction is the Viterbi path. The settings
are saved with the best model (``extra_info['tagging']``) so ``ptm eval`` rebuilds the same output layer.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ptm_jax.config import FinetuneConfig
from ptm_jax.models.config import TransformerConfig
from ptm_jax.data.tasks.conll import (
    IGNORE_INDEX,
    ConllSentence,
    align_labels,
    label_list,
    word_predictions,
)
from ptm_jax.data.tasks.sections import TaggingConfig
from ptm_jax.errors import DataError
from ptm_jax.evaluate.ner_metrics import ner_metrics
from ptm_jax.models.crf import crf_module, negative_log_likelihood, viterbi_decode
from ptm_jax.objectives.task_data import ArrayTaskData, task_head

MODEL_KEYS = ("input_ids", "input_mask", "segment_ids")


@dataclass(frozen=True)
class TagSet:
    """The label vocabulary (saved with the best model as ``label_names``)."""

    name: str
    labels: tuple[str, ...]


class _MemoPieces:
    """The aligner's tokenizer interface with tokenize() memoised per word (CoNLL-2003 train: 203,621 words,
    23,623 distinct), so each distinct word is split into pieces once."""

    def __init__(self, tokenizer) -> None:
        self._tok = tokenizer
        self._cache: dict[str, list[str]] = {}
        self.cls_id, self.sep_id, self.pad_id = tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id
        self.token_to_id = tokenizer.token_to_id

    def tokenize(self, word: str) -> list[str]:
        pieces = self._cache.get(word)
        if pieces is None:
            pieces = self._cache[word] = self._tok.tokenize(word)
        return pieces


def featurize_sentences(sentences: Sequence[ConllSentence], label_ids: dict[str, int], tokenizer,
                        max_len: int) -> tuple[dict[str, np.ndarray], list[np.ndarray], int]:
    """(arrays, first-piece position of each word per sentence, number of words cut by truncation).
    Tags outside ``label_ids`` (a dev tag never seen in training) are ignored by the loss."""
    memo = _MemoPieces(tokenizer)
    rows = [align_labels(s.words, [label_ids.get(t, IGNORE_INDEX) for t in s.tags], memo, max_len)
            for s in sentences]
    word_index = np.full((len(rows), max_len), -1, np.int32)  # each kept word's first piece, in word order
    for i, r in enumerate(rows):
        kept = r.first_piece[r.first_piece >= 0][:max_len]
        word_index[i, :len(kept)] = kept
    arrays = {"input_ids": np.stack([r.input_ids for r in rows]),
              "input_mask": np.stack([r.input_mask for r in rows]),
              "segment_ids": np.stack([r.segment_ids for r in rows]),
              "labels": np.stack([r.label_ids for r in rows]).astype(np.int32),
              "word_index": word_index, "weights": np.ones(len(rows), np.float32)}
    return arrays, [r.first_piece for r in rows], sum(r.truncated_words for r in rows)


class TaggedWords:
    """The output layer over words, softmax or CRF (``[tagging]``), for a tagging objective whose model gives
    per-position scores: ``self.model`` (its variables without ``crf``), ``_logits``, ``_word_view`` and
    ``spec``/``num_labels``/``dev_first_piece``/``dev_sentences`` come from the objective."""

    tagging: TaggingConfig
    crf: Any = None

    def _set_tagging(self, tagging: TaggingConfig | None) -> None:
        self.tagging = tagging if tagging is not None else TaggingConfig()
        self.tagging.validate()
        self.crf = (crf_module(self.num_labels, self.tagging.crf_constraints, self.spec.labels)
                    if self.tagging.head == "crf" else None)
        self.extra_info = {"tagging": dataclasses.asdict(self.tagging)}

    def _with_crf(self, rng, variables):
        if self.crf is None:
            return variables
        crf = self.crf.init(jax.random.fold_in(rng, 7))["params"]
        return {**variables, "params": {**variables["params"], "crf": crf}}

    def _split_crf(self, params):
        """(the model's variables, the CRF's scores)."""
        inner = dict(params["params"])
        crf = self.crf.apply({"params": inner.pop("crf")})
        return {**params, "params": inner}, crf

    def _word_view(self, batch, logits):
        """(emissions [B, W, K], labels [B, W], word mask [B, W]) at each word's first piece."""
        idx = batch["word_index"]
        at = jnp.maximum(idx, 0)
        emissions = jnp.take_along_axis(logits, at[..., None], axis=1)
        labels = jnp.take_along_axis(batch["labels"], at, axis=1)
        return emissions, jnp.where(idx >= 0, labels, IGNORE_INDEX), idx >= 0

    def _crf_loss(self, params, batch, rng, normalizers, train: bool):
        variables, crf = self._split_crf(params)
        emissions, labels, mask = self._word_view(batch, self._logits(variables, batch, rng, train))
        known = jnp.all((labels != IGNORE_INDEX) | ~mask, axis=1)  # a dev tag never seen in training: no path
        rows = batch["weights"] * known.astype(jnp.float32)
        nll = jnp.sum(negative_log_likelihood(emissions, jnp.maximum(labels, 0), mask, crf) * rows)
        w = (labels != IGNORE_INDEX).astype(jnp.float32) * batch["weights"][:, None]
        hit = (jnp.argmax(emissions, -1) == labels).astype(jnp.float32)
        terms = {"loss": (nll, jnp.sum(w)), "crf_nll": (nll, jnp.sum(rows)),
                 "token_accuracy": (jnp.sum(hit * w), jnp.sum(w))}
        return nll / jnp.maximum(normalizers["n"], 1.0), terms

    def _crf_predict(self, params, batch) -> dict[str, jax.Array]:
        variables, crf = self._split_crf(params)
        emissions, _, mask = self._word_view(batch, self._logits(variables, batch, None, False))
        return {"tags": viterbi_decode(emissions, mask, crf)[0]}

    def _crf_tags(self, outputs: dict[str, np.ndarray]) -> list[list[str]]:
        """The Viterbi tag of each kept word (word j of a sentence is column j); words cut by max_seq_length: O."""
        tags = outputs["tags"][:len(self.dev_sentences)]
        out = []
        for row, first in zip(tags, self.dev_first_piece):
            kept = int(np.sum(first >= 0))
            out.append([self.spec.labels[int(t)] for t in row[:kept]] + ["O"] * (len(first) - kept))
        return out


class TaggingObjective(TaggedWords, ArrayTaskData):
    """The family's token-classification head; entity-level F1 on the dev sentences."""

    head = "token_classification"
    primary_metric = "f1"

    def __init__(self, model_cfg: TransformerConfig, fcfg: FinetuneConfig, train: Sequence[ConllSentence] | None,
                 dev: Sequence[ConllSentence], tokenizer, *, labels: Sequence[str] | None = None,
                 name: str = "conll2003", tagging: TaggingConfig | None = None):
        """``train=None``: evaluation only; ``labels`` then come from the saved model (``label_names``)."""
        if not train and labels is None:
            raise DataError(f"{name}: no training sentences")
        train = train or []
        self.name, self.fcfg = f"finetune-{name}", fcfg
        self.spec = TagSet(name, tuple(labels) if labels is not None else tuple(label_list(train)))
        self.label_to_id = {t: i for i, t in enumerate(self.spec.labels)}
        self.num_labels = len(self.spec.labels)
        self.model = task_head(model_cfg, "token_classification")(model_cfg, self.num_labels, fcfg.classifier_dropout)
        self._set_tagging(tagging)
        L = fcfg.max_seq_length
        self.train, _, self.train_truncated_words = (featurize_sentences(train, self.label_to_id, tokenizer, L)
                                                     if train else (None, [], 0))
        self.num_train = len(train)
        self.dev_sentences = list(dev)
        self.dev, self.dev_first_piece, self.dev_truncated_words = (
            featurize_sentences(dev, self.label_to_id, tokenizer, L) if dev else (None, [], 0))

    # ------------------------------------------------------------------ model

    def init(self, rng, batch):
        b = {k: jnp.asarray(batch[k][:1]) for k in MODEL_KEYS}
        return self._with_crf(rng, self.model.init(rng, b["input_ids"], b["input_mask"], b["segment_ids"]))

    @staticmethod
    def _label_weights(batch) -> jax.Array:
        return (batch["labels"] != IGNORE_INDEX).astype(jnp.float32) * batch["weights"][:, None]

    def normalizers(self, batch):
        return {"n": jnp.sum(self._label_weights(batch))}

    def _logits(self, params, batch, rng, train: bool) -> jax.Array:
        rngs = {"dropout": rng} if train and rng is not None else None
        return self.model.apply(params, batch["input_ids"], batch["input_mask"], batch["segment_ids"],
                                deterministic=not train, rngs=rngs)

    def loss(self, params, batch, rng, normalizers, train: bool):
        if self.crf is not None:
            return self._crf_loss(params, batch, rng, normalizers, train)
        logits = self._logits(params, batch, rng, train)
        w = self._label_weights(batch)
        labels = jnp.maximum(batch["labels"], 0)
        per = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
        hit = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
        terms = {"loss": (jnp.sum(per * w), jnp.sum(w)), "token_accuracy": (jnp.sum(hit * w), jnp.sum(w))}
        return jnp.sum(per * w) / jnp.maximum(normalizers["n"], 1.0), terms

    def predict(self, params, batch) -> dict[str, jax.Array]:
        if self.crf is not None:
            return self._crf_predict(params, batch)
        return {"logits": self._logits(params, batch, None, False)}

    # ------------------------------------------------------------------ tags and metrics

    def predicted_tags(self, outputs: dict[str, np.ndarray]) -> list[list[str]]:
        """One tag per word of every dev sentence, read at the word's first piece (the CRF: its Viterbi path)."""
        if "tags" in outputs:
            return self._crf_tags(outputs)
        n = len(self.dev_sentences)
        pieces = np.argmax(outputs["logits"][:n], axis=-1)
        if len(pieces) != n:
            raise DataError(f"{self.name}: {len(pieces)} predicted rows for {n} dev sentences")
        return [word_predictions(p, first, self.spec.labels) for p, first in zip(pieces, self.dev_first_piece)]

    def score(self, outputs: dict[str, np.ndarray]) -> dict[str, float]:
        if not self.dev_sentences:
            return {}
        return ner_metrics([s.tags for s in self.dev_sentences], self.predicted_tags(outputs))

    def write_predictions(self, outputs: dict[str, np.ndarray], out_dir, split: str) -> list[str]:
        """``<task>-<split>.txt``: `token gold pred` per line, a blank line after each sentence (conlleval)."""
        from ptm_jax.evaluate.predictions import write_conll_predictions

        path = f"{out_dir}/{self.spec.name}-{split}.txt"
        return [write_conll_predictions(path, [s.words for s in self.dev_sentences],
                                        [s.tags for s in self.dev_sentences], self.predicted_tags(outputs))]

    # ------------------------------------------------------------------ data streams

