"""node2vec's transition tables (Grover & Leskovec 2016, Sec. 3.2.2 and Algorithm 1): alias tables (Walker 1977;
Vose 1991) for a draw in O(1) from the walk's next-step distribution, precomputed once.

* First order, one table per node v over its out-neighbours x: pi_vx = w_vx (the walk's first step, and every
  step when p = q = 1, where the second-order bias is 1 everywhere: DeepWalk's walk).
* Second order, one table per edge (t, v) over v's out-neighbours x: pi_vx = alpha_pq(t, x) w_vx with
  alpha = 1/p if x = t, 1 if x is a neighbour of t (the edge x -> t exists: the reference code's
  ``G.has_edge(dst_nbr, src)``), 1/q otherwise.

A table of n entries is (prob [n], alias [n]): draw i uniform in [0, n) and u uniform in [0, 1); the outcome is
i if u < prob[i], else alias[i]. The node tables sit at the node's compressed-row slots (``indptr``), the edge
tables one after another in edge order (``edge_start``), so the table of the edge taken last is found from the
slot of that edge.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ptm_jax.errors import ConfigError
from ptm_jax.families.node2vec.graph import Graph


def alias_setup(probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(prob, alias) of a distribution ``probs`` (any positive scale): Vose's construction."""
    n = probs.size
    q = probs * (n / probs.sum())
    alias = np.arange(n, dtype=np.int32)
    small = [i for i in range(n) if q[i] < 1.0]
    large = [i for i in range(n) if q[i] >= 1.0]
    while small and large:
        s, big = small.pop(), large.pop()
        alias[s] = big
        q[big] -= 1.0 - q[s]
        (small if q[big] < 1.0 else large).append(big)
    for i in small + large:   # what rounding left: certain
        q[i] = 1.0
    return q, alias


def _setup_segments(weights: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One alias table per segment ``weights[starts[k]:starts[k + 1]]``, concatenated."""
    prob = np.ones(weights.size, np.float64)
    alias = np.zeros(weights.size, np.int32)
    for a, b in zip(starts[:-1].tolist(), starts[1:].tolist()):
        if b > a:
            prob[a:b], alias[a:b] = alias_setup(weights[a:b])
    return prob, alias


@dataclasses.dataclass(frozen=True)
class Tables:
    """The precomputed tables of one graph and (p, q)."""

    node_prob: np.ndarray      # float64 [E]: node v's table at slots indptr[v] .. indptr[v + 1]
    node_alias: np.ndarray     # int32 [E]: an index within v's row
    edge_start: np.ndarray | None   # int64 [E + 1]: edge e's table at edge_start[e] .. (None: first order only)
    edge_prob: np.ndarray | None
    edge_alias: np.ndarray | None

    @property
    def second_order(self) -> bool:
        return self.edge_start is not None


def second_order_weights(graph: Graph, p: float, q: float) -> tuple[np.ndarray, np.ndarray]:
    """(int64 [E + 1] table starts, float64 [T] unnormalised pi_vx) of every edge (t, v) in edge order."""
    src = np.repeat(np.arange(graph.num_nodes, dtype=np.int64), graph.degree)
    dst = graph.indices.astype(np.int64)
    sizes = graph.degree[dst]
    starts = np.zeros(dst.size + 1, np.int64)
    np.cumsum(sizes, out=starts[1:])
    edge = np.repeat(np.arange(dst.size, dtype=np.int64), sizes)
    within = np.arange(starts[-1], dtype=np.int64) - starts[edge]
    slot = graph.indptr[dst[edge]] + within
    t, x = src[edge], graph.indices[slot].astype(np.int64)
    alpha = np.where(x == t, 1.0 / p, np.where(graph.has_edge(x, t), 1.0, 1.0 / q))
    return starts, alpha * graph.weights[slot]


def build_tables(graph: Graph, p: float, q: float) -> Tables:
    """The node tables, and the edge tables unless p = q = 1 (the bias is then 1 for every x: the node tables
    give the same distribution)."""
    for name, v in (("p", p), ("q", q)):
        if not (isinstance(v, (int, float)) and np.isfinite(v) and v > 0):
            raise ConfigError(f"data.{name}={v!r} must be a positive number")
    node_prob, node_alias = _setup_segments(graph.weights, graph.indptr)
    if p == 1 and q == 1:
        return Tables(node_prob, node_alias, None, None, None)
    starts, weights = second_order_weights(graph, p, q)
    edge_prob, edge_alias = _setup_segments(weights, starts)
    return Tables(node_prob, node_alias, starts, edge_prob, edge_alias)
