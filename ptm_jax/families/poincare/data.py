"""Poincare-embedding examples (Nickel & Kiela 2017, Sec. 4; gensim's ``PoincareModel._train_batchwise``):
one relation (u, v) of the closure with ``negative`` nodes not related to u, streamed through tf.data,
deterministic, resumable at any step and the same for any host count.

Global example k is relation ``perm_e[k mod R]`` of epoch e = k div R, ``perm_e`` a permutation of the R relations
keyed on (seed, e) (gensim shuffles the relations every epoch). Epochs before ``data.burn_in`` are burn-in (the
feature ``burn_in``: the step scales their rate by ``model.burn_in_factor``). Negative j of example k is the
first of ``data.negative_tries`` counter-based draws (keyed on (seed, k, j, try); ``word2vec/sampling.uniforms``)
from count^``negative_power`` that is neither u nor related to u; if none is, its weight is 0 (gensim draws again
until it has ``negative`` distinct ones). Process p of P takes the p-th contiguous share of every global batch.

Features (B = this process's rows, K = negative): ``u`` [B] and ``targets`` [B, 1 + K] (v, then the negatives)
int32 vocabulary ids, ``target_weight`` [B, 1 + K] (1 for v and every kept negative), ``burn_in`` [B],
``example_id`` [B] int64.
"""
from __future__ import annotations

import numpy as np

from ptm_jax.families.poincare.hierarchy import SPECIALS, Hierarchy
from ptm_jax.families.word2vec.sampling import uniforms

ORDER, NEGATIVE = 21, 22
"""Purposes of the draws."""


def negative_cdf(hierarchy: Hierarchy, power: float) -> np.ndarray:
    """float64 [N]: the cumulative distribution of the negatives over node numbers."""
    w = hierarchy.counts.astype(np.float64) ** float(power)
    return np.cumsum(w / w.sum())


def relation_order(num: int, seed: int, epoch: int) -> np.ndarray:
    return np.argsort(uniforms(seed, ORDER, epoch * num + np.arange(num, dtype=np.int64)), kind="stable")


class Examples:
    """The examples of one hierarchy and config (module doc)."""

    def __init__(self, hierarchy: Hierarchy, *, negative: int, power: float, tries: int, burn_in: int, seed: int):
        self.h, self.negative, self.tries, self.burn_in, self.seed = hierarchy, negative, tries, burn_in, int(seed)
        self.cdf = negative_cdf(hierarchy, power)
        self._orders: dict[int, np.ndarray] = {}

    def order(self, epoch: int) -> np.ndarray:
        hit = self._orders.get(epoch)
        if hit is None:
            hit = relation_order(len(self.h.relations), self.seed, epoch)
            if len(self._orders) > 4:
                self._orders.clear()
            self._orders[epoch] = hit
        return hit

    def rows(self, first: int, n: int) -> dict[str, np.ndarray]:
        """The examples ``[first, first + n)``."""
        r = len(self.h.relations)
        k = np.arange(first, first + n, dtype=np.int64)
        epoch, at = np.divmod(k, r)
        rel = np.empty((n, 2), np.int64)
        for e in np.unique(epoch).tolist():
            pick = epoch == e
            rel[pick] = self.h.relations[self.order(e)[at[pick]]]
        u, v = rel[:, 0], rel[:, 1]
        kk, t = self.negative, self.tries
        idx = (k[:, None, None] * kk + np.arange(kk)[None, :, None]) * t + np.arange(t)[None, None, :]
        draws = np.minimum(np.searchsorted(self.cdf, uniforms(self.seed, NEGATIVE, idx), side="right"),
                           self.h.num_nodes - 1)                                       # [n, K, T]
        uu = np.broadcast_to(u[:, None, None], draws.shape)
        ok = (draws != uu) & ~self.h.related(uu, draws)
        first_ok = np.argmax(ok, axis=2)                                               # [n, K]
        found = np.take_along_axis(ok, first_ok[..., None], axis=2)[..., 0]
        neg = np.take_along_axis(draws, first_ok[..., None], axis=2)[..., 0]
        targets = np.concatenate([v[:, None], neg], axis=1) + SPECIALS
        weight = np.concatenate([np.ones((n, 1), bool), found], axis=1)
        return {"u": (u + SPECIALS).astype(np.int32), "targets": targets.astype(np.int32),
                "target_weight": weight.astype(np.float32), "burn_in": (epoch < self.burn_in).astype(np.float32),
                "example_id": k}


def feature_shapes(rows: int, negative: int) -> dict[str, tuple]:
    return {"u": (rows,), "targets": (rows, 1 + negative), "target_weight": (rows, 1 + negative),
            "burn_in": (rows,), "example_id": (rows,)}


def feature_dtype(name: str):
    return {"u": np.int32, "targets": np.int32, "example_id": np.int64}.get(name, np.float32)
