"""fastText examples streamed through tf.data: word2vec's examples (``families/word2vec/data.py``: the same
stream, subsampling, dynamic window and negatives, keyed on the stream position, so deterministic, resumable at
any step and the same for any host count; the real (context, center) pairs packed in blocks of rows) with the
input units of fastText added, packed the same way.

fastText's skip-gram (``FastText::skipgram``) predicts each context word from the *center's* input units, the
center's own row and its n-gram rows; its CBOW (``FastText::cbow``) predicts the center from the units of all
its context words together. A word has 1 + its n-gram count units (14.4 for a trained Gutenberg word, 63 for its
longest), so the units are ragged: a block's units fill its ``block x unit_slots`` unit slots in stream order,
each naming its center's row within the block (``units`` / ``unit_row`` / ``unit_weight`` [R, u]):

* skip-gram: the center's units (``subwords.Subwords``), for each center that trains;
* CBOW: the units of each of its pairs' context words, in pair order.

``unit_slots`` (``unit_slots``) is the expected units per running word x 1.3 (word2vec's ``PAIR_MARGIN``): kept
fraction x the mean unit count of a kept word, times (window + 1) for CBOW (``data.unit_slots`` overrides it).
On Gutenberg (sample 1e-3) that is 14 slots for skip-gram, against at most 12.9 units a word in any block of
512, and 82 for CBOW against at most 77. A center whose units do not all fit its block trains nothing (its
pairs are dropped, counted in ``dropped`` and logged as word2vec's are).

With ``model.updates='sequential'`` the training batches carry no units (``units=0``: the three unit arrays are
[R, 0]): the kernel's sequential loop reads each word's units from the subword table, as fastText's
``getSubwords`` does (``families/word2vec/sequential.h``), so a batch is about 8x smaller for CBOW, nothing is
dropped for want of unit slots, and the builder's unit pass is gone. Evaluation batches keep their units (the
loss there is the model's forward pass).

Negatives are drawn per center (``negatives`` [R, K]) and shared by its pairs, or, for skip-gram with
``data.shared_negatives=false``, per pair as fastText and gensim draw them (``negatives`` [R, c, K] aligned with
the pair slots, word2vec's per-pair draw). A negative equal to a pair's target does not count for that pair
(fastText's ``getNegative`` redraws it): ``negative_weight`` is, for shared skip-gram negatives, the number of
the center's pairs whose context word differs from it; for per-pair ones 1 where it differs from its pair's
context word; for CBOW 1 where it differs from the center.
"""
from __future__ import annotations

import functools
import math

from typing import TYPE_CHECKING

import numpy as np

from ptm_jax.data.pretraining.causal_lm import PackedStream
from ptm_jax.data.pretraining.source import DocumentSource, check_share
from ptm_jax.errors import ConfigError
from ptm_jax.families.fasttext.subwords import Subwords
from ptm_jax.families.word2vec.data import (PAIR_MARGIN, Tables, batch_dataset, check_blocks, grouped_maker,
                                            packed_rows)
from ptm_jax.families.word2vec.data import aligned_empty, feature_dtype
from ptm_jax.families.word2vec.data import feature_shapes as word2vec_shapes

if TYPE_CHECKING:  # annotations only: tf.data is imported where a dataset is built
    import tensorflow as tf


def unit_slots(tables: Tables, lengths: np.ndarray, counts: np.ndarray, window: int, cbow: bool,
               slots: int = 0) -> int:
    """Unit slots per row (``slots`` if > 0): the expected units per running word x ``PAIR_MARGIN``.
    ``lengths`` [V]: units of each word; ``counts`` [V]: its occurrences (specials 0)."""
    if slots:
        return int(slots)
    c = np.asarray(counts, np.float64)
    per_word = float((c * tables.keep * lengths).sum() / max(c.sum(), 1.0))        # kept x E[units | kept]
    if cbow:
        per_word *= (window + 1) * float((c * tables.keep * lengths).sum() > 0)
    return int(max(2, math.ceil(PAIR_MARGIN * per_word)))


def feature_shapes(rows: int, *, window: int, negative: int, cbow: bool, slots: int, units: int,
                   shared: bool = True) -> dict[str, tuple]:
    shapes = word2vec_shapes(rows, window=window, negative=negative, cbow=cbow, depth=0, slots=slots, shared=shared)
    shapes["units"] = shapes["unit_row"] = shapes["unit_weight"] = (rows, units)
    return shapes


@functools.cache
def _native():
    """word2vec's C++ example builder's ``ptm_ft_units`` (``examples_cpu.cc``) with its argument types, or None
    (then numpy, the same arrays)."""
    import ctypes

    from ptm_jax.families.word2vec import native

    lib, _ = native.library("examples_cpu.cc")
    if lib is None:
        return None
    fn = lib.ptm_ft_units
    i64, i32, ptr = ctypes.c_int64, ctypes.c_int32, ctypes.c_void_p
    fn.argtypes = [ptr, ptr, ptr, ptr, ptr, i64, i32, i64, ptr, i64, ptr, i32, i32, ptr, ptr, i32, ptr, ptr, ptr, ptr]
    fn.restype = ctypes.c_int
    return fn


def add_units(out: dict[str, np.ndarray], subwords: Subwords, cbow: bool, block: int, units: int,
              native: bool = True) -> dict[str, np.ndarray]:
    """Adds the packed ``units`` / ``unit_row`` / ``unit_weight`` (module doc) to the packed pairs ``out``,
    and fastText's negative weights: by the C++ builder where available (``native``), else numpy (the
    reference; the same arrays)."""
    fn = _native() if native else None
    if fn is not None:
        return per_pair_negative_weights(_native_units(fn, out, subwords, cbow, block, units))
    rows, slots = out["pair_input"].shape
    live = out["pair_weight"] > 0
    block_of_pair = np.arange(rows * slots) // (block * slots)
    pair_center = (block_of_pair * block + out["pair_row"].reshape(-1))[live.reshape(-1)]   # in pair order
    if cbow:
        words, owner = out["pair_input"].reshape(-1)[live.reshape(-1)], pair_center
    else:
        owner = np.flatnonzero(np.bincount(pair_center, minlength=rows) > 0)
        words = out["center"][owner]
    n = subwords.lengths[words]
    per_row = np.bincount(owner, weights=n, minlength=rows).astype(np.int64)
    nb = per_row.reshape(-1, block)
    end = np.cumsum(nb, axis=1).reshape(rows)
    fits = end <= block * units                      # a center whose units overflow its block trains nothing
    start = end - per_row
    ok = fits[owner]
    words, owner, n = words[ok], owner[ok], n[ok]
    word_start = np.cumsum(n) - n                                   # each word's first unit in the flat list
    u_word = np.repeat(np.arange(words.size), n)                    # the word of each unit
    unit = np.arange(u_word.size)
    first_of_owner = word_start[np.searchsorted(owner, owner, side="left")]   # owners are in row order
    u_owner = owner[u_word]
    flat = (u_owner // block) * block * units + start[u_owner] + unit - first_of_owner[u_word]
    ids = np.zeros(rows * units, np.int32)
    ids[flat] = subwords.ids[words[u_word], unit - word_start[u_word]]
    row = np.zeros(rows * units, np.int32)
    row[flat] = u_owner % block
    weight = np.zeros(rows * units, np.float32)
    weight[flat] = 1.0
    out.update(units=ids.reshape(rows, units), unit_row=row.reshape(rows, units),
               unit_weight=weight.reshape(rows, units))
    if not fits.all():                               # drop the overflowing centers' pairs and negatives
        bad = ~fits
        pairs_of = np.bincount(pair_center, minlength=rows)
        out["dropped"] = (out["dropped"] + np.where(bad, pairs_of, 0)).astype(np.float32)
        pw = out["pair_weight"].reshape(-1).copy()
        pw[bad[block_of_pair * block + out["pair_row"].reshape(-1)]] = 0.0
        out["pair_weight"] = pw.reshape(rows, slots)
        out["center_weight"] = np.where(bad, 0.0, out["center_weight"]).astype(np.float32)
    return negative_weights(out, cbow, block)


def negative_weights(out: dict[str, np.ndarray], cbow: bool, block: int) -> dict[str, np.ndarray]:
    """fastText's weights of the negatives (module doc) on packed pairs, in numpy."""
    rows, slots = out["pair_input"].shape
    if cbow:
        out["negative_weight"] = ((out["negatives"] != out["center"][:, None])
                                  & (out["center_weight"][:, None] > 0)).astype(np.float32)
    elif out["negatives"].ndim == 2:                 # per negative: the center's pairs whose target differs
        neg = out["negatives"]
        live = (out["pair_weight"] > 0).reshape(-1)
        centers = ((np.arange(rows * slots) // (block * slots)) * block + out["pair_row"].reshape(-1))[live]
        differs = neg[centers] != out["pair_input"].reshape(-1)[live][:, None]
        at = (centers[:, None] * neg.shape[1] + np.arange(neg.shape[1])).reshape(-1)
        out["negative_weight"] = np.bincount(at, weights=differs.reshape(-1),
                                             minlength=neg.size).reshape(neg.shape).astype(np.float32)
    return per_pair_negative_weights(out)


def per_pair_negative_weights(out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Skip-gram negatives drawn per pair ([R, c, K]): weight 1 where the pair trains and the negative differs
    from its context word (word2vec's builder compares with the center, word2vec's target)."""
    if out["negatives"].ndim == 3:
        out["negative_weight"] = ((out["pair_weight"][:, :, None] > 0)
                                  & (out["negatives"] != out["pair_input"][:, :, None])).astype(np.float32)
    return out


def _native_units(fn, out: dict[str, np.ndarray], subwords: Subwords, cbow: bool, block: int, units: int
                  ) -> dict[str, np.ndarray]:
    rows, slots = out["pair_input"].shape
    out = {k: np.ascontiguousarray(v) for k, v in out.items()}
    for k in ("center_weight", "pair_weight", "negative_weight", "dropped"):  # the builder writes into these
        a = aligned_empty(out[k].shape, np.float32)
        a[...] = out[k]
        out[k] = a
    ids = np.ascontiguousarray(subwords.ids, np.int32)
    lengths = np.ascontiguousarray(subwords.lengths, np.int32)
    for k in ("units", "unit_row", "unit_weight"):
        out[k] = aligned_empty((rows, units), feature_dtype(k))

    def p(name):
        return out[name].ctypes.data

    rc = fn(p("center"), p("center_weight"), p("pair_input"), p("pair_row"), p("pair_weight"), rows, slots, block,
            ids.ctypes.data, ids.shape[1], lengths.ctypes.data, int(cbow), units, p("negatives"),
            p("negative_weight"), out["negatives"].shape[1] if out["negatives"].ndim == 2 else 0,  # per pair: 0
            p("dropped"), p("units"), p("unit_row"),
            p("unit_weight"))
    if rc:
        raise ConfigError(f"the C++ unit builder refused rows={rows}, block={block}")
    return out


def fasttext_batches(source: DocumentSource, tables: Tables, subwords: Subwords, *, eos_id: int, pad_id: int,
                     window: int, negative: int, cbow: bool, reach: int, seed: int, start_index: int,
                     global_batch: int, block: int, slots: int, units: int, process_index: int = 0,
                     process_count: int = 1, shared: bool = True):
    """(``make``, ``shapes``) as word2vec's ``word2vec_batches``: this process's rows of global batch ``i``
    (``make(i)``) or of k successive ones stacked (``make(i, k)``), with their n-gram units in ``units`` unit slots
    a row (0: none, for the sequential updates; module doc)."""
    if not isinstance(window, int) or window < 1:
        raise ConfigError(f"data.window={window!r} must be an integer >= 1")
    check_share(start_index, global_batch, process_index, process_count)
    stream = PackedStream(source, eos_id, seed=seed, shuffle=True)
    rows = global_batch // process_count
    check_blocks(rows, block)
    shapes = feature_shapes(rows, window=window, negative=negative, cbow=cbow, slots=slots, units=units,
                            shared=shared)

    def build(first: int, n: int) -> dict[str, np.ndarray]:
        out = packed_rows(stream, tables, first, n, window=window, negative=negative, cbow=cbow, seed=seed,
                          reach=reach, pad_id=pad_id, shared=shared, block=block, slots=slots)
        if units:
            return add_units(out, subwords, cbow, block, units)
        for k in ("units", "unit_row", "unit_weight"):              # sequential updates: no unit slots (module doc)
            out[k] = np.zeros((len(out["center"]), 0), feature_dtype(k))
        return negative_weights(out, cbow, block)

    return grouped_maker(build, global_batch=global_batch, process_index=process_index, process_count=process_count,
                         what="(context, center) pairs",
                         setting=f"data.pair_slots (now {slots}) or data.unit_slots (now {units})"), shapes


def fasttext_dataset(source: DocumentSource, tables: Tables, subwords: Subwords, *, start_index: int,
                     global_batch: int, **kwargs) -> tf.data.Dataset:
    """This process's rows of global batches ``start_index / global_batch``, ... (endless; as word2vec's)
    through tf.data; the keywords are ``fasttext_batches``'s."""
    make, shapes = fasttext_batches(source, tables, subwords, start_index=start_index, global_batch=global_batch,
                                    **kwargs)
    return batch_dataset(make, shapes, feature_dtype, start_index // global_batch)
