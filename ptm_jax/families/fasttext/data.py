"""fastText examples streamed through tf.data: word2vec's examples (``families/word2vec/data.py``: the same
stream, subsampling, dynamic window and negatives, keyed on the stream position, so deterministic, resumable at
any step and the same for any host count) with the input units of fastText added.

fastText's skip-gram (``FastText::skipgram``) predicts each context word from the *center's* input units, the
center's own row and its n-gram rows; its CBOW (``FastText::cbow``) predicts the center from the units of all
its context words together. So besides word2vec's features an example holds

* skip-gram: ``subwords`` / ``subword_weight`` [G', N], the center's units (``subwords.Subwords``);
* CBOW: ``subwords`` / ``subword_weight`` [G', S, N], each context slot's units, weight 0 where the slot is
  empty.

Negatives are drawn per center (``negatives`` [G', K]) and shared by its pairs; the objective masks a negative
equal to the pair's target (fastText's ``getNegative`` redraws it).
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from ptm_jax.data.pretraining.causal_lm import PackedStream
from ptm_jax.data.pretraining.source import DocumentSource, check_share
from ptm_jax.errors import ConfigError
from ptm_jax.families.fasttext.subwords import Subwords
from ptm_jax.families.word2vec.data import Tables, example_rows
from ptm_jax.families.word2vec.data import feature_dtype as word2vec_dtype
from ptm_jax.families.word2vec.data import feature_shapes as word2vec_shapes


def feature_shapes(rows: int, *, window: int, negative: int, cbow: bool, units: int) -> dict[str, tuple]:
    shapes = word2vec_shapes(rows, window=window, negative=negative, cbow=cbow, depth=0, shared=True)
    unit_shape = (rows, 2 * window, units) if cbow else (rows, units)
    shapes["subwords"] = shapes["subword_weight"] = unit_shape
    return shapes


def feature_dtype(name: str):
    return np.int32 if name == "subwords" else word2vec_dtype(name)


def add_subwords(out: dict[str, np.ndarray], subwords: Subwords, cbow: bool) -> dict[str, np.ndarray]:
    """Adds ``subwords``/``subword_weight`` (module doc) to word2vec's example rows ``out``."""
    mask = subwords.mask
    if cbow:
        ctx = out["context"]
        out["subwords"] = subwords.ids[ctx]
        out["subword_weight"] = (mask[ctx] & (out["context_weight"][..., None] > 0)).astype(np.float32)
    else:
        center = out["center"]
        out["subwords"] = subwords.ids[center]
        out["subword_weight"] = (mask[center] & (out["center_weight"][:, None] > 0)).astype(np.float32)
    return out


def fasttext_dataset(source: DocumentSource, tables: Tables, subwords: Subwords, *, eos_id: int, pad_id: int,
                     window: int, negative: int, cbow: bool, reach: int, seed: int, start_index: int,
                     global_batch: int, process_index: int = 0, process_count: int = 1) -> tf.data.Dataset:
    """This process's rows of global batches ``start_index / global_batch``, ... (endless; as word2vec's)."""
    if not isinstance(window, int) or window < 1:
        raise ConfigError(f"data.window={window!r} must be an integer >= 1")
    check_share(start_index, global_batch, process_index, process_count)
    stream = PackedStream(source, eos_id, seed=seed, shuffle=True)
    rows = global_batch // process_count
    shapes = feature_shapes(rows, window=window, negative=negative, cbow=cbow, units=subwords.ids.shape[1])
    names = tuple(shapes)

    def make(batch) -> list[np.ndarray]:
        first = int(batch.numpy()) * global_batch + process_index * rows
        out = example_rows(stream, tables, first, rows, window=window, negative=negative, cbow=cbow, seed=seed,
                           reach=reach, pad_id=pad_id, shared=True)
        out = add_subwords(out, subwords, cbow)
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
