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

``example_rows`` gives these per center, a context slot for each of the 2 x window offsets. Most slots are empty
(61% on Gutenberg at window 5 and sample 1e-3: the dynamic window and subsampling), so the batch holds only
the real (context, center) pairs, packed (``pack_pairs``): the rows are cut into blocks of ``block`` consecutive
centers (``block_rows``: the largest divisor of the global batch up to ``data.pack_rows``, so a block never
depends on the host count), and the pairs of a block fill its ``block x slots`` pair slots in stream order,
each naming its center by its row within the block. ``slots`` (``pair_slots``) is the expected number of pairs
per running word with a 30% margin: kept fraction x (window + 1) x 1.3 (``data.pair_slots`` overrides it). A
block whose pairs do not fit keeps its first ``block x slots`` and drops the rest, deterministically; the
dropped count is the feature ``dropped`` (the metric ``w2v_dropped_pairs``) and a warning names the batch.
On Gutenberg at the benchmark's settings the blocks of 512 hold at most 4.7 pairs a word against 6 slots.

Features (R = this process's rows, c = pair slots per row, K = negative, D = depth of the Huffman tree):
``center`` [R] int32, ``center_weight`` [R] (1 when the center trains), ``pair_input`` / ``pair_row`` /
``pair_slot`` / ``pair_weight`` [R, c] (the context word, its center's row within the block, which of the
center's 2 x window context slots it fills, 1 for a real pair), ``negatives`` /
``negative_weight`` [R, K] (shared by a center's pairs) or [R, c, K] (skip-gram, a draw per pair, aligned with
the pair slots); with hs ``path`` / ``code`` / ``path_weight`` [R, D]; ``dropped`` [R]; ``example_id`` [R].
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import math
from typing import TYPE_CHECKING

import numpy as np

from ptm_jax.data.pretraining.causal_lm import PackedStream, tensorflow
from ptm_jax.data.pretraining.source import DocumentSource, check_share
from ptm_jax.errors import ConfigError
from ptm_jax.families.word2vec import sampling

if TYPE_CHECKING:  # annotations only
    import tensorflow as tf

log = logging.getLogger(__name__)

PAIR_MARGIN = 1.3
"""Pair slots per running word = expected pairs per running word x this (``pair_slots``)."""


@dataclasses.dataclass(frozen=True)
class Tables:
    """What the examples are drawn with, derived once from the vocabulary's counts."""

    keep: np.ndarray          # float64 [V] subsampling keep probability
    cdf: np.ndarray | None    # float64 [V] unigram^0.75 cumulative distribution (None: no negatives)
    points: np.ndarray | None  # int32 [V, D] Huffman paths (None: no hs)
    codes: np.ndarray | None
    lengths: np.ndarray | None
    kept: float = 1.0
    """The expected fraction of running words that survive subsampling (sum of count x keep / sum of count)."""

    @classmethod
    def build(cls, counts: np.ndarray, special_ids, *, sample: float, negative: int, hs: bool) -> "Tables":
        c = sampling.word_counts(counts, special_ids)
        tree = sampling.huffman(c) if hs else (None, None, None)
        keep = sampling.keep_probability(c, sample)
        return cls(keep=keep, cdf=sampling.unigram_cdf(c) if negative else None, points=tree[0], codes=tree[1],
                   lengths=tree[2], kept=float((c * keep).sum() / c.sum()))

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


def block_rows(global_batch: int, pack_rows: int) -> int:
    """Rows (centers) of a packing block: the largest divisor of ``global_batch`` that is at most
    ``pack_rows``; a function of the config alone, so the packed pairs are the same for any host count."""
    b = max(1, min(int(pack_rows), int(global_batch)))
    while global_batch % b:
        b -= 1
    return b


def pair_slots(tables: Tables, window: int, slots: int = 0) -> int:
    """Pair slots per row (``slots`` if > 0): the expected pairs per running word (kept fraction x (window + 1):
    a kept center has 2 x (window - b) contexts, b uniform in [0, window)) x ``PAIR_MARGIN``, at most
    2 x window."""
    if slots:
        return int(slots)
    return int(min(2 * window, max(2, math.ceil(PAIR_MARGIN * tables.kept * (window + 1)))))


def pack_pairs(out: dict[str, np.ndarray], block: int, slots: int, pad_id: int) -> dict[str, np.ndarray]:
    """``example_rows``' per-center context slots -> the packed pairs (module doc): ``context`` /
    ``context_weight`` (and per-pair ``negatives``) replaced by ``pair_input``, ``pair_row``, ``pair_weight``,
    ``dropped`` (and ``negatives`` [R, c, K] aligned with the pairs)."""
    ctx, live = out.pop("context"), out.pop("context_weight") > 0
    rows = ctx.shape[0]
    check_blocks(rows, block)
    n = live.sum(axis=1)
    nb = n.reshape(-1, block)
    start = (np.cumsum(nb, axis=1) - nb).reshape(rows)             # the row's first pair within its block
    pos = start[:, None] + np.cumsum(live, axis=1) - 1
    cap = block * slots
    fits = live & (pos < cap)
    r, j = np.nonzero(fits)                                         # row-major: stream order
    flat = (r // block) * cap + pos[r, j]
    pair_input = np.full(rows * slots, pad_id, np.int32)
    pair_input[flat] = ctx[r, j]
    pair_row = np.zeros(rows * slots, np.int32)
    pair_row[flat] = r % block
    pair_weight = np.zeros(rows * slots, np.float32)
    pair_weight[flat] = 1.0
    pair_slot = np.zeros(rows * slots, np.int32)
    pair_slot[flat] = j
    out.update(pair_input=pair_input.reshape(rows, slots), pair_row=pair_row.reshape(rows, slots),
               pair_weight=pair_weight.reshape(rows, slots), pair_slot=pair_slot.reshape(rows, slots),
               dropped=(live & ~fits).sum(axis=1).astype(np.float32))
    if "negatives" in out and out["negatives"].ndim == 3:           # a draw per pair: to the pair slots
        neg, nw = out["negatives"], out["negative_weight"]
        k = neg.shape[2]
        pn = np.full((rows * slots, k), pad_id, np.int32)
        pw = np.zeros((rows * slots, k), np.float32)
        pn[flat], pw[flat] = neg[r, j], nw[r, j]
        out["negatives"], out["negative_weight"] = pn.reshape(rows, slots, k), pw.reshape(rows, slots, k)
    return out


@functools.cache
def _native():
    """The C++ example builder (``examples_cpu.cc`` through ``native.py``) with its argument types, or None (a
    warning says why once; the numpy functions then build the examples, the same arrays)."""
    import ctypes

    from ptm_jax.families.word2vec import native

    lib, why = native.library("examples_cpu.cc")
    if lib is None:
        log.warning("word2vec's C++ example builder is not available, numpy builds the examples: %s", why)
        return None
    fn = lib.ptm_w2v_examples
    i64, i32, ptr = ctypes.c_int64, ctypes.c_int32, ctypes.c_void_p
    fn.argtypes = [ptr, i64, i64, i64, i64, ptr, ptr, ptr, i64, ctypes.c_uint64, i32, i32, i32, i32, i32, ptr, ptr, ptr,
                   i32, i64, i32] + [ptr] * 13
    fn.restype = ctypes.c_int
    return fn


def packed_rows(stream: PackedStream, tables: Tables, first: int, rows: int, *, window: int, negative: int,
                cbow: bool, seed: int, reach: int, pad_id: int, shared: bool, block: int, slots: int,
                native: bool = True) -> dict[str, np.ndarray]:
    """``pack_pairs(example_rows(...))``: the packed features of stream positions ``[first, first + rows)``, by
    the C++ builder where it is available (``native``), else by numpy; the two give the same arrays."""
    fn = _native() if native else None
    if fn is None:
        out = example_rows(stream, tables, first, rows, window=window, negative=negative, cbow=cbow, seed=seed,
                           reach=reach, pad_id=pad_id, shared=shared)
        return pack_pairs(out, block, slots, pad_id)
    check_blocks(rows, block)
    lo, hi = first - reach, first + rows + reach
    a = max(lo, 0)
    toks = np.full(hi - lo, pad_id, dtype=np.int32)
    toks[a - lo:] = stream.span(a, hi)[0]
    per_pair = bool(negative) and not (cbow or shared)
    k, depth = int(negative), tables.depth
    neg_shape = (rows, slots, k) if per_pair else (rows, k)
    shapes = {"center": (rows,), "center_weight": (rows,), "pair_input": (rows, slots), "pair_row": (rows, slots),
              "pair_slot": (rows, slots), "pair_weight": (rows, slots), "negatives": neg_shape,
              "negative_weight": neg_shape, "path": (rows, depth), "code": (rows, depth),
              "path_weight": (rows, depth), "dropped": (rows,), "example_id": (rows,)}
    out = {name: aligned_empty(shape, feature_dtype(name)) for name, shape in shapes.items()}
    keep = np.ascontiguousarray(tables.keep, np.float64)
    cdf = None if tables.cdf is None else np.ascontiguousarray(tables.cdf, np.float64)
    guide = None if cdf is None else np.ascontiguousarray(sampling.guide_table(tables.cdf), np.int32)
    hs = [None, None, None] if not depth else [np.ascontiguousarray(tables.points, np.int32),
                                               np.ascontiguousarray(tables.codes, np.int8),
                                               np.ascontiguousarray(tables.lengths, np.int32)]

    def p(x):
        return None if x is None else x.ctypes.data

    rc = fn(p(toks), toks.size, lo, rows, reach, p(keep), p(cdf), p(guide), keep.size, int(seed) % (1 << 64),
            int(window), k, int(per_pair), int(pad_id), int(stream.eos_id), *map(p, hs), depth, int(block), int(slots),
            *(p(out[name]) for name in ("center", "center_weight", "pair_input", "pair_row", "pair_slot",
                                        "pair_weight", "negatives", "negative_weight", "path", "code",
                                        "path_weight", "dropped", "example_id")))
    if rc:
        raise ConfigError(f"the C++ example builder refused rows={rows}, block={block}, window={window}")
    if not k:
        del out["negatives"], out["negative_weight"]
    if not depth:
        del out["path"], out["code"], out["path_weight"]
    return out


def report_dropped(out: dict[str, np.ndarray], batch: int, what: str, setting: str) -> None:
    """The visible side of an overflowing block: a warning naming the batch (the metric is the feature)."""
    dropped = int(out["dropped"].sum())
    if dropped:
        log.warning("batch %d: %d %s did not fit their packing block and are not trained (%s); raise %s",
                    batch, dropped, what, _where(out), setting)


def _where(out: dict[str, np.ndarray]) -> str:
    ids = out["example_id"][out["dropped"] > 0]
    return f"stream positions {int(ids.min())}..{int(ids.max())}"


def feature_shapes(rows: int, *, window: int, negative: int, cbow: bool, depth: int, slots: int,
                   shared: bool = True) -> dict[str, tuple]:
    shapes = {"center": (rows,), "center_weight": (rows,), "pair_input": (rows, slots), "pair_row": (rows, slots),
              "pair_slot": (rows, slots), "pair_weight": (rows, slots)}
    if negative:
        per_center = cbow or shared
        shapes["negatives"] = shapes["negative_weight"] = (rows, negative) if per_center else (rows, slots, negative)
    if depth:
        shapes["path"] = shapes["code"] = shapes["path_weight"] = (rows, depth)
    shapes["dropped"] = (rows,)
    shapes["example_id"] = (rows,)
    return shapes


ALIGN = 64
"""Byte alignment of the example builders' arrays (``aligned_empty``). ``tf.numpy_function`` hands an array whose
data is aligned to Eigen's 64 bytes to TensorFlow as it is, and copies any other (numpy's own allocations are
16-byte aligned; tensorflow/python/lib/core/ndarray_tensor.cc): for fastText CBOW at 16,384 words a batch, the
unit slots alone are 16 MB."""


def aligned_empty(shape: tuple, dtype) -> np.ndarray:
    """``np.empty(shape, dtype)`` with its data at an ``ALIGN``-byte boundary."""
    dtype = np.dtype(dtype)
    n = math.prod(shape) * dtype.itemsize
    raw = np.empty(n + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start:start + n].view(dtype).reshape(shape)


def feature_dtype(name: str):
    if name in ("center", "pair_input", "pair_row", "pair_slot", "negatives", "path", "units", "unit_row"):
        return np.int32
    return np.int64 if name == "example_id" else np.float32


def grouped_maker(build, *, global_batch: int, process_index: int, process_count: int, what: str, setting: str):
    """``make(i, k=1)`` from ``build(first, n)`` (the packed features of stream positions [first, first + n)):
    this process's rows of global batch ``i``, or with k > 1 of batches ``i .. i + k - 1`` stacked, [k, rows,
    ...] (``train.steps_per_call``). With one process a group's positions are contiguous and one ``build``
    call makes them (blocks never straddle two batches, so the arrays are those of k calls). That keeps the
    Python share of building small: on the 16 cores of a GPU host, threads building 4096-row batches peaked at
    6.5M words/s (4 threads) while 131072-row calls reached 21M (docs/benchmarks.md "word2vec on a GPU")."""
    rows = global_batch // process_count

    def make(batch: int, k: int = 1) -> dict[str, np.ndarray]:
        if k > 1 and process_count > 1:  # this process's rows of successive batches are not contiguous
            parts = [make(batch + j) for j in range(k)]
            return {name: np.stack([p[name] for p in parts]) for name in parts[0]}
        out = build(batch * global_batch + process_index * rows, k * rows)
        report_dropped(out, batch, what, setting)
        return out if k == 1 else {name: a.reshape((k, rows) + a.shape[1:]) for name, a in out.items()}

    return make


def word2vec_batches(source: DocumentSource, tables: Tables, *, eos_id: int, pad_id: int, window: int,
                     negative: int, cbow: bool, reach: int, seed: int, start_index: int, global_batch: int,
                     block: int, slots: int, process_index: int = 0, process_count: int = 1,
                     shared: bool = True, stream=None):
    """(``make``, ``shapes``): ``make(i)`` is this process's rows of global batch ``i`` as numpy arrays, the
    pairs packed in blocks of ``block`` rows with ``slots`` pair slots a row (module doc), and ``make(i, k)``
    k of them stacked (``grouped_maker``); ``shapes`` the static shapes of one batch. No TensorFlow:
    ``word2vec_dataset`` streams these through tf.data, and a host without TensorFlow
    (``benchmarks/word2vec_gpu.py``) calls ``make`` itself. ``stream``: the running words, anything with
    ``span(a, b)`` and ``eos_id`` (default the ``PackedStream`` of ``source``; node2vec passes its walks)."""
    if not isinstance(window, int) or window < 1:
        raise ConfigError(f"data.window={window!r} must be an integer >= 1")
    check_share(start_index, global_batch, process_index, process_count)
    stream = PackedStream(source, eos_id, seed=seed, shuffle=True) if stream is None else stream
    rows = global_batch // process_count
    check_blocks(rows, block)
    shapes = feature_shapes(rows, window=window, negative=negative, cbow=cbow, depth=tables.depth, slots=slots,
                            shared=shared)

    def build(first: int, n: int) -> dict[str, np.ndarray]:
        return packed_rows(stream, tables, first, n, window=window, negative=negative, cbow=cbow, seed=seed,
                           reach=reach, pad_id=pad_id, shared=shared, block=block, slots=slots)

    return grouped_maker(build, global_batch=global_batch, process_index=process_index, process_count=process_count,
                         what="(context, center) pairs", setting=f"data.pair_slots (now {slots})"), shapes


def word2vec_dataset(source: DocumentSource, tables: Tables, *, start_index: int, global_batch: int,
                     **kwargs) -> tf.data.Dataset:
    """This process's rows of global batches ``start_index / global_batch``, ... (endless: word2vec's epochs
    are passes over the stream; ``train.steps`` says how many words are read) through tf.data; the keywords
    are ``word2vec_batches``'s."""
    make, shapes = word2vec_batches(source, tables, start_index=start_index, global_batch=global_batch, **kwargs)
    return batch_dataset(make, shapes, feature_dtype, start_index // global_batch)


def check_blocks(rows: int, block: int) -> None:
    if rows % block:
        raise ConfigError(f"each process's {rows} rows must be whole packing blocks of {block} rows (the largest "
                          f"divisor of train.batch_size up to data.pack_rows); set data.pack_rows to a divisor "
                          f"of {rows}")


def batch_dataset(make, shapes: dict[str, tuple], dtype, first_batch: int) -> tf.data.Dataset:
    """Batches ``first_batch``, ``first_batch + 1``, ... of ``make(batch) -> {feature: array}`` (numpy, in
    ``tf.numpy_function``: no eager tensors, about 40% less CPU a batch than ``tf.py_function``), with the static
    ``shapes``."""
    tf = tensorflow()  # imported with causal_lm, in the importing thread
    names = tuple(shapes)

    def arrays(batch) -> list[np.ndarray]:
        out = make(int(batch))
        return [out[k].astype(dtype(k), copy=False) for k in names]

    def build(batch: tf.Tensor) -> dict[str, tf.Tensor]:
        tensors = tf.numpy_function(arrays, [batch], [tf.as_dtype(dtype(k)) for k in names])
        out = dict(zip(names, tensors))
        for k, t in out.items():
            t.set_shape(shapes[k])
        return out

    batches = tf.data.Dataset.counter(first_batch, dtype=tf.int64)
    ds = batches.map(tf.autograph.experimental.do_not_convert(build), num_parallel_calls=tf.data.AUTOTUNE,
                     deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE)
