"""The ``[model]`` and ``[data]`` sections of the node2vec family (Grover & Leskovec 2016): word2vec's sections
(the skip-gram it trains, ``families/word2vec/config.py``) with the graph and the walks added."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ptm_jax.errors import ConfigError
from ptm_jax.families.word2vec.config import Word2VecConfig, Word2VecDataConfig

TRUNK = "node2vec"
"""The parameter tree's top-level name (the objective's ``trunk``)."""


@dataclass
class Node2VecConfig(Word2VecConfig):
    """word2vec's tables, one row per node (the vocabulary is the graph's nodes after the 3 specials, so
    ``vocab_size`` >= nodes + 3); the exported vectors are the input table."""

    family: str = "node2vec"
    dim: int = 128
    """The paper's d = 128 (Sec. 4.1)."""


@dataclass
class Node2VecDataConfig(Word2VecDataConfig):
    """The graph, the walks (Algorithm 1) and word2vec's example options over them. One pass is
    ``walks_per_node`` x nodes walks of ``walk_length + 1`` running words (the walk and its ``<eos>``);
    ``train.steps`` = epochs x that / ``train.batch_size`` (the run logs the figure for its graph)."""

    graph: str = ""
    """An edge-list file, ``SOURCE TARGET [WEIGHT]`` a line (``graph.py``), or 'generated' (a small planted-partition
    graph, for smoke runs)."""
    directed: bool = False
    """The edges go one way (else each edge is stored both ways)."""
    weighted: bool = False
    """Lines carry a third field, the edge's weight (else every weight is 1)."""
    p: float = 1.0
    """Return parameter: the unnormalised probability of going back to the previous node is w / p."""
    q: float = 1.0
    """In-out parameter: of going to a node that is not a neighbour of the previous one, w / q (p = q = 1:
    DeepWalk's uniform walk)."""
    walk_length: int = 80
    """l: nodes per walk (the paper's 80)."""
    walks_per_node: int = 10
    """r: walks started from every node per pass (the paper's 10)."""
    window: int = 10
    """The paper's context size k = 10."""

    def validate(self, where: str = "data") -> None:
        super().validate(where)
        self.validate_node2vec(where)

    def validate_node2vec(self, where: str = "data") -> None:
        self.validate_word2vec(where)
        for name in ("walk_length", "walks_per_node"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < (2 if name == "walk_length" else 1):
                raise ConfigError(f"{where}.{name}={v!r} must be an integer >= {2 if name == 'walk_length' else 1}")
        for name in ("p", "q"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
                raise ConfigError(f"{where}.{name}={v!r} must be a positive number")
        if not isinstance(self.graph, str):
            raise ConfigError(f"{where}.graph={self.graph!r}: give an edge-list file or 'generated'")
