"""NNLM rows streamed through tf.data: windows of L + n - 1 tokens of the packed token stream, each predicting
its last L tokens. Deterministic, resumable at any row, independent of the host count.

The stream is GPT's (``data/pretraining/causal_lm.py`` ``PackedStream``): pass ``e`` visits the documents in
the permutation keyed on (seed, e) (identity when ``shuffle=False``), each followed by ``eos_id``; passes
follow one another. As in Bengio et al. 2003 (Sec. 4, the corpora are read as one running text), a context may
reach across a document end: the ``eos`` between the two documents is one of the n-1 predecessors.

Row ``k`` (the global example index) predicts stream positions ``[k*L + c, k*L + c + L)`` with c = n - 1, from
the window of stream tokens ``[k*L, k*L + L + c)``: predictions tile the stream with no gap and no overlap
(the first c positions of the stream are never predicted: they have no full context). Global batch ``i`` is
rows ``[i*G, (i+1)*G)``; process ``p`` of ``P`` takes rows ``[p*G/P, (p+1)*G/P)`` of it (or any rows of it: a TPU
host's blocks, ``data/pretraining/row_dataset.py``), so the processes' rows in process order are the one-process
batch. A run of consecutive rows is one contiguous span of the stream (``PackedStream.span``), so
``start_index = k`` starts exactly at row ``k`` (no replay).

Evaluation (``repeat=False``): one pass without shuffling; every position ``c .. pass_tokens - 1`` (the last is
the final ``eos``) is predicted exactly once; window tokens past the pass are ``pad_id`` and predictions past
it have weight 0, up to the end of the final global batch.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from ptm_jax.data.pretraining.causal_lm import PackedStream
from ptm_jax.data.pretraining.row_dataset import rows_dataset
from ptm_jax.data.pretraining.source import DocumentSource
from ptm_jax.errors import ConfigError

FEATURE_DTYPES = {"window_ids": np.int32, "target_ids": np.int32, "target_weights": np.float32,
                  "example_id": np.int64}


def window_rows(stream: PackedStream, first_row: int, num_rows: int, length: int, context: int, pad_id: int, *,
                finite: bool) -> dict[str, np.ndarray]:
    """Rows ``[first_row, first_row + num_rows)``: window_ids [rows, L + c], target_ids / target_weights
    [rows, L] (the window's last L tokens and their weights), example_id [rows]. ``finite``: one pass."""
    lo = first_row * length
    end = lo + num_rows * length + context
    have = min(end, stream.pass_tokens) if finite else end
    tokens = np.full(end - lo, pad_id, dtype=np.int32)
    if have > lo:
        tokens[:have - lo] = stream.span(lo, have)[0]
    windows = np.lib.stride_tricks.sliding_window_view(tokens, length + context)[::length][:num_rows].copy()
    predicted = lo + context + np.arange(num_rows * length).reshape(num_rows, length)
    valid = predicted < stream.pass_tokens if finite else np.ones((num_rows, length), bool)
    return {"window_ids": windows, "target_ids": np.where(valid, windows[:, context:], pad_id).astype(np.int32),
            "target_weights": valid.astype(np.float32),
            "example_id": np.arange(first_row, first_row + num_rows, dtype=np.int64)}


def eval_rows(stream: PackedStream, length: int, context: int) -> int:
    """Rows one pass needs: positions c .. pass_tokens - 1 are each predicted once."""
    return -(-max(stream.pass_tokens - context, 0) // length)


def nnlm_dataset(source: DocumentSource, eos_id: int, pad_id: int, length: int, context: int, *, seed: int,
                 start_index: int, global_batch: int, process_index: int = 0, process_count: int = 1,
                 repeat: bool = True, shuffle: bool = True, rows: np.ndarray | None = None,
                 grouped: bool = False) -> tf.data.Dataset:
    """This process's rows of global batches ``start_index / global_batch``, ... (features of
    ``FEATURE_DTYPES``): share ``process_index`` of ``process_count``, or the rows ``rows`` of each batch;
    ``grouped``: several consecutive local batches per element (``row_dataset.rows_dataset``). ``repeat=False``:
    one pass padded to whole global batches (use ``shuffle=False``)."""
    if not isinstance(length, (int, np.integer)) or length < 1:
        raise ConfigError(f"NNLM predictions per row {length!r} must be an integer >= 1 (data.max_seq_length)")
    if not isinstance(context, (int, np.integer)) or context < 1:
        raise ConfigError(f"NNLM context {context!r} must be an integer >= 1 (model.order - 1)")
    for name, v in (("eos_id", eos_id), ("pad_id", pad_id)):
        if not isinstance(v, (int, np.integer)) or not 0 <= v < 1 << 31:
            raise ConfigError(f"{name}={v!r} must be a non-negative token id (the word vocabulary's)")
    stream = PackedStream(source, eos_id, seed=seed, shuffle=shuffle)
    length, context, pad_id = int(length), int(context), int(pad_id)
    shapes = {"window_ids": (length + context,), "target_ids": (length,), "target_weights": (length,),
              "example_id": ()}
    ds = rows_dataset(lambda first, count: window_rows(stream, first, count, length, context, pad_id,
                                                       finite=not repeat),
                      FEATURE_DTYPES, shapes, start_index=start_index, global_batch=global_batch,
                      process_index=process_index, process_count=process_count, rows=rows, grouped=grouped,
                      total_batches=None if repeat else -(-eval_rows(stream, length, context) // global_batch))
    return ds.prefetch(tf.data.AUTOTUNE)
