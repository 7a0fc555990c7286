"""GPT causal-LM rows streamed through tf.data: packed documents, deterministic, resumable, host-count independent.

The stream (GPT-2, Radford et al. 2019: documents joined by ``<|endoftext|>``; GPT-1 trains on contiguous
512-token windows):

* Pass ("epoch") ``e`` visits the documents in the permutation keyed on (seed, e) (``nsp.doc_permutation``,
  the one the BERT builder uses; identity when ``shuffle=False``). Each document contributes all its sentences'
  tokens concatenated, then ``eos_id``. Passes follow one another, so the stream is infinite with ``repeat``.
* Row ``k`` (the global example index) has inputs = stream tokens ``[k*L, k*L+L)`` and targets = tokens
  ``[k*L+1, k*L+L+1)``: rows tile the stream with no gap and no overlap, and a row may start inside a document.
  An ``eos`` input predicts the next document's first token, as in GPT-2's unmasked stream.
* ``segment_ids`` number the documents inside a row from 1 (0 = padding); a document's ``eos`` belongs to it.
  ``position_ids`` restart at 0 at every segment start, including the piece a row starts with when that row
  begins inside a document: with segment-masked attention the model sees nothing of that document before the
  row, so positions count from what it can see and always stay ``< L`` (a document longer than the context is
  seen as independent windows, never with positions beyond the model's).
* Global batch ``i`` is rows ``[i*G, (i+1)*G)``; process ``p`` of ``P`` takes rows ``[p*G/P, (p+1)*G/P)`` of
  it, the convention of ``mlm_nsp``, so the processes' rows in process order are the one-process batch.

A local batch is one contiguous stretch of the stream, located by ``searchsorted`` on the pass's cumulative
document lengths (no replay), so ``start_index = k`` starts exactly at row ``k``. Building it takes one
``tf.py_function`` call: numpy slices per document piece, no Python per token.

Evaluation (``repeat=False``): one pass; the last input is the token before the pass's final ``eos`` (which
has nothing to predict); the rest of the final row and whole rows up to the end of the final global batch are
padding (``pad_id``, weight 0, segment 0, position 0), so every held-out token is predicted exactly once.
"""
from __future__ import annotations

import threading

import numpy as np

from ptm_jax.data.pretraining.nsp import check_seed, doc_permutation
from ptm_jax.data.pretraining.row_dataset import rows_dataset
from ptm_jax.data.pretraining.source import (
    ArraySource,
    DocumentSource,
    SubsetSource,
)
from ptm_jax.errors import ConfigError, DataError

try:  # imported with this module, in the importing thread (TensorFlow first imported on the feed's thread
    # aborted some processes at exit); the numpy example builders run without it (the lent GPU hosts)
    import tensorflow as tf
except ImportError:
    tf = None


def tensorflow():
    """TensorFlow, for a function that builds a tf.data pipeline; a ConfigError where it does not import (the
    example builders' numpy functions run without it)."""
    if tf is None:
        raise ConfigError("tf.data streams the batches and TensorFlow does not import here: pip install "
                          "tensorflow-cpu (a host without it can call the numpy builders directly)")
    return tf

FEATURE_DTYPES = {
    "input_ids": np.int32, "target_ids": np.int32, "target_weights": np.float32,
    "segment_ids": np.int32, "position_ids": np.int32, "example_id": np.int64,
}


def doc_token_counts(source: DocumentSource) -> np.ndarray:
    """int64 [num_docs]: tokens of each document (all sentences). Vectorised for the sources of this package;
    a source with a ``doc_token_lengths()`` method is asked directly; others are summed document by document."""
    from ptm_jax.data.cache import TokenCache

    method = getattr(source, "doc_token_lengths", None)
    if callable(method):
        counts = np.asarray(method(), dtype=np.int64)
    elif isinstance(source, SubsetSource):
        counts = doc_token_counts(source.source)[source.doc_indices]
    elif isinstance(source, ArraySource):
        offsets, first = source._sent_offsets, source._doc_first
        counts = offsets[first[1:]] - offsets[first[:-1]]
    elif isinstance(source, TokenCache):
        per_shard = [np.asarray(s.sentence_offsets)[np.asarray(s.doc_offsets)] for s in source._shards]
        counts = np.concatenate([np.diff(o) for o in per_shard])
        if source._order is not None:
            counts = counts[source._order]
    else:
        counts = np.fromiter((int(source.doc_sentence_lengths(d).sum()) for d in range(source.num_docs)),
                             dtype=np.int64, count=source.num_docs)
    if counts.shape != (source.num_docs,):
        raise DataError(f"document lengths have shape {counts.shape}, expected ({source.num_docs},)")
    return counts.astype(np.int64, copy=False)


def flat_view(source: DocumentSource) -> tuple[list[np.ndarray], np.ndarray, np.ndarray] | None:
    """(flat token arrays, int32 [num_docs] array holding each document, int64 [num_docs] offset of its first
    token there) for the sources of this package, so a span is gathered with one fancy index per array;
    None for other sources (they are read document by document through ``doc_tokens``)."""
    from ptm_jax.data.cache import TokenCache

    if isinstance(source, SubsetSource):
        parent = flat_view(source.source)
        return None if parent is None else (parent[0], parent[1][source.doc_indices],
                                            parent[2][source.doc_indices])
    if isinstance(source, ArraySource):
        offsets = source._sent_offsets[source._doc_first[:-1]]
        return [source._tokens], np.zeros(source.num_docs, np.int32), offsets.astype(np.int64)
    if isinstance(source, TokenCache):
        arrays = [s.tokens for s in source._shards]
        shard = np.concatenate([np.full(s.num_docs, i, np.int32) for i, s in enumerate(source._shards)])
        offsets = np.concatenate([np.asarray(s.sentence_offsets)[np.asarray(s.doc_offsets[:-1])]
                                  for s in source._shards]).astype(np.int64)
        if source._order is not None:
            shard, offsets = shard[source._order], offsets[source._order]
        return arrays, shard, offsets
    return None


class PackedStream:
    """The token stream of ``source``: pass ``e`` is every document in permutation (seed, e), each followed
    by ``eos_id``. ``span(a, b)`` materialises stream positions ``[a, b)`` of the infinite stream."""

    def __init__(self, source: DocumentSource, eos_id: int, *, seed: int, shuffle: bool):
        self.source = source
        self.eos_id = int(eos_id)
        self.seed = check_seed(seed)
        self.shuffle = bool(shuffle)
        self.num_docs = int(source.num_docs)
        if self.num_docs < 1:
            raise DataError("the causal-LM corpus has no documents; check data.corpus and data.eval_documents")
        self.doc_tokens = doc_token_counts(source)
        self.doc_len = self.doc_tokens + 1                   # with the trailing eos
        self.pass_tokens = int(self.doc_len.sum())           # tokens of one pass
        self._view = flat_view(source)
        self._layouts: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._lock = threading.Lock()

    def layout(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(document order, int64 [num_docs + 1] pass offset of each document's start) of pass ``epoch``."""
        with self._lock:
            hit = self._layouts.get(epoch)
        if hit is not None:
            return hit
        order = (doc_permutation(self.num_docs, self.seed, epoch) if self.shuffle
                 else np.arange(self.num_docs, dtype=np.int64))
        starts = np.zeros(self.num_docs + 1, dtype=np.int64)
        np.cumsum(self.doc_len[order], out=starts[1:])
        with self._lock:
            if len(self._layouts) >= 4:
                self._layouts.pop(min(self._layouts))
            self._layouts[epoch] = (order, starts)
        return order, starts

    def _doc_tokens(self, d: int) -> np.ndarray:
        toks = self.source.doc_tokens(d)
        if toks.shape[0] != self.doc_tokens[d]:
            raise DataError(f"document {d} has {toks.shape[0]} tokens where its sentence lengths say "
                            f"{self.doc_tokens[d]}; the token source changed while in use")
        return toks

    def _gather(self, out: np.ndarray, docs: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                at: np.ndarray) -> None:
        """``out[at_j + t] = tokens of docs_j at lo_j + t`` for t < hi_j - lo_j, all pieces at once."""
        arrays, shard_of, offset_of = self._view
        sizes = hi - lo
        piece = np.repeat(np.arange(sizes.size), sizes)
        within = np.arange(piece.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        src = (offset_of[docs] + lo)[piece] + within
        dst = at[piece] + within
        if len(arrays) == 1:
            out[dst] = arrays[0][src]
            return
        shard = shard_of[docs][piece]
        for s in np.unique(shard).tolist():
            pick = shard == s
            out[dst[pick]] = arrays[s][src[pick]]

    def span(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """(int32 tokens, bool "a document starts here") of stream positions ``[start, stop)``."""
        n = stop - start
        tokens = np.full(n, self.eos_id, dtype=np.int32)
        doc_start = np.zeros(n, dtype=bool)
        pos = start
        while pos < stop:
            epoch, r0 = divmod(pos, self.pass_tokens)
            r1 = min(self.pass_tokens, r0 + (stop - pos))
            base = pos - r0 - start                        # output index of this pass's position 0
            order, starts = self.layout(epoch)
            i0 = int(np.searchsorted(starts, r0, side="right")) - 1
            i1 = int(np.searchsorted(starts, r1, side="left"))
            first = starts[i0:i1]
            doc_start[first[first >= r0] + base] = True
            docs = order[i0:i1]
            lo = np.maximum(r0 - first, 0)
            hi = np.minimum(r1 - first, self.doc_tokens[docs])   # the eos stays as filled in
            keep = hi > lo
            docs, first, lo, hi = docs[keep], first[keep], lo[keep], hi[keep]
            if self._view is None:
                for d, a, b, at in zip(docs.tolist(), lo.tolist(), hi.tolist(), (first + lo + base).tolist()):
                    tokens[at:at + b - a] = self._doc_tokens(d)[a:b]   # one slice per document piece
            else:
                self._gather(tokens, docs, lo, hi, first + lo + base)
            pos += r1 - r0
        return tokens, doc_start


def pack_rows(stream: PackedStream, first_row: int, num_rows: int, seq_len: int, pad_id: int, *,
              finite: bool) -> dict[str, np.ndarray]:
    """Rows ``[first_row, first_row + num_rows)`` (features of ``FEATURE_DTYPES``). ``finite``: the stream is
    one pass; inputs from the pass's last token on are padding."""
    lo, n_in = first_row * seq_len, num_rows * seq_len
    end = lo + n_in + 1
    have = min(end, stream.pass_tokens) if finite else end
    tokens = np.full(n_in + 1, pad_id, dtype=np.int32)
    starts = np.zeros(n_in + 1, dtype=bool)
    if have > lo:
        tokens[:have - lo], starts[:have - lo] = stream.span(lo, have)
    shape = (num_rows, seq_len)
    inputs, targets = tokens[:-1].reshape(shape).copy(), tokens[1:].reshape(shape).copy()
    valid = (lo + np.arange(n_in) < stream.pass_tokens - 1) if finite else np.ones(n_in, dtype=bool)
    valid = valid.reshape(shape)
    starts = starts[:-1].reshape(shape).copy()
    starts[:, 0] = True
    col = np.arange(seq_len, dtype=np.int32)
    segment_ids = np.cumsum(starts, axis=1, dtype=np.int32)
    position_ids = col - np.maximum.accumulate(np.where(starts, col, 0), axis=1).astype(np.int32)
    inputs[~valid] = pad_id
    targets[~valid] = pad_id
    segment_ids[~valid] = 0
    position_ids[~valid] = 0
    return {"input_ids": inputs, "target_ids": targets, "target_weights": valid.astype(np.float32),
            "segment_ids": segment_ids, "position_ids": position_ids,
            "example_id": np.arange(first_row, first_row + num_rows, dtype=np.int64)}


def eval_rows(stream: PackedStream, seq_len: int) -> int:
    """Rows one pass needs: every token but the first is a target once."""
    return -(-(stream.pass_tokens - 1) // seq_len)


def _check_args(seq_len: int, eos_id: int, pad_id: int) -> None:
    if not isinstance(seq_len, (int, np.integer)) or seq_len < 2:
        raise ConfigError(f"causal-LM sequence length {seq_len!r} must be an integer >= 2 (data.max_seq_length)")
    for name, v in (("eos_id", eos_id), ("pad_id", pad_id)):
        if not isinstance(v, (int, np.integer)) or not 0 <= v < 1 << 31:
            raise ConfigError(f"{name}={v!r} must be a non-negative token id (the tokenizer's <|endoftext|>)")


def causal_lm_dataset(source: DocumentSource, eos_id: int, pad_id: int, seq_len: int, *, seed: int,
                      start_index: int, global_batch: int, process_index: int = 0, process_count: int = 1,
                      repeat: bool = True, shuffle: bool = True, rows: np.ndarray | None = None,
                      grouped: bool = False) -> tf.data.Dataset:
    """This process's rows of global batches ``start_index / global_batch``, ... of the packed stream.

    Features ([n, L] unless noted): input_ids, target_ids, segment_ids, position_ids int32; target_weights
    float32 (0 on padding); example_id [n] int64 (the row index k: row r of global batch b is row b * G + r of
    the stream). An element is one local batch: the rows ``rows`` of the global batch (ascending, e.g. a TPU
    host's several blocks) or else share ``process_index`` of ``process_count``; ``grouped=True``: an element
    holds ``steps_per_item`` consecutive local batches, for ``numpy_steps`` to split. ``repeat=False``: one
    pass, padded to whole global batches (evaluation; use ``shuffle=False``).
    """
    tensorflow()
    _check_args(seq_len, eos_id, pad_id)
    stream = PackedStream(source, eos_id, seed=seed, shuffle=shuffle)
    seq_len, pad_id = int(seq_len), int(pad_id)
    ds = rows_dataset(lambda first, count: pack_rows(stream, first, count, seq_len, pad_id, finite=not repeat),
                      FEATURE_DTYPES, {k: () if k == "example_id" else (seq_len,) for k in FEATURE_DTYPES},
                      start_index=start_index, global_batch=global_batch, process_index=process_index,
                      process_count=process_count, rows=rows, grouped=grouped,
                      total_batches=None if repeat else -(-eval_rows(stream, seq_len) // global_batch))
    return ds.prefetch(tf.data.AUTOTUNE)
