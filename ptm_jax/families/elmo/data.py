"""ELMo's training rows: lanes of the token stream, so that LSTM state carries from one batch to the next
(allenai/bilm-tf ``bilm/data.py`` ``LMDataset.iter_batches``: each of the ``batch_size`` rows reads its own
running text, ``unroll_steps`` tokens per batch, and ``training.py`` feeds each batch's final LSTM state to the
next; ``BidirectionalLMDataset`` gives the backward LM a second dataset of reversed text).

The stream is GPT's ``PackedStream`` (documents of pass e in permutation (seed, e), each followed by
``<eos>``, which plays bilm-tf's sentence boundary). With G rows per global batch and N tokens per pass,
row r of global batch i reads, for L = ``data.max_seq_length``:

* forward: stream positions ``[r*S + i*L, r*S + i*L + L + 1)`` (L inputs, the next L tokens their targets),
* backward: the same positions of the REVERSED stream (position q of pass e is stream position
  e*N + N - 1 - (q - e*N)), so the backward LM reads right to left and its state also carries,

with lane stride S = max(N // G, 1). Rows are independent, so process p of P takes rows [p*G/P, (p+1)*G/P)
and the same rows whatever P; ``start_index`` (a multiple of G) resumes at batch start_index / G. The carry
itself is part of the checkpointed train state (``TrainState.carry``), so a resumed run goes on exactly.

Evaluation (``repeat=False``): one unshuffled pass with S = ceil(N / G); a target at stream position p
counts (weight 1) in lane r only when r*S < p <= min((r+1)*S, N - 1), so every position but the first is
predicted exactly once per direction; window tokens past the pass are ``pad_id``.
"""
from __future__ import annotations

import numpy as np

from ptm_jax.data.pretraining.causal_lm import PackedStream
from ptm_jax.data.pretraining.source import DocumentSource, check_share
from ptm_jax.errors import ConfigError

FEATURE_DTYPES = {"target_weights": np.float32, "fwd_ids": np.int32, "bwd_ids": np.int32,
                  "bwd_weights": np.float32, "target_ids": np.int32}
_NAMES = tuple(FEATURE_DTYPES)


def reversed_span(stream: PackedStream, start: int, stop: int) -> np.ndarray:
    """Tokens at positions [start, stop) of the reversed stream."""
    n = stream.pass_tokens
    out = np.empty(stop - start, np.int32)
    q = start
    while q < stop:
        e, r = divmod(q, n)
        take = min(stop - q, n - r)
        hi = e * n + n - r            # stream positions [hi - take, hi), read backwards
        out[q - start:q - start + take] = stream.span(hi - take, hi)[0][::-1]
        q += take
    return out


def lane_rows(stream: PackedStream, batch: int, rows: range, global_batch: int, length: int, pad_id: int, *,
              finite: bool) -> dict[str, np.ndarray]:
    n = stream.pass_tokens
    stride = -(-n // global_batch) if finite else max(n // global_batch, 1)
    out = {k: np.zeros((len(rows), length + 1 if k.endswith("_ids") and k != "target_ids" else length), v)
           for k, v in FEATURE_DTYPES.items()}
    for j, r in enumerate(rows):
        lo = r * stride + batch * length
        hi = lo + length + 1
        pos = np.arange(lo, hi)
        if finite:
            have = max(min(hi, n) - lo, 0)
            fwd = np.full(length + 1, pad_id, np.int32)
            bwd = np.full(length + 1, pad_id, np.int32)
            if have:
                fwd[:have] = stream.span(lo, lo + have)[0]
                bwd[:have] = reversed_span(stream, lo, lo + have)
            tgt = pos[1:]
            valid = ((tgt > r * stride) & (tgt <= min((r + 1) * stride, n - 1))).astype(np.float32)
        else:
            fwd, bwd = stream.span(lo, hi)[0], reversed_span(stream, lo, hi)
            valid = np.ones(length, np.float32)
        out["fwd_ids"][j], out["bwd_ids"][j] = fwd, bwd
        out["target_weights"][j] = out["bwd_weights"][j] = valid
        out["target_ids"][j] = fwd[1:]
    return out


def eval_batches(stream: PackedStream, global_batch: int, length: int) -> int:
    stride = -(-stream.pass_tokens // global_batch)
    return -(-stride // length)


def elmo_dataset(source: DocumentSource, eos_id: int, pad_id: int, length: int, *, seed: int, start_index: int,
                 global_batch: int, process_index: int = 0, process_count: int = 1, repeat: bool = True,
                 shuffle: bool = True):
    """This process's rows of global batches ``start_index / global_batch``, ... (features of
    ``FEATURE_DTYPES``): a ``tf.data.Dataset`` (TensorFlow is imported here, not with the module)."""
    import tensorflow as tf

    if not isinstance(length, (int, np.integer)) or length < 1:
        raise ConfigError(f"ELMo unroll length {length!r} must be an integer >= 1 (data.max_seq_length)")
    check_share(start_index, global_batch, process_index, process_count)
    stream = PackedStream(source, eos_id, seed=seed, shuffle=shuffle)
    rows = global_batch // process_count
    mine = range(process_index * rows, (process_index + 1) * rows)
    length, pad_id = int(length), int(pad_id)
    shapes = {k: [rows, length + 1 if k in ("fwd_ids", "bwd_ids") else length] for k in _NAMES}

    def make(batch) -> list[np.ndarray]:
        out = lane_rows(stream, int(batch.numpy()), mine, global_batch, length, pad_id, finite=not repeat)
        return [out[k] for k in _NAMES]

    def build(batch):
        tensors = tf.py_function(make, [batch], [tf.as_dtype(FEATURE_DTYPES[k]) for k in _NAMES])
        out = dict(zip(_NAMES, tensors))
        for k, t in out.items():
            t.set_shape(shapes[k])
        return out

    first = start_index // global_batch
    batches = (tf.data.Dataset.counter(first, dtype=tf.int64) if repeat else
               tf.data.Dataset.range(first, max(first, eval_batches(stream, global_batch, length)), dtype=tf.int64))
    ds = batches.map(tf.autograph.experimental.do_not_convert(build), num_parallel_calls=tf.data.AUTOTUNE,
                     deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE)
