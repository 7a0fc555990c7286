"""Reconstruction (Nickel & Kiela 2017, Sec. 4.1, Table 1): how well the embedding of the whole closure ranks
each node's related nodes. For every node u with relations, each related v is ranked by d(u, v) among the nodes
not related to u, u itself left out (rank 1: nearer than every unrelated node); the figures are the mean rank
over all relations and the mean over u of the average precision of u's ranking (MAP).

gensim's ``ReconstructionEvaluation`` ranks among all nodes *including u itself* (distance 0), so every one of its
ranks is one more than here; ``tests/test_poincare.py`` checks that on the same vectors. Ties count as not
nearer (``<``), as there.
"""
from __future__ import annotations

import numpy as np

from ptm_jax.families.poincare.geometry import distances_np
from ptm_jax.families.poincare.hierarchy import Hierarchy


def reconstruction(vectors: np.ndarray, hierarchy: Hierarchy, *, count_self: bool = False) -> dict[str, float]:
    """{'mean_rank', 'map', 'relations', 'nodes'} of ``vectors`` [N, d] (row i = node i of ``hierarchy``);
    ``count_self``: rank among all nodes with u itself (gensim's protocol)."""
    rel = hierarchy.relations
    order = np.argsort(rel[:, 0], kind="stable")
    us, starts = np.unique(rel[order, 0], return_index=True)
    ends = np.append(starts[1:], len(order))
    ranks, aps = [], []
    v64 = np.asarray(vectors, np.float64)
    for u, a, b in zip(us.tolist(), starts.tolist(), ends.tolist()):
        pos = rel[order[a:b], 1]
        d = distances_np(v64[u], v64)
        mask = np.ones(d.size, bool)
        mask[pos] = False
        if not count_self:
            mask[u] = False
        neg = np.sort(d[mask])
        r = np.searchsorted(neg, d[pos], side="left") + 1            # unrelated nodes strictly nearer, + 1
        ranks.append(r)
        map_ranks = np.sort(r) + np.arange(r.size)                   # rank among unrelated and related nodes
        aps.append(float(np.mean(np.arange(1, r.size + 1) / np.sort(map_ranks))))
    all_ranks = np.concatenate(ranks)
    return {"mean_rank": float(all_ranks.mean()), "map": float(np.mean(aps)), "relations": int(all_ranks.size),
            "nodes": int(us.size)}
