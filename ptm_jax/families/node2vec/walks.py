"""node2vec's random walks as a stream of running words for word2vec's examples (Grover & Leskovec 2016,
Algorithm 1: ``r`` walks of length ``l`` from every node, each a "sentence" for skip-gram).

One pass holds W = ``walks_per_node`` x N walks. Walk ``s`` of a pass starts at node ``perm_r[s mod N]``, r =
s div N, ``perm_r`` a permutation of the nodes keyed on (seed, r) (the reference shuffles the nodes before each
round of walks). Its first step is drawn from the start's node table, every later one from the table of the edge
just taken (``alias.py``); every draw is a counter-based uniform keyed on (seed, s, step)
(``word2vec/sampling.uniforms``), so walk s is the same whoever walks it, in whatever order. A walk that reaches a
node without out-edges (a directed graph's sink) stops there: its remaining positions are ``<pad>``, which
word2vec's examples never use (the specials are never kept), so the walk is shorter.

The stream is the token stream word2vec's examples read (``word2vec/data.py``, ``stream=``): walk s of pass e
fills positions ``(e W + s)(l + 1)`` on, each node as its vocabulary id (node number + the 3 specials), then
``<eos>``, so a context never crosses two walks. Every pass holds the same walks, as gensim's epochs run over
one list of walks (the reference code and PecanPy train gensim's Word2Vec on them); word2vec's draws
(subsampling, windows, negatives) are keyed on the stream position, so they differ by pass.

A span of positions walks only the walks it covers, so a host builds the walks of its own rows of each batch:
each host walks from its own start nodes, none holds the corpus of walks, and a resumed run walks the same.
"""
from __future__ import annotations

import dataclasses
import threading

import numpy as np

from ptm_jax.families.node2vec.alias import Tables
from ptm_jax.families.node2vec.graph import Graph
from ptm_jax.families.word2vec.sampling import uniforms

START, STEP_INDEX, STEP_KEEP = 11, 12, 13
"""Purposes of the walk draws (word2vec's examples use 1-3 with the same seed)."""
SPECIALS = 3
"""Vocabulary ids of ``<pad>``, ``<unk>``, ``<eos>`` (``data/word_vocab.py``): node v is id v + 3."""
PAD_ID, EOS_ID = 0, 2


def start_nodes(num_nodes: int, seed: int, round_: int) -> np.ndarray:
    """The permutation of the nodes that round ``round_`` of walks starts from."""
    keys = uniforms(seed, START, round_ * num_nodes + np.arange(num_nodes, dtype=np.int64))
    return np.argsort(keys, kind="stable")


@dataclasses.dataclass
class Walks:
    """The walks of one graph and one setting of (p, q, l, r)."""

    graph: Graph
    tables: Tables
    length: int
    per_node: int

    def __post_init__(self) -> None:
        self._starts: dict[tuple[int, int], np.ndarray] = {}
        self._lock = threading.Lock()

    @property
    def per_pass(self) -> int:
        """W: the walks of one pass."""
        return self.per_node * self.graph.num_nodes

    def starts(self, slots: np.ndarray, seed: int) -> np.ndarray:
        n = self.graph.num_nodes
        rounds = slots // n
        out = np.empty(slots.size, np.int64)
        for r in np.unique(rounds).tolist():
            with self._lock:
                perm = self._starts.get((seed, r))
            if perm is None:
                perm = start_nodes(n, seed, r)
                with self._lock:
                    if len(self._starts) > 16:
                        self._starts.clear()
                    self._starts[(seed, r)] = perm
            pick = rounds == r
            out[pick] = perm[slots[pick] % n]
        return out

    def nodes(self, slots: np.ndarray, seed: int) -> np.ndarray:
        """int64 [len(slots), l]: the nodes of walks ``slots`` (0 <= slot < W), -1 after a walk stopped."""
        g, t = self.graph, self.tables
        slots = np.asarray(slots, np.int64)
        n, length = slots.size, self.length
        out = np.full((n, length), -1, np.int64)
        cur = self.starts(slots, seed)
        out[:, 0] = cur
        edge = np.zeros(n, np.int64)
        alive = np.ones(n, bool)
        deg = g.degree
        for k in range(1, length):
            size = deg[cur]
            alive &= size > 0
            if not alive.any():
                break
            counter = slots * length + k
            i = np.minimum((uniforms(seed, STEP_INDEX, counter) * size).astype(np.int64), np.maximum(size - 1, 0))
            keep = uniforms(seed, STEP_KEEP, counter)
            if k == 1 or not t.second_order:
                at = np.where(alive, g.indptr[cur] + i, 0)
                pick = np.where(keep < t.node_prob[at], i, t.node_alias[at])
            else:
                at = np.where(alive, t.edge_start[edge] + i, 0)
                pick = np.where(keep < t.edge_prob[at], i, t.edge_alias[at])
            slot = g.indptr[cur] + pick
            nxt = g.indices[np.where(alive, slot, 0)]
            cur = np.where(alive, nxt, cur)
            edge = np.where(alive, slot, edge)
            out[:, k] = np.where(alive, cur, -1)
        return out

    def stream(self, seed: int) -> "WalkStream":
        return WalkStream(self, seed)


class WalkStream:
    """The running words of the walks of ``seed`` (module doc): ``span(a, b)`` as ``PackedStream.span``."""

    def __init__(self, walks: Walks, seed: int):
        self.walks, self.seed = walks, int(seed)
        self.eos_id = EOS_ID
        self.walk_tokens = walks.length + 1
        self.pass_tokens = walks.per_pass * self.walk_tokens

    def span(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """(int32 tokens, bool "a walk starts here") of stream positions ``[start, stop)``."""
        if stop <= start:
            return np.zeros(0, np.int32), np.zeros(0, bool)
        pos = np.arange(start, stop, dtype=np.int64)
        walk, offset = np.divmod(pos, self.walk_tokens)
        first, last = int(walk[0]), int(walk[-1])
        slots = np.arange(first, last + 1, dtype=np.int64) % self.walks.per_pass
        nodes = self.walks.nodes(slots, self.seed)                 # [walks covered, l]
        row = walk - first
        node = nodes[row, np.minimum(offset, self.walks.length - 1)]
        tokens = np.where(offset == self.walks.length, EOS_ID, np.where(node >= 0, node + SPECIALS, PAD_ID))
        return tokens.astype(np.int32), offset == 0


def node_counts(walks: Walks, seed: int, slots: range, chunk: int = 4096) -> np.ndarray:
    """int64 [N]: how often each node occurs in the walks ``slots`` of ``seed``."""
    counts = np.zeros(walks.graph.num_nodes, np.int64)
    for a in range(slots.start, slots.stop, chunk):
        nodes = walks.nodes(np.arange(a, min(a + chunk, slots.stop), dtype=np.int64), seed)
        counts += np.bincount(nodes[nodes >= 0], minlength=counts.size)
    return counts
