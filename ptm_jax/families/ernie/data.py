"""ERNIE knowledge-masking examples through tf.data: BERT's MLM(+NSP) stream (``families/bert/mlm_nsp_data.py``)
with whole phrase/entity units masked instead of single tokens (Sun et al. 2019 Sec. 3.2).

The unit-code stream (``units.UnitSource``, shaped like the token cache) rides along the token stream through
one pass of BERT's ``local_batches`` (its ``annotations`` option), so both are cut at the same coordinates. The codes become per-token continuation flags at the masking level of each example's
training step (``step = index // global_batch``; basic before ``data.phrase_from_step``, phrase units from it,
entity units too from ``data.entity_from_step``), so the level is a function of the step alone: the stream stays
stateless, resumable at any step and the same for any host count. BERT's ``build_features`` lays out the flags
like the tokens and ``masking.mask_tokens`` selects whole units in random order while they fit the token budget
(``round(masked_lm_prob * length)``, at most ``max_predictions_per_seq``); each selected token then gets
[MASK] / itself / a random token with p 0.8 / 0.1 / 0.1. Evaluation batches use the last level.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import tensorflow as tf

from ptm_jax.data.numpy_streams import steps_per_item
from ptm_jax.data.pretraining.row_dataset import split_steps
from ptm_jax.data.pretraining.source import DocumentSource, SpecialIds
from ptm_jax.families.bert import mlm_nsp_data
from ptm_jax.families.ernie import units as units_lib


def level_of_index(index: tf.Tensor, global_batch: int, phrase_from: int, entity_from: int) -> tf.Tensor:
    """int32 masking level (0 basic, 1 phrase, 2 entity) of the examples at global stream positions ``index``."""
    step = tf.cast(index, tf.int64) // global_batch
    return tf.cast(step >= phrase_from, tf.int32) + tf.cast(step >= entity_from, tf.int32)


def _flags(codes: tf.Tensor, lengths: tf.Tensor, level: tf.Tensor) -> tf.Tensor:
    """Flat int32 annotations for ``build_features`` from flat unit codes, each row read at its own level:
    bit 0 = continues the previous token's unit, bits 1-2 = the kind of unit the token is in at that level
    (0 basic, 1 phrase, 2 entity)."""
    lvl = tf.repeat(level, lengths)
    kind = tf.bitwise.bitwise_and(codes, 3)
    kind = tf.where(kind <= lvl, kind, 0)
    start = tf.bitwise.bitwise_and(codes, units_lib.START) > 0
    return tf.cast((kind >= 1) & ~start, tf.int32) + 2 * kind


def ernie_dataset(source: DocumentSource, unit_source: DocumentSource, special: SpecialIds, cfg, *, seed: int,
                  start_index: int, global_batch: int, process_index: int = 0, process_count: int = 1,
                  repeat: bool = True, plan=None, grouped: bool = False,
                  rows: np.ndarray | None = None) -> tf.data.Dataset:
    """This process's batches of ERNIE features from global example ``start_index`` on: BERT's MLM+NSP
    features plus ``unit_continuation`` [rows, L] int32 (1 where a token continues the previous token's unit)
    and ``unit_kind`` [rows, L] int32 (the kind of unit each token is in at the example's level: 0 basic,
    1 phrase, 2 entity). ``rows``: the rows of each global batch to yield in place of a share (BERT's
    ``local_batches``)."""
    n = mlm_nsp_data._check_args(source, special, cfg, seed, start_index, global_batch, process_index,
                                 process_count, rows)
    if unit_source.num_docs != source.num_docs:
        raise ValueError(f"unit source has {unit_source.num_docs} documents, token source {source.num_docs}")
    kw = dict(seed=seed, start_index=start_index, global_batch=global_batch, process_index=process_index,
              process_count=process_count, epochs=None if repeat else 1, plan=plan,
              steps=steps_per_item(n), rows=rows)

    def gen() -> Iterator[dict[str, np.ndarray]]:
        yield from mlm_nsp_data.local_batches(source, cfg, vocab_size=special.vocab_size, annotations=unit_source,
                                              annotation_name="units", **kw)

    sig = mlm_nsp_data._generator_signature(n)
    sig |= {"a_units": tf.TensorSpec([None], tf.int32), "b_units": tf.TensorSpec([None], tf.int32)}
    ds = tf.data.Dataset.from_generator(gen, output_signature=sig)
    last = len(units_lib.KIND_NAMES)

    def build(batch):
        if repeat:
            level = level_of_index(batch["index"], global_batch, cfg.phrase_from_step, cfg.entity_from_step)
        else:
            level = tf.fill(tf.shape(batch["index"]), last)
        batch = dict(batch)
        batch["a_units"] = _flags(batch["a_units"], batch["a_len"], level)
        batch["b_units"] = _flags(batch["b_units"], batch["b_len"], level)
        return mlm_nsp_data.build_features(batch, special, cfg, seed=seed)

    ds = ds.map(tf.autograph.experimental.do_not_convert(build), num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True)
    if steps_per_item(n) > 1 and not grouped:
        ds = ds.flat_map(lambda f: split_steps(f, n))
    return ds.prefetch(tf.data.AUTOTUNE)
