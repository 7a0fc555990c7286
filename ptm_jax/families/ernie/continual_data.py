"""ERNIE 2.0's task examples through tf.data (Sun et al. 2020 Sec. 4.2; the tasks and schedule: ``continual.py``).

Every global batch trains one task: the task of training step ``s`` is ``continual.task_at(data, s, seed)``
(evaluation batch ``b``: ``continual.eval_task``). Example ``i`` draws everything from a generator keyed on
(seed, i) (numpy ``default_rng([seed, i, STREAM])``), so the stream depends on the example index alone:
resumable at any step and the same for any host count. A document is drawn uniformly; a *span* is the run of
its sentences from a uniformly drawn sentence on, as many as fit (the first one cut to fit).

* ``knowledge_masking``: ``[CLS] span [SEP]``, masked as ERNIE 1.0 masks (``masking.mask_tokens`` with the
  phrase/entity units of ``units.py`` at the last level: whole units, 80/10/10 per token).
* ``capitalisation``: ``[CLS] span [SEP]``; per token the label of ``case.py`` (1 capitalised word).
* ``token_document``: ``[CLS] span [SEP]``; per token 1 when its id occurs in the document outside the span's
  sentences (ERNIE 2.0: "whether the token in a segment appears in other segments of the original document").
* ``reorder``: a span of at most ``L - 1 - k`` tokens (of fewer than k tokens: the document's first ``L - 1 - k``
  tokens instead) cut at ``k - 1`` distinct uniformly drawn points into
  ``k = data.reorder_segments`` non-empty parts, laid out in the order ``PERMUTATIONS[k][c]`` for a class ``c``
  uniform over the k! orders (``itertools.permutations`` order): ``[CLS] P_c0 [SEP] P_c1 [SEP] ...``; label c.
* ``distance``: class uniform over 0 (B is the sentence after A), 1 (B is a sentence of A's document at least
  two sentences away) and 2 (B is a sentence of another document); ``[CLS] A [SEP] B [SEP]``, each sentence cut
  to its first ``(L - 3) // 2`` tokens. A document too short for the drawn class is redrawn.

Features: input_ids, input_mask, segment_ids [rows, L]; masked_lm_* [rows, P] (weights 0 outside
knowledge_masking); token_labels, token_weights [rows, L] (capitalisation, token_document); sentence_labels
[rows] (reorder, distance); task_ids [rows] (index in ``continual.TASKS``); example_id [rows].
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import tensorflow as tf

from ptm_jax.data.pretraining import masking
from ptm_jax.data.pretraining.source import SpecialIds, check_share
from ptm_jax.errors import DataError
from ptm_jax.families.ernie import case as case_lib
from ptm_jax.families.ernie import continual
from ptm_jax.families.ernie import units as units_lib

STREAM = 13
TRIES = 100
PERMUTATIONS = {k: list(itertools.permutations(range(k))) for k in range(2, 6)}
ADJACENT, SAME_DOCUMENT, OTHER_DOCUMENT = 0, 1, 2


class TaskExample:
    """One row before padding; ``where`` says what it was built from (single-span tasks: document, first and end
    sentence, tokens kept; reorder: document, the span's tokens in order, the cut points; distance: document and
    sentence of A, then of B)."""

    def __init__(self, ids, segments, units=None, token_labels=None, token_weights=None, label=0, where=()):
        n = len(ids)
        self.where = where
        self.ids = np.asarray(ids, np.int32)
        self.segments = np.asarray(segments, np.int32)
        self.units = np.zeros(n, np.int32) if units is None else np.asarray(units, np.int32)
        self.token_labels = np.zeros(n, np.int32) if token_labels is None else np.asarray(token_labels, np.int32)
        self.token_weights = (np.zeros(n, np.float32) if token_weights is None
                              else np.asarray(token_weights, np.float32))
        self.label = int(label)


class TaskExamples:
    """Builds the examples of every task from the token source and its aligned unit and case sources."""

    def __init__(self, source, unit_source, case_source, special: SpecialIds, cfg):
        self.source, self.units, self.case, self.special, self.cfg = source, unit_source, case_source, special, cfg
        self.L = cfg.max_seq_length
        self.sentences = np.array([len(source.doc_sentence_lengths(d)) for d in range(source.num_docs)])
        self.tokens = np.array([int(source.doc_sentence_lengths(d).sum()) for d in range(source.num_docs)])

    # -- pieces ------------------------------------------------------------------------------------------------
    def span(self, rng, d: int, budget: int) -> tuple[int, int, int]:
        """(first sentence, end sentence, tokens kept) of a span of document ``d`` of at most ``budget`` tokens."""
        lengths = self.source.doc_sentence_lengths(d)
        first = int(rng.integers(len(lengths)))
        end, total = first, 0
        while end < len(lengths) and total + int(lengths[end]) <= budget:
            total += int(lengths[end])
            end += 1
        if end == first:   # the first sentence alone is longer than the budget: cut it
            return first, first + 1, budget
        return first, end, total

    def _doc(self, rng, ok, what: str) -> int:
        for _ in range(TRIES):
            d = int(rng.integers(self.source.num_docs))
            if ok(d):
                return d
        raise DataError(f"ERNIE 2.0 task {what}: no suitable document in {TRIES} draws from "
                        f"{self.source.num_docs} documents; use a corpus with longer documents")

    def single(self, rng, task: str) -> TaskExample:
        c = self.special
        d = int(rng.integers(self.source.num_docs))
        first, end, n = self.span(rng, d, self.L - 2)
        tokens = self.source.doc_tokens(d, first, end)[:n]
        ids = np.concatenate([[c.cls], tokens, [c.sep]])
        segments = np.zeros(len(ids), np.int32)
        if task == "knowledge_masking":
            codes = self.units.doc_tokens(d, first, end)[:n]
            cont = units_lib.continuation(codes.astype(np.uint8), 2).astype(np.int32)
            cont[:1] = 0
            return TaskExample(ids, segments, units=np.concatenate([[0], cont, [0]]), where=(d, first, end, n))
        weights = np.concatenate([[0.0], np.ones(n), [0.0]])
        if task == "capitalisation":
            lab = self.case.doc_tokens(d, first, end)[:n]
            weights[1:-1] = lab != case_lib.UNKNOWN
            lab = np.where(lab == case_lib.UNKNOWN, 0, lab)
        else:   # token_document
            doc = self.source.doc_tokens(d)
            lengths = self.source.doc_sentence_lengths(d)
            lo, hi = int(lengths[:first].sum()), int(lengths[:end].sum())
            rest = np.concatenate([doc[:lo], doc[hi:]])
            lab = np.isin(tokens, rest).astype(np.int32)
        return TaskExample(ids, segments, token_labels=np.concatenate([[0], lab, [0]]), token_weights=weights,
                           where=(d, first, end, n))

    def reorder(self, rng) -> TaskExample:
        c, k = self.special, self.cfg.reorder_segments
        d = self._doc(rng, lambda d: self.tokens[d] >= k, f"reorder (documents of >= {k} tokens)")
        first, end, n = self.span(rng, d, self.L - 1 - k)
        tokens = self.source.doc_tokens(d, first, end)[:n]
        if n < k:   # too short a span: the document's first tokens instead
            tokens = self.source.doc_tokens(d)[:self.L - 1 - k]
            n = len(tokens)
        cuts = np.sort(rng.choice(np.arange(1, n), k - 1, replace=False))
        parts = np.split(tokens, cuts)
        label = int(rng.integers(len(PERMUTATIONS[k])))
        ids, segments = [c.cls], [0]
        for j, p in enumerate(PERMUTATIONS[k][label]):
            ids.extend(parts[p].tolist() + [c.sep])
            segments.extend([j % 2] * (len(parts[p]) + 1))
        return TaskExample(ids, segments, label=label, where=(d, tokens, cuts))

    def distance(self, rng) -> TaskExample:
        c, cap = self.special, (self.L - 3) // 2
        label = int(rng.integers(3))
        need = {ADJACENT: 2, SAME_DOCUMENT: 3, OTHER_DOCUMENT: 1}[label]
        if label == OTHER_DOCUMENT and self.source.num_docs < 2:
            raise DataError("ERNIE 2.0 task distance needs at least 2 training documents")
        d = self._doc(rng, lambda d: self.sentences[d] >= need, f"distance (documents of >= {need} sentences)")
        n = int(self.sentences[d])
        if label == ADJACENT:
            a = int(rng.integers(n - 1))
            b_doc, b = d, a + 1
        elif label == SAME_DOCUMENT:
            a = int(rng.integers(n))
            far = [x for x in range(n) if abs(x - a) >= 2]
            while not far:   # n == 3 and the middle sentence: draw again
                a = int(rng.integers(n))
                far = [x for x in range(n) if abs(x - a) >= 2]
            b_doc, b = d, far[int(rng.integers(len(far)))]
        else:
            a = int(rng.integers(n))
            b_doc = int(rng.integers(self.source.num_docs - 1))
            b_doc += b_doc >= d
            b = int(rng.integers(self.sentences[b_doc]))
        sa = self.source.doc_tokens(d, a, a + 1)[:cap]
        sb = self.source.doc_tokens(b_doc, b, b + 1)[:cap]
        ids = np.concatenate([[c.cls], sa, [c.sep], sb, [c.sep]])
        segments = np.concatenate([np.zeros(len(sa) + 2), np.ones(len(sb) + 1)])
        return TaskExample(ids, segments, label=label, where=(d, a, b_doc, b))

    def example(self, task: str, index: int, seed: int) -> TaskExample:
        rng = np.random.default_rng([seed, index, STREAM])
        if task == "reorder":
            return self.reorder(rng)
        if task == "distance":
            return self.distance(rng)
        return self.single(rng, task)


def eval_examples(source, dcfg, global_batch: int) -> int:
    """Evaluation examples: whole rounds of one batch per task, about one example per held-out sentence."""
    sentences = sum(len(source.doc_sentence_lengths(d)) for d in range(source.num_docs))
    per_round = global_batch * len(dcfg.task_list())
    return max(1, sentences // per_round) * per_round


def continual_dataset(builder: TaskExamples, cfg, *, seed: int, start_index: int, global_batch: int,
                      process_index: int = 0, process_count: int = 1, repeat: bool = True) -> tf.data.Dataset:
    check_share(start_index, global_batch, process_index, process_count)
    rows, L, special = global_batch // process_count, cfg.max_seq_length, builder.special
    total = None if repeat else eval_examples(builder.source, cfg, global_batch)
    km = continual.TASKS.index("knowledge_masking")

    def gen() -> Iterator[dict[str, np.ndarray]]:
        b = start_index // global_batch
        while total is None or (b + 1) * global_batch <= total:
            task = continual.task_at(cfg, b, seed) if repeat else continual.eval_task(cfg, b)
            first = b * global_batch + process_index * rows
            out = {"ids": np.full((rows, L), special.pad, np.int32), "segments": np.zeros((rows, L), np.int32),
                   "units": np.zeros((rows, L), np.int32), "token_labels": np.zeros((rows, L), np.int32),
                   "token_weights": np.zeros((rows, L), np.float32), "seq_len": np.zeros(rows, np.int32),
                   "sentence_labels": np.zeros(rows, np.int32),
                   "task_ids": np.full(rows, continual.TASKS.index(task), np.int32),
                   "index": np.arange(first, first + rows, dtype=np.int64)}
            for r in range(rows):
                x = builder.example(task, first + r, seed)
                n = len(x.ids)
                out["ids"][r, :n], out["segments"][r, :n], out["units"][r, :n] = x.ids, x.segments, x.units
                out["token_labels"][r, :n], out["token_weights"][r, :n] = x.token_labels, x.token_weights
                out["seq_len"][r], out["sentence_labels"][r] = n, x.label
            yield out
            b += 1

    sig = {k: tf.TensorSpec([rows, L], tf.float32 if k == "token_weights" else tf.int32)
           for k in ("ids", "segments", "units", "token_labels", "token_weights")}
    sig |= {k: tf.TensorSpec([rows], tf.int32) for k in ("seq_len", "sentence_labels", "task_ids")}
    sig["index"] = tf.TensorSpec([rows], tf.int64)

    def build(batch):
        ids, seq_len = batch["ids"], batch["seq_len"]
        pos = tf.range(L)[None, :]
        candidates = (pos < seq_len[:, None]) & tf.not_equal(ids, special.cls) & tf.not_equal(ids, special.sep)
        masked = masking.mask_tokens(ids, seq_len, seq_len, masking.mask_uniforms(seed, batch["index"], L), special,
                                     masked_lm_prob=cfg.masked_lm_prob, max_predictions=cfg.max_predictions_per_seq,
                                     units=batch["units"] > 0, candidates=candidates)
        is_km = tf.equal(batch["task_ids"], km)
        return {"input_ids": tf.where(is_km[:, None], masked["input_ids"], ids),
                "input_mask": tf.cast(pos < seq_len[:, None], tf.int32), "segment_ids": batch["segments"],
                "task_ids": batch["task_ids"], "masked_lm_positions": masked["masked_lm_positions"],
                "masked_lm_ids": masked["masked_lm_ids"],
                "masked_lm_weights": masked["masked_lm_weights"] * tf.cast(is_km, tf.float32)[:, None],
                "token_labels": batch["token_labels"], "token_weights": batch["token_weights"],
                "sentence_labels": batch["sentence_labels"], "example_id": batch["index"]}

    ds = tf.data.Dataset.from_generator(gen, output_signature=sig)
    ds = ds.map(tf.autograph.experimental.do_not_convert(build), num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE)
