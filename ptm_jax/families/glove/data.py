"""GloVe batches: the nonzero entries (i, j, X_ij) of the co-occurrence matrix in a fresh random order each
epoch (glove.c trains on the output of stanfordnlp/GloVe src/shuffle.c, shuffled once; Pennington et al. 2014
Sec. 4.2: "stochastically sampling non-zero elements from X"), streamed through tf.data.

Stateless and resumable: global example k is entry ``perm_e[k mod N]`` of epoch e = k // N, where N is the
number of nonzero entries and ``perm_e`` the permutation drawn by numpy's PCG64 seeded with (seed, e). Global
batch b is examples [b*G, (b+1)*G); process p of P takes rows [p*G/P, (p+1)*G/P) of it, so any host count sees
the same examples and a resumed run (start index = step * G) continues exactly where it stopped.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ptm_jax.data.pretraining.source import check_share
from ptm_jax.families.glove.cooccur import Cooccurrence

if TYPE_CHECKING:  # annotations only: tf.data is imported where a dataset is built (the GPU hosts have none)
    import tensorflow as tf

FEATURE_DTYPES = {"x": np.float32, "row": np.int32, "col": np.int32}
_NAMES = tuple(FEATURE_DTYPES)


class TripleOrder:
    """Global example index -> (row, col, X) of the co-occurrence entry it trains on."""

    def __init__(self, cooc: Cooccurrence, seed: int):
        self.rows, self.cols = cooc.rows, cooc.cols
        self.x = cooc.values.astype(np.float32)
        self.n = cooc.nnz
        self.seed = int(seed)
        self._perms: dict[int, np.ndarray] = {}

    def permutation(self, epoch: int) -> np.ndarray:
        """The order of epoch ``epoch`` (the two most recent are kept)."""
        if epoch not in self._perms:
            if len(self._perms) >= 2:
                self._perms.pop(min(self._perms))
            self._perms[epoch] = np.random.default_rng([self.seed, epoch]).permutation(self.n).astype(np.int64)
        return self._perms[epoch]

    def entries(self, first: int, count: int) -> np.ndarray:
        """Indices into the triples of global examples [first, first + count)."""
        out = np.empty(count, np.int64)
        k, filled = first, 0
        while filled < count:
            epoch, pos = divmod(k, self.n)
            take = min(count - filled, self.n - pos)
            out[filled:filled + take] = self.permutation(epoch)[pos:pos + take]
            filled += take
            k += take
        return out

    def batch(self, first: int, count: int) -> dict[str, np.ndarray]:
        idx = self.entries(first, count)
        return {"x": self.x[idx], "row": self.rows[idx], "col": self.cols[idx]}


def glove_dataset(order: TripleOrder, *, start_index: int, global_batch: int, process_index: int = 0,
                  process_count: int = 1) -> tf.data.Dataset:
    """This process's rows of global batches ``start_index / global_batch``, ... (endless: epochs follow)."""
    import tensorflow as tf

    check_share(start_index, global_batch, process_index, process_count)
    rows = global_batch // process_count

    def make(batch) -> list[np.ndarray]:
        out = order.batch(int(batch.numpy()) * global_batch + process_index * rows, rows)
        return [out[k] for k in _NAMES]

    def build(batch: tf.Tensor) -> dict[str, tf.Tensor]:
        tensors = tf.py_function(make, [batch], [tf.as_dtype(FEATURE_DTYPES[k]) for k in _NAMES])
        out = dict(zip(_NAMES, tensors))
        for t in out.values():
            t.set_shape([rows])
        return out

    batches = tf.data.Dataset.counter(start_index // global_batch, dtype=tf.int64)
    # one batch at a time: the permutation cache is not shared between parallel calls
    return batches.map(tf.autograph.experimental.do_not_convert(build)).prefetch(tf.data.AUTOTUNE)
