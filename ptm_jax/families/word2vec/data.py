"""word2vec examples streamed through tf.data from the token cache: every running word of the stream is one
center (word2vec.c ``TrainModelThread``). Deterministic, resumable at any step, the same for any host count.

The stream is GPT's (``data/pretraining/causal_lm.py`` ``PackedStream``): pass ``e`` visits the documents in the
permutation keyed on (seed, e), each followed by ``eos``. Global example ``k`` is stream position ``k``; global
batch ``i`` is positions ``[i*G, (i+1)*G)`` and process ``p`` of ``P`` takes the ``p``-th contiguous block of
``G/P`` of them. For each position the example holds, with every random choice keyed on the stream position
(``sampling.uniforms``), never on where a host is in its stream:

* whether the word is kept (word2vec.c's subsampling; specials such as ``<unk>`` are never kept, as word2vec.c
  drops out-of-vocabulary words) - a dropped word is neither a center nor a context, and the window is counted
  over the kept words, as word2vec.c builds its sentence after subsampling;
* the dynamic window ``window - b``, b uniform in [0, window);
* its contexts: the ``window - b`` nearest kept words on each side within the same document (word2vec.c's
  sentence; the ``eos`` between documents ends it). Neighbours are searched ``data.reach`` running words each
  side (8 x window by default): a context further away is not used. With the 5-word window this cuts a context
  only where more than 35 of 40 neighbours were subsampled away;
* negatives from unigram^0.75 (``sampling.draw_negatives``, exact inverse-CDF), ``negative`` per center
  (shared by the center's skip-gram pairs, ``data.shared_negatives``) or per (input, target) pair as in
  word2vec.c; a negative equal to the target is dropped (weight 0), as word2vec.c skips it;
* with ``hs``, the Huffman path (inner nodes and bits) of the target.

Skip-gram pairs are word2vec.c's: the context word's input vector predicts the center (target) and the
negatives, one pair per context slot. CBOW: the average of the context's input vectors predicts the center.
A center without a context (a one-word document) trains nothing, as in word2vec.c (``if (cw)``).

Features (G' = this process's rows, S = 2 x window slots, K = negative, D = depth of the Huffman tree):
``center`` [G'] int32, ``center_weight`` [G'] (1 when the center trains), ``context`` / ``context_weight``
[G', S], ``negatives`` / ``negative_weight`` [G', K] (CBOW, shared) or [G', S, K] (skip-gram per pair);
with hs ``path`` / ``code`` / ``path_weight`` [G', D]; ``example_id`` [G'].
"""
from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from ptm_jax.data.pretraining.causal_lm import PackedStream
from ptm_jax.data.pretraining.source import DocumentSource, check_share
from ptm_jax.errors import ConfigError
from ptm_jax.families.word2vec import sampling


@dataclasses.dataclass(frozen=True)
class Tables:
    """What the examples are drawn with, derived once from the vocabulary's counts."""

    keep: np.ndarray          # float64 [V] subsampling keep probability
    cdf: np.ndarray | None    # float64 [V] unigram^0.75 cumulative distribution (None: no negatives)
    points: np.ndarray | None  # int32 [V, D] Huffman paths (None: no hs)
    codes: np.ndarray | None
    lengths: np.ndarray | None

    @classmethod
    def build(cls, counts: np.ndarray, special_ids, *, sample: float, negative: int, hs: bool) -> "Tables":
        c = sampling.word_counts(counts, special_ids)
        tree = sampling.huffman(c) if hs else (None, None, None)
        return cls(keep=sampling.keep_probability(c, sample),
                   cdf=sampling.unigram_cdf(c) if negative else None, points=tree[0], codes=tree[1],
                   lengths=tree[2])

    @property
    def depth(self) -> int:
        return 0 if self.points is None else int(self.points.shape[1])


def kept_mask(tables: Tables, tokens: np.ndarray, positions: np.ndarray, seed: int) -> np.ndarray:
    """Whether the word ``tokens[i]`` at stream position ``positions[i]`` survives subsampling (negative
    positions, before the stream, never do)."""
    u = sampling.uniforms(seed, sampling.SUBSAMPLE, np.maximum(positions, 0))
    return (u < tables.keep[tokens]) & (positions >= 0)


def example_rows(stream: PackedStream, tables: Tables, first: int, rows: int, *, window: int, negative: int,
                 cbow: bool, seed: int, reach: int, pad_id: int, shared: bool = True) -> dict[str, np.ndarray]:
    """The examples of stream positions ``[first, first + rows)`` (see the module doc)."""
    lo, hi = first - reach, first + rows + reach
    a = max(lo, 0)
    toks = np.full(hi - lo, pad_id, dtype=np.int32)
    toks[a - lo:] = stream.span(a, hi)[0]
    pos = np.arange(lo, hi, dtype=np.int64)
    keep = kept_mask(tables, toks, pos, seed)
    doc = np.cumsum(toks == stream.eos_id)         # an eos starts the next document's count
    kept = np.flatnonzero(keep)
    centers = np.arange(reach, reach + rows)
    cpos = pos[centers]
    center_tok = toks[centers]
    rank = np.searchsorted(kept, centers)
    b = np.floor(sampling.uniforms(seed, sampling.WINDOW, cpos) * window).astype(np.int64)
    offsets = np.concatenate([np.arange(-window, 0), np.arange(1, window + 1)])
    j = rank[:, None] + offsets[None, :]
    inside = (j >= 0) & (j < kept.size)
    ctx_at = kept[np.clip(j, 0, max(kept.size - 1, 0))] if kept.size else np.zeros_like(j)
    valid = (keep[centers][:, None] & inside & (np.abs(offsets)[None, :] <= (window - b)[:, None])
             & (doc[ctx_at] == doc[centers][:, None]))
    context = np.where(valid, toks[ctx_at], pad_id).astype(np.int32)
    active = valid.any(axis=1)
    out = {"center": center_tok, "center_weight": active.astype(np.float32), "context": context,
           "context_weight": valid.astype(np.float32)}
    if negative:
        if cbow or shared:
            idx = cpos[:, None] * negative + np.arange(negative)[None, :]
            live = active[:, None]
            target = center_tok[:, None]
        else:
            slots = offsets.size
            idx = ((cpos[:, None, None] * slots + np.arange(slots)[None, :, None]) * negative
                   + np.arange(negative)[None, None, :])
            live = valid[:, :, None]
            target = center_tok[:, None, None]
        neg = sampling.draw_negatives(tables.cdf, sampling.uniforms(seed, sampling.NEGATIVE, idx))
        out["negatives"] = neg
        out["negative_weight"] = (live & (neg != target)).astype(np.float32)
    if tables.points is not None:
        depth = tables.points.shape[1]
        out["path"] = tables.points[center_tok]
        out["code"] = tables.codes[center_tok].astype(np.float32)
        out["path_weight"] = ((np.arange(depth)[None, :] < tables.lengths[center_tok][:, None])
                              & active[:, None]).astype(np.float32)
    out["example_id"] = cpos
    return out


def feature_shapes(rows: int, *, window: int, negative: int, cbow: bool, depth: int, shared: bool = True
                   ) -> dict[str, tuple]:
    s = 2 * window
    shapes = {"center": (rows,), "center_weight": (rows,), "context": (rows, s), "context_weight": (rows, s)}
    if negative:
        per_center = cbow or shared
        shapes["negatives"] = shapes["negative_weight"] = (rows, negative) if per_center else (rows, s, negative)
    if depth:
        shapes["path"] = shapes["code"] = shapes["path_weight"] = (rows, depth)
    shapes["example_id"] = (rows,)
    return shapes


def feature_dtype(name: str):
    if name in ("center", "context", "negatives", "path"):
        return np.int32
    return np.int64 if name == "example_id" else np.float32


def word2vec_dataset(source: DocumentSource, tables: Tables, *, eos_id: int, pad_id: int, window: int,
                     negative: int, cbow: bool, reach: int, seed: int, start_index: int, global_batch: int,
                     process_index: int = 0, process_count: int = 1, shared: bool = True) -> tf.data.Dataset:
    """This process's rows of global batches ``start_index / global_batch``, ... (endless: word2vec's epochs
    are passes over the stream; ``train.steps`` says how many words are read)."""
    if not isinstance(window, int) or window < 1:
        raise ConfigError(f"data.window={window!r} must be an integer >= 1")
    check_share(start_index, global_batch, process_index, process_count)
    stream = PackedStream(source, eos_id, seed=seed, shuffle=True)
    rows = global_batch // process_count
    shapes = feature_shapes(rows, window=window, negative=negative, cbow=cbow, depth=tables.depth, shared=shared)
    names = tuple(shapes)

    def make(batch) -> list[np.ndarray]:
        first = int(batch.numpy()) * global_batch + process_index * rows
        out = example_rows(stream, tables, first, rows, window=window, negative=negative, cbow=cbow, seed=seed,
                           reach=reach, pad_id=pad_id, shared=shared)
        return [out[k].astype(feature_dtype(k)) for k in names]

    def build(batch: tf.Tensor) -> dict[str, tf.Tensor]:
        tensors = tf.py_function(make, [batch], [tf.as_dtype(feature_dtype(k)) for k in names])
        out = dict(zip(names, tensors))
        for k, t in out.items():
            t.set_shape(shapes[k])
        return out

    batches = tf.data.Dataset.counter(start_index // global_batch, dtype=tf.int64)
    ds = batches.map(tf.autograph.experimental.do_not_convert(build), num_parallel_calls=tf.data.AUTOTUNE,
                     deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE)
