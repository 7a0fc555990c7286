"""tf.data streams of rows built in numpy and indexed by global row: the shape GPT's, NNLM's, XLNet's and ERNIE's
dialogue-LM streams share.

A family gives ``build(first_row, count)``: the features of the consecutive global rows ``[first_row, first_row +
count)`` (row r of global batch b is global row b * G + r). ``rows_dataset`` reads the rows a process holds of
every global batch, either share p of P (rows [p*G/P, (p+1)*G/P)) or any ascending rows (a TPU host's devices hold
several blocks of the batch, ``parallel/feed.py``), one ``build`` call per run of consecutive rows, inside tf.data's
parallel map (one ``numpy_function`` call per element). ``grouped=True``: a process with few rows builds
``steps_per_item`` consecutive local batches per element (``data/numpy_streams.py``), so the fixed cost of an
element is paid once per ``GROUP_ROWS`` rows whatever the number of processes; ``numpy_steps`` splits them.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ptm_jax.data.numpy_streams import steps_per_item
from ptm_jax.data.pretraining.source import row_runs, share_rows


def rows_dataset(build: Callable[[int, int], dict[str, np.ndarray]], dtypes: dict[str, type],
                 shapes: dict[str, tuple[int, ...]], *, start_index: int, global_batch: int, process_index: int = 0,
                 process_count: int = 1, rows: np.ndarray | None = None, total_batches: int | None = None,
                 grouped: bool = False, split: bool = False):
    """A ``tf.data.Dataset`` of local batches from global batch ``start_index / global_batch`` on: features
    ``dtypes`` (name -> numpy dtype), each of shape [rows, *shapes[name]]; endless, or up to global batch
    ``total_batches`` (exclusive). The caller adds its own maps (TensorFlow features) and the prefetch.
    ``split``: a grouped element is split back into its local batches in tf.data (``split_steps``), for a
    caller whose next map grows each row a lot (XLNet's [L, L] attention masks): numpy is still called once
    per ``GROUP_ROWS`` rows, and an element of the caller's map holds one local batch."""
    import tensorflow as tf

    own = share_rows(start_index, global_batch, process_index, process_count, rows)
    runs, steps = row_runs(own), steps_per_item(own.size) if grouped else 1
    names = list(dtypes)
    first_batch = start_index // global_batch
    stop = None if total_batches is None else max(first_batch, total_batches)

    def make(batch: np.ndarray) -> list[np.ndarray]:
        b0 = int(batch)
        last = b0 + steps if stop is None else min(b0 + steps, stop)
        parts = [build(b * global_batch + first, count) for b in range(b0, last) for first, count in runs]
        if len(parts) == 1:
            return [np.asarray(parts[0][k], dtypes[k]) for k in names]
        return [np.concatenate([p[k] for p in parts]).astype(dtypes[k], copy=False) for k in names]

    def element(batch: tf.Tensor) -> dict[str, tf.Tensor]:
        values = tf.numpy_function(make, [batch], [tf.as_dtype(dtypes[k]) for k in names], stateful=False)
        for v, k in zip(values, names):
            v.set_shape([None, *shapes[k]])
        return dict(zip(names, values))

    if stop is None:
        batches = tf.data.Dataset.counter(first_batch, steps, dtype=tf.int64)
    else:
        batches = tf.data.Dataset.range(first_batch, stop, steps, output_type=tf.int64)
    ds = batches.map(tf.autograph.experimental.do_not_convert(element), num_parallel_calls=tf.data.AUTOTUNE,
                     deterministic=True)
    return ds.flat_map(lambda f: split_steps(f, own.size)) if split and steps > 1 else ds


def split_steps(features: dict, rows: int):
    """Features of several consecutive local batches ([k * rows, ...]) as k elements of ``rows`` rows."""
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices(
        {k: tf.reshape(v, tf.concat([[-1, rows], tf.shape(v)[1:]], 0)) for k, v in features.items()})
