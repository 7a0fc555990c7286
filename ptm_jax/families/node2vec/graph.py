"""node2vec's input graph: an edge list read into compressed rows (Grover & Leskovec 2016, Sec. 3.2; the reference
code reads it with networkx's ``read_edgelist``).

An edge list is one edge a line, ``SOURCE TARGET`` or, with ``data.weighted``, ``SOURCE TARGET WEIGHT``
(whitespace-separated; blank lines and ``#`` comments skipped). Node names are any strings without whitespace.
Undirected graphs (``data.directed=false``) hold each edge both ways. A repeated edge keeps the weight of its last
line (networkx's ``add_edge`` does the same); a self-loop is kept. A line with the wrong number of fields, or a
weight that is not a positive finite number, is a DataError naming the file and line.

``data.graph = "generated"`` is a planted-partition graph made from ``data.seed`` (4 communities of 25 nodes,
an edge inside a community with probability 0.3, across with 0.02; nodes ``c<community>n<index>``): no file,
for smoke runs and tests, as the text families' ``data.corpus = "embedded"``.

The nodes are numbered by degree (edges at the node, both directions), most first, ties by the name's UTF-8
bytes, so the vocabulary (``corpus.py``) lists hubs first. Row ``v`` of the compressed rows holds v's out-neighbours
sorted by number, so "is x a neighbour of t" is a binary search.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path

import numpy as np

from ptm_jax.data.corpus import numbered_lines
from ptm_jax.errors import ConfigError, DataError

GENERATED = "generated"
COMMUNITIES, COMMUNITY_SIZE, P_IN, P_OUT = 4, 25, 0.3, 0.02


@dataclasses.dataclass(frozen=True)
class Graph:
    """Compressed rows: the out-neighbours of node v are ``indices[indptr[v]:indptr[v + 1]]`` (sorted), with
    ``weights`` alongside; ``names[v]`` is node v's name."""

    names: list[str]
    indptr: np.ndarray    # int64 [N + 1]
    indices: np.ndarray   # int32 [E]
    weights: np.ndarray   # float64 [E]
    directed: bool

    @property
    def num_nodes(self) -> int:
        return len(self.names)

    @property
    def num_edges(self) -> int:
        """Stored (directed) edges: an undirected edge counts twice."""
        return int(self.indices.size)

    @property
    def degree(self) -> np.ndarray:
        return np.diff(self.indptr)

    def has_edge(self, source: np.ndarray, target: np.ndarray) -> np.ndarray:
        """Whether each edge source[i] -> target[i] exists (vectorised binary search in the sorted rows)."""
        source, target = np.asarray(source, np.int64), np.asarray(target, np.int64)
        keys = source * self.num_nodes + target
        flat = self.edge_keys
        at = np.searchsorted(flat, keys)
        return flat[np.minimum(at, flat.size - 1)] == keys

    @functools.cached_property
    def edge_keys(self) -> np.ndarray:
        """int64 [E] source x N + target of every stored edge, ascending (the rows are sorted)."""
        return np.repeat(np.arange(self.num_nodes, dtype=np.int64), self.degree) * self.num_nodes + self.indices


def read_edge_list(path: str | Path, *, directed: bool, weighted: bool) -> Graph:
    """The graph of an edge-list file (module doc)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"data.graph={str(path)!r}: no such file; give an edge list ('SOURCE TARGET [WEIGHT]' "
                          f"lines) or data.graph='{GENERATED}'")
    edges: dict[tuple[str, str], float] = {}
    want = 3 if weighted else 2
    for lineno, line in numbered_lines(p):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) != want:
            hint = " (a weighted edge list? set data.weighted=true)" if len(fields) == 3 and not weighted else ""
            raise DataError(f"{p}:{lineno}: expected {'SOURCE TARGET WEIGHT' if weighted else 'SOURCE TARGET'}"
                            f", got {len(fields)} field(s){hint}: {line.strip()[:80]!r}")
        w = 1.0
        if weighted:
            try:
                w = float(fields[2])
            except ValueError:
                w = math.nan
            if not (math.isfinite(w) and w > 0):
                raise DataError(f"{p}:{lineno}: the weight {fields[2]!r} is not a positive finite number")
        edges[(fields[0], fields[1])] = w
        if not directed:
            edges[(fields[1], fields[0])] = w
    if not edges:
        raise DataError(f"{p}: holds no edges ('SOURCE TARGET [WEIGHT]' lines)")
    return from_edges(edges, directed)


def generated_graph(seed: int) -> tuple[Graph, dict[str, int]]:
    """The planted-partition graph of ``data.graph='generated'`` (module doc) and each node's community."""
    rng = np.random.default_rng([int(seed), 20160813])
    n = COMMUNITIES * COMMUNITY_SIZE
    community = np.arange(n) // COMMUNITY_SIZE
    names = [f"c{c}n{i % COMMUNITY_SIZE}" for i, c in enumerate(community)]
    a, b = np.triu_indices(n, 1)
    prob = np.where(community[a] == community[b], P_IN, P_OUT)
    keep = rng.random(a.size) < prob
    edges: dict[tuple[str, str], float] = {}
    for i, j in zip(a[keep].tolist(), b[keep].tolist()):
        edges[(names[i], names[j])] = edges[(names[j], names[i])] = 1.0
    return from_edges(edges, False), {names[i]: int(community[i]) for i in range(n)}


def load_graph(data_cfg) -> Graph:
    """``data.graph`` as configured: an edge-list file, or the generated graph."""
    if not data_cfg.graph:
        raise ConfigError(f"data.graph is empty: give an edge-list file ('SOURCE TARGET [WEIGHT]' lines) or "
                          f"'{GENERATED}'")
    if data_cfg.graph == GENERATED:
        return generated_graph(data_cfg.seed)[0]
    return read_edge_list(data_cfg.graph, directed=data_cfg.directed, weighted=data_cfg.weighted)


def from_edges(edges: dict[tuple[str, str], float], directed: bool) -> Graph:
    """Compressed rows of ``{(source, target): weight}``, nodes numbered by degree (module doc)."""
    deg: dict[str, int] = {}
    for s, t in edges:
        deg[s] = deg.get(s, 0) + 1
        deg[t] = deg.get(t, 0) + 1
    names = sorted(deg, key=lambda x: (-deg[x], x.encode("utf-8")))
    index = {name: i for i, name in enumerate(names)}
    src = np.fromiter((index[s] for s, _ in edges), np.int64, len(edges))
    dst = np.fromiter((index[t] for _, t in edges), np.int64, len(edges))
    w = np.fromiter(edges.values(), np.float64, len(edges))
    order = np.lexsort((dst, src))
    src, dst, w = src[order], dst[order], w[order]
    indptr = np.zeros(len(names) + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=len(names)), out=indptr[1:])
    return Graph(names=names, indptr=indptr, indices=dst.astype(np.int32), weights=w, directed=directed)
