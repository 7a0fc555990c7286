"""The hierarchy Poincare embeddings learn from: the relations (u, v) of a transitive closure (Nickel & Kiela
2017, Sec. 4: WordNet's noun and mammal closures, every (node, ancestor) pair).

Two layouts are read. Lines 'CHILD PARENT' (tab or spaces; gensim's ``PoincareRelations`` TSV, e.g. its
``poincare_hypernyms.tsv``), and the reference code's CSV (a ``.csv`` file: 'id1,id2,weight' lines after the header
'id1,id2,weight', the weight ignored as the reference's closures hold 1). Blank lines and ``#`` comments are
skipped. A line naming a node without its parent, or with more fields, is a DataError naming the file and line;
a repeated relation is kept once.

``data.hierarchy = "generated"``: the closure of a balanced tree (branching 3, depth 4: 121 nodes named by their
path, 'r', 'r.0', 'r.0.2', ...; 426 relations), no file, for smoke runs and tests.

The nodes are numbered by count (the relations they take part in, gensim's vocabulary count), most first, ties
by the name's UTF-8 bytes; vocabulary id = number + 3 (``<pad>``, ``<unk>``, ``<eos>`` first).
"""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import numpy as np

from ptm_jax.data.corpus import numbered_lines
from ptm_jax.errors import ConfigError, DataError

GENERATED = "generated"
SPECIALS = 3
BRANCHING, DEPTH = 3, 4


@dataclasses.dataclass(frozen=True)
class Hierarchy:
    """``names[i]``: node i; ``relations`` int64 [R, 2] of node numbers (u, v); ``counts`` [N]."""

    names: list[str]
    relations: np.ndarray
    counts: np.ndarray

    @property
    def num_nodes(self) -> int:
        return len(self.names)

    @functools.cached_property
    def keys(self) -> np.ndarray:
        """int64 sorted u x N + v of every relation: "is v related to u" by binary search."""
        return np.sort(self.relations[:, 0] * self.num_nodes + self.relations[:, 1])

    def related(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        k = np.asarray(u, np.int64) * self.num_nodes + np.asarray(v, np.int64)
        at = np.minimum(np.searchsorted(self.keys, k), self.keys.size - 1)
        return self.keys[at] == k


def read_relations(path: str | Path) -> Hierarchy:
    """The relations of a closure file (module doc)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"data.hierarchy={str(path)!r}: no such file; give a closure ('CHILD PARENT' lines, or "
                          f"the reference's id1,id2,weight CSV) or data.hierarchy='{GENERATED}'")
    csv = p.suffix.lower() == ".csv"
    pairs: dict[tuple[str, str], None] = {}
    layout = "id1,id2,weight" if csv else "CHILD PARENT"
    for lineno, line in numbered_lines(p):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        fields = [x.strip() for x in text.split(",")] if csv else text.split()
        if csv and lineno == 1 and fields[:2] == ["id1", "id2"]:
            continue
        if len(fields) < 2 or not fields[1]:
            raise DataError(f"{p}:{lineno}: node {fields[0]!r} has no parent: expected {layout}, one relation a "
                            "line")
        if len(fields) > (3 if csv else 2):
            raise DataError(f"{p}:{lineno}: expected {layout}, got {len(fields)} fields: {text[:80]!r}")
        pairs[(fields[0], fields[1])] = None
    if not pairs:
        raise DataError(f"{p}: holds no relations")
    return from_pairs(list(pairs))


def generated_hierarchy() -> Hierarchy:
    """The balanced tree's closure of ``data.hierarchy='generated'`` (module doc)."""
    pairs = []
    level = ["r"]
    for _ in range(DEPTH):
        nxt = [f"{n}.{b}" for n in level for b in range(BRANCHING)]
        for n in nxt:
            parts = n.split(".")
            pairs += [(n, ".".join(parts[:k])) for k in range(1, len(parts))]
        level = nxt
    return from_pairs(pairs)


def load_hierarchy(data_cfg) -> Hierarchy:
    if not data_cfg.hierarchy:
        raise ConfigError(f"data.hierarchy is empty: give a closure file or '{GENERATED}'")
    return generated_hierarchy() if data_cfg.hierarchy == GENERATED else read_relations(data_cfg.hierarchy)


def from_pairs(pairs: list[tuple[str, str]]) -> Hierarchy:
    count: dict[str, int] = {}
    for u, v in pairs:
        count[u] = count.get(u, 0) + 1
        count[v] = count.get(v, 0) + 1
    names = sorted(count, key=lambda x: (-count[x], x.encode("utf-8")))
    index = {n: i for i, n in enumerate(names)}
    rel = np.array([(index[u], index[v]) for u, v in pairs], np.int64).reshape(-1, 2)
    return Hierarchy(names, rel, np.array([count[n] for n in names], np.int64))
