"""BERT MLM+NSP examples streamed through tf.data: deterministic, stateless, independent of the host count.

Pipeline (google-research/bert create_pretraining_data.py, made streaming):

1. The pairing plan (``plan_store``: the passes of ``nsp.iter_plan``, built once, memory-mapped) gives the
   record of any global example id.
2. A Python generator reads the records of this process's rows of every global batch (global batch ``b`` =
   examples ``[b*G, (b+1)*G)``; process ``p`` of ``P`` takes rows ``[p*G/P, (p+1)*G/P)`` of each) and yields
   them as one local batch: the untruncated A and B token runs, flat (numpy slices of the source, no per-token
   Python). Its cost follows its own rows; starting at any example costs nothing more.
3. ``build_features`` (TensorFlow, batched, parallel ``map``) truncates the pair, lays out
   ``[CLS] A [SEP] B [SEP]``, sets segment ids (0 through the first [SEP], 1 after), masks and pads.

Every random choice is keyed on (seed, global example index) -- the index also fixes the pass -- through
counter-based stateless Philox (see ``masking``), so the union over processes of their local batches equals the
single-process batch, and resuming at ``start_index`` gives exactly the tail of a run from 0.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import tensorflow as tf

from ptm_jax.families.bert.config import BertDataConfig
from ptm_jax.data.pretraining import masking, nsp, plan_store
from ptm_jax.data.numpy_streams import steps_per_item
from ptm_jax.data.pretraining.row_dataset import split_steps
from ptm_jax.data.pretraining.source import DocumentSource, SpecialIds, share_rows
from ptm_jax.errors import ConfigError, DataError

FEATURE_DTYPES = {
    "input_ids": np.int32, "input_mask": np.int32, "segment_ids": np.int32,
    "masked_lm_positions": np.int32, "masked_lm_ids": np.int32, "masked_lm_weights": np.float32,
    "next_sentence_labels": np.int32, "example_id": np.int64,
}


def _generator_signature(rows: int) -> dict[str, tf.TensorSpec]:
    return {
        "a_ids": tf.TensorSpec([None], tf.int32), "a_len": tf.TensorSpec([None], tf.int32),
        "b_ids": tf.TensorSpec([None], tf.int32), "b_len": tf.TensorSpec([None], tf.int32),
        "index": tf.TensorSpec([None], tf.int64),
        "is_random_next": tf.TensorSpec([None], tf.int32),
    }


def _pack(a: list[np.ndarray], b: list[np.ndarray], index: np.ndarray, is_random_next: np.ndarray,
          vocab_size: int) -> dict[str, np.ndarray]:
    a_ids = np.concatenate(a).astype(np.int32, copy=False)
    b_ids = np.concatenate(b).astype(np.int32, copy=False)
    for name, flat in (("A", a_ids), ("B", b_ids)):
        if flat.size and (flat.max() >= vocab_size or flat.min() < 0):
            bad = int(flat.max() if flat.max() >= vocab_size else flat.min())
            raise DataError(f"token id {bad} in segment {name} of examples {index[0]}..{index[-1]} "
                            f"is outside the vocabulary [0, {vocab_size}): the token cache was built with a "
                            "different vocabulary; rebuild it (delete data.cache_dir)")
    return {
        "a_ids": a_ids, "a_len": np.fromiter((x.size for x in a), np.int32, len(a)),
        "b_ids": b_ids, "b_len": np.fromiter((x.size for x in b), np.int32, len(b)),
        "index": np.asarray(index, np.int64), "is_random_next": np.asarray(is_random_next, np.int32),
    }


def local_batches(source: DocumentSource, cfg: BertDataConfig, *, seed: int, start_index: int, global_batch: int,
                  process_index: int, process_count: int, vocab_size: int,
                  epochs: int | None, annotations: DocumentSource | None = None,
                  annotation_name: str = "annotations",
                  plan: plan_store.PairingPlan | None = None,
                  steps: int = 1, rows: np.ndarray | None = None) -> Iterator[dict[str, np.ndarray]]:
    """This process's rows of every complete global batch, as flat untruncated A/B token runs; ``steps``
    consecutive batches per item (their rows one after the other; the last item may hold fewer). ``rows``:
    any ascending rows of each batch (a TPU host's several blocks, read in one stream) in place of share
    ``process_index`` of ``process_count``; global row r of batch b is example b * global_batch + r either way.

    ``plan``: the pairing plan of ``source`` (``plan_store``; stored beside the token cache for the training
    documents); None plans ``source`` in memory first (held-out documents, tests). Each batch reads the plan
    records of exactly this process's example ids and slices their tokens: O(rows) per batch, O(1) to start at
    any ``start_index``.

    ``annotations``: a parallel per-token source shaped like ``source`` (same documents and lengths, e.g. unit
    codes); its runs at the same coordinates come along as ``a_<annotation_name>`` / ``b_<annotation_name>``
    int32.

    With ``epochs`` set the stream ends with the last complete global batch of passes 0..epochs-1 (the final
    partial global batch is dropped on every process alike).
    """
    if plan is None:
        plan = plan_store.memory_plan(source, cfg, seed, passes=min(epochs or nsp.PLAN_PASSES, nsp.PLAN_PASSES))
    own = share_rows(start_index, global_batch, process_index, process_count, rows)
    end = plan.length(epochs)
    step = start_index // global_batch
    while end is None or (step + 1) * global_batch <= end:
        k = steps if end is None else min(steps, (end - step * global_batch) // global_batch)
        ids = ((step + np.arange(k)) * global_batch)[:, None] + own
        ids = ids.ravel()
        if ids[-1] >= masking.MAX_INDEX:
            raise ConfigError(f"example {ids[-1]} is beyond the supported stream (index < 2^40)")
        rec = plan.records(ids)
        a, b, a_ann, b_ann = [], [], [], []
        for doc, a_first, a_last, b_doc, b_first, b_last in zip(
                rec["doc"].tolist(), rec["a_first"].tolist(), rec["a_last"].tolist(), rec["b_doc"].tolist(),
                rec["b_first"].tolist(), rec["b_last"].tolist()):
            a.append(source.doc_tokens(doc, a_first, a_last))
            b.append(source.doc_tokens(b_doc, b_first, b_last))
            if annotations is not None:
                a_ann.append(annotations.doc_tokens(doc, a_first, a_last))
                b_ann.append(annotations.doc_tokens(b_doc, b_first, b_last))
        packed = _pack(a, b, rec["index"], rec["is_random_next"], vocab_size)
        if annotations is not None:
            packed[f"a_{annotation_name}"] = np.concatenate(a_ann).astype(np.int32, copy=False)
            packed[f"b_{annotation_name}"] = np.concatenate(b_ann).astype(np.int32, copy=False)
        yield packed
        step += k


def build_features(batch: dict[str, tf.Tensor], special: SpecialIds, cfg: BertDataConfig, *,
                   seed: int) -> dict[str, tf.Tensor]:
    """Truncate, lay out, segment, mask and pad a local batch (all TensorFlow ops, no Python per example)."""
    length = cfg.max_seq_length
    a_len, b_len = batch["a_len"], batch["b_len"]
    pops_a, pops_b = masking.truncation_pops(a_len, b_len, length - 3)
    front_a, front_b = masking.truncation_fronts(seed, batch["index"], pops_a, pops_b)
    uniforms = masking.mask_uniforms(seed, batch["index"], length)
    keep_a, keep_b = a_len - pops_a, b_len - pops_b
    a_start = tf.cumsum(a_len, exclusive=True) + front_a
    b_start = tf.cumsum(b_len, exclusive=True) + front_b
    pos = tf.range(length)[None, :]
    first_sep = keep_a + 1
    seq_len = keep_a + keep_b + 3
    in_a = (pos >= 1) & (pos <= keep_a[:, None])
    in_b = (pos > first_sep[:, None]) & (pos < seq_len[:, None] - 1)
    a_tok = tf.gather(batch["a_ids"], tf.clip_by_value(a_start[:, None] + pos - 1, 0,
                                                       tf.maximum(tf.size(batch["a_ids"]) - 1, 0)))
    b_tok = tf.gather(batch["b_ids"], tf.clip_by_value(b_start[:, None] + pos - first_sep[:, None] - 1, 0,
                                                       tf.maximum(tf.size(batch["b_ids"]) - 1, 0)))
    ids = tf.where(in_a, a_tok, tf.where(in_b, b_tok, special.pad))
    is_sep = tf.equal(pos, first_sep[:, None]) | tf.equal(pos, seq_len[:, None] - 1)
    ids = tf.where(is_sep, special.sep, tf.where(tf.equal(pos, 0), special.cls, ids))
    input_mask = pos < seq_len[:, None]
    segment_ids = (pos > first_sep[:, None]) & input_mask
    units, extra = None, {}
    if "a_units" in batch:
        # per-token unit annotations laid out like the tokens (ERNIE knowledge masking, families/ernie/data.py):
        # bit 0 = the token continues the previous token's unit; the higher bits (the unit's kind) come back as
        # ``unit_kind``. A segment's first token starts a unit (truncation may have cut the unit's head off).
        a_u = tf.gather(batch["a_units"], tf.clip_by_value(a_start[:, None] + pos - 1, 0,
                                                           tf.maximum(tf.size(batch["a_units"]) - 1, 0)))
        b_u = tf.gather(batch["b_units"], tf.clip_by_value(b_start[:, None] + pos - first_sep[:, None] - 1, 0,
                                                           tf.maximum(tf.size(batch["b_units"]) - 1, 0)))
        code = tf.where(in_a, a_u, tf.where(in_b, b_u, 0))
        units = (tf.bitwise.bitwise_and(code, 1) > 0) & (in_a & (pos > 1) | in_b & (pos > first_sep[:, None] + 1))
        extra = {"unit_continuation": tf.cast(units, tf.int32), "unit_kind": tf.bitwise.right_shift(code, 1)}
    masked = masking.mask_tokens(ids, seq_len, first_sep, uniforms, special,
                                 masked_lm_prob=cfg.masked_lm_prob, max_predictions=cfg.max_predictions_per_seq,
                                 whole_word=cfg.whole_word_masking, units=units)
    return extra | {
        "input_ids": masked["input_ids"],
        "input_mask": tf.cast(input_mask, tf.int32),
        "segment_ids": tf.cast(segment_ids, tf.int32),
        "masked_lm_positions": masked["masked_lm_positions"],
        "masked_lm_ids": masked["masked_lm_ids"],
        "masked_lm_weights": masked["masked_lm_weights"],
        "next_sentence_labels": batch["is_random_next"],
        "example_id": batch["index"],
    }


def _check_args(source: DocumentSource, special: SpecialIds, cfg: BertDataConfig, seed: int, start_index: int,
                global_batch: int, process_index: int, process_count: int, rows: np.ndarray | None = None) -> int:
    """Checks the stream's arguments; returns the number of rows it yields per global batch."""
    nsp.check_seed(seed)
    own = share_rows(start_index, global_batch, process_index, process_count, rows)
    if not 0 < cfg.max_predictions_per_seq <= cfg.max_seq_length:
        raise ConfigError(f"data.max_predictions_per_seq={cfg.max_predictions_per_seq} must be in "
                          f"(0, max_seq_length={cfg.max_seq_length}]")
    if cfg.whole_word_masking and special.continuation is None:
        raise ConfigError("data.whole_word_masking=true needs a tokenizer that marks word-continuation pieces "
                          "(SpecialIds.continuation is missing)")
    if source.num_docs < 1:
        raise DataError("the pretraining corpus has no documents; check data.corpus and data.eval_documents")
    max_id = getattr(source, "max_token_id", None)  # sources that know it are checked up front, others per batch
    if max_id is not None and max_id >= special.vocab_size:
        raise DataError(f"the corpus holds token id {max_id}, outside the vocabulary [0, {special.vocab_size}): "
                        "it was tokenized with a different vocabulary; rebuild the token cache "
                        "(delete data.cache_dir)")
    return own.size


def mlm_nsp_dataset(source: DocumentSource, special: SpecialIds, cfg: BertDataConfig, *, seed: int, start_index: int,
                    global_batch: int, process_index: int = 0, process_count: int = 1,
                    repeat: bool = True, plan: plan_store.PairingPlan | None = None,
                    grouped: bool = False, rows: np.ndarray | None = None) -> tf.data.Dataset:
    """This process's batches of BERT MLM+NSP features, from global example ``start_index`` on.

    Features ([rows] leading dim, rows = global_batch / process_count or ``len(rows)``): input_ids, input_mask,
    segment_ids [rows, L] int32; masked_lm_positions, masked_lm_ids [rows, P] int32; masked_lm_weights [rows, P]
    float32; next_sentence_labels [rows] int32 (1 = random next); example_id [rows] int64. ``repeat=False`` stops
    after pass 0 (evaluation), dropping its final partial global batch. ``grouped=True``: an element may hold
    several consecutive local batches (``steps_per_item``), for ``numpy_steps`` to split. ``rows``: the rows of
    each global batch to yield (``local_batches``) in place of a share.
    """
    n = _check_args(source, special, cfg, seed, start_index, global_batch, process_index, process_count, rows)

    def gen() -> Iterator[dict[str, np.ndarray]]:
        yield from local_batches(source, cfg, seed=seed, start_index=start_index, global_batch=global_batch,
                                 process_index=process_index, process_count=process_count,
                                 vocab_size=special.vocab_size, epochs=None if repeat else 1, plan=plan,
                                 steps=steps_per_item(n), rows=rows)

    ds = tf.data.Dataset.from_generator(gen, output_signature=_generator_signature(n))
    # Plain TF code (explicit while_loop), so autograph conversion is skipped: it only slows tracing.
    build = tf.autograph.experimental.do_not_convert(lambda batch: build_features(batch, special, cfg, seed=seed))
    ds = ds.map(build, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if steps_per_item(n) > 1 and not grouped:
        ds = ds.flat_map(lambda f: split_steps(f, n))
    return ds.prefetch(tf.data.AUTOTUNE)
