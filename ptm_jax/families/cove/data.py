"""The translation objective's batches: a tf.data pipeline over the tokenized parallel corpus
(``parallel.Pairs``), through ``families/word2vec/data.batch_dataset`` (a counter of batch indices mapped by
``tf.numpy_function`` to numpy rows).

One example is one sentence pair. Rows of a batch (global batch G, process p of P, ``G // P`` rows each): the
training stream is example e = b * G + p * G / P + r of an endless sequence of epochs, each a permutation of the
pairs keyed on (``data.seed``, epoch); the eval stream is the eval pairs once in file order, the last batch
padded with empty rows (weight 0). Per row:

- ``source`` float32 [S, D]: the fixed input vectors of the first S = ``data.max_seq_length`` source words
  (``parallel.input_vectors``), zeros after them; ``source_mask`` int32 [S];
- ``target_in`` int32 [S]: <eos> (the start symbol) then the target words; ``target_out`` the target words then
  <eos>, cut to S; ``target_weights`` float32 [S] (1 at real target positions).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ptm_jax.families.cove.parallel import Pairs, input_vectors


class EncodedPairs:
    """``Pairs`` as arrays: source word ids into a table of their input vectors, target ids of the vocabulary."""

    def __init__(self, pairs: Pairs, model_cfg: Any, tokenizer: Any, length: int):
        words: dict[str, int] = {"": 0}
        n = len(pairs.source)
        self.src = np.zeros((n, length), np.int32)
        self.tgt_in = np.full((n, length), tokenizer.pad_id, np.int32)
        self.tgt_out = np.full((n, length), tokenizer.pad_id, np.int32)
        self.weights = np.zeros((n, length), np.float32)
        lower = bool(getattr(tokenizer, "lower_case", False))
        for i, (s, t) in enumerate(zip(pairs.source, pairs.target)):
            ids = [words.setdefault(w, len(words)) for w in s[:length]]
            self.src[i, :len(ids)] = ids
            tid = [tokenizer.token_to_id(w.lower() if lower else w) for w in t[:length - 1]]
            self.tgt_in[i, :len(tid) + 1] = [tokenizer.eos_id, *tid]
            self.tgt_out[i, :len(tid) + 1] = [*tid, tokenizer.eos_id]
            self.weights[i, :len(tid) + 1] = 1.0
        self.table = input_vectors(model_cfg, list(words))
        self.table[0] = 0.0
        self.num_pairs = n

    def rows(self, index: np.ndarray, live: np.ndarray | None = None) -> dict[str, np.ndarray]:
        ids = self.src[index]
        out = {"source": self.table[ids], "source_mask": (ids > 0).astype(np.int32),
               "target_in": self.tgt_in[index], "target_out": self.tgt_out[index],
               "target_weights": self.weights[index].copy()}
        if live is not None:
            out["target_weights"] *= live[:, None]
            out["source_mask"] *= live[:, None].astype(np.int32)
        return out


def feature_shapes(rows: int, length: int, dim: int) -> dict[str, tuple]:
    return {"source": (rows, length, dim), "source_mask": (rows, length), "target_in": (rows, length),
            "target_out": (rows, length), "target_weights": (rows, length)}


def feature_dtype(name: str):
    return {"source": np.float32, "target_weights": np.float32}.get(name, np.int32)


def translation_dataset(data: EncodedPairs, *, seed: int, start: int, global_batch: int, process_index: int,
                        process_count: int, repeat: bool, length: int, dim: int):
    """The tf.data.Dataset of this process's rows (module doc); finite when not ``repeat``."""
    from ptm_jax.families.word2vec.data import batch_dataset

    rows = global_batch // process_count
    offset = process_index * rows
    perms: dict[int, np.ndarray] = {}

    def order(epoch: int) -> np.ndarray:
        if epoch not in perms:
            if len(perms) > 2:
                perms.pop(min(perms))
            perms[epoch] = np.random.default_rng([seed, epoch]).permutation(data.num_pairs)
        return perms[epoch]

    def make(batch: int) -> dict[str, np.ndarray]:
        e = batch * global_batch + offset + np.arange(rows)
        if repeat:
            index = np.asarray([order(int(x) // data.num_pairs)[int(x) % data.num_pairs] for x in e])
            return data.rows(index)
        live = (e < data.num_pairs).astype(np.float32)
        return data.rows(np.minimum(e, data.num_pairs - 1), live)

    ds = batch_dataset(make, feature_shapes(rows, length, dim), feature_dtype, start // global_batch)
    if not repeat:
        ds = ds.take(math.ceil(data.num_pairs / global_batch))
    return ds
