"""The ``[model]`` and ``[data]`` sections of the Poincare-embeddings family (Nickel & Kiela 2017; the knobs of
facebookresearch/poincare-embeddings and gensim's ``PoincareModel``)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ptm_jax.config import DataConfig
from ptm_jax.errors import ConfigError


def _number(where: str, name: str, v, low: float, *, strict: bool = False, high: float | None = None) -> None:
    bad = (not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v)
           or (v <= low if strict else v < low) or (high is not None and v >= high))
    if bad:
        bound = f"{'>' if strict else '>='} {low}" + (f" and < {high}" if high is not None else "")
        raise ConfigError(f"{where}.{name}={v!r} must be a number {bound}")


@dataclass
class PoincareConfig:
    """One table of points in the open unit ball, a row per node of the hierarchy (``vocab_size`` >= nodes + 3:
    the word vocabulary's specials come first and stay unused)."""

    family: str = "poincare"
    vocab_size: int = 2000
    dim: int = 10
    """The ball's dimension (the paper's Table 1: 5 to 200; gensim's default 50)."""
    init_range: float = 1e-3
    """Initial coordinates uniform in [-init_range, init_range) (the paper's 0.001; gensim's ``init_range``)."""
    epsilon: float = 1e-5
    """The retraction: a point whose norm reaches 1 - epsilon is scaled back to that norm (gensim's and the
    reference's 1e-5)."""
    burn_in_factor: float = 0.1
    """The learning rate during the burn-in epochs is ``train.learning_rate`` x this (the paper's lr / 10;
    gensim's ``burn_in_alpha`` 0.01 against ``alpha`` 0.1)."""
    regularization: float = 0.0
    """gensim's ``regularization_coeff``: this x |v|^2 of the positive target v added to each example's loss
    (gensim's default 1.0; the paper and the reference have none: 0)."""

    def validate(self, where: str = "model") -> None:
        if self.family != "poincare":
            raise ConfigError(f"{where}.family={self.family!r}: this section is the poincare family's")
        for name, low in (("vocab_size", 4), ("dim", 1)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ConfigError(f"{where}.{name}={v!r} must be an integer >= {low}")
        _number(where, "init_range", self.init_range, 0.0, strict=True, high=0.5)
        _number(where, "epsilon", self.epsilon, 0.0, strict=True, high=0.5)
        _number(where, "burn_in_factor", self.burn_in_factor, 0.0, strict=True)
        _number(where, "regularization", self.regularization, 0.0)


@dataclass
class PoincareDataConfig(DataConfig):
    """The hierarchy and the examples: one example is one relation (u, v) of the transitive closure with
    ``negative`` nodes v' that are not related to u. An epoch is every relation once, in an order keyed on
    (seed, epoch); ``train.steps`` = (burn_in + epochs) x relations / ``train.batch_size`` (logged for the
    hierarchy at start)."""

    hierarchy: str = ""
    """The closure's relations: 'CHILD PARENT' lines (gensim's ``PoincareRelations`` TSV), or the reference's
    CSV with the header 'id1,id2,weight' (``hierarchy.py``); or 'generated' (a small balanced tree's closure)."""
    negative: int = 10
    """Negatives per relation (the paper's and gensim's 10)."""
    negative_power: float = 1.0
    """Negatives are drawn in proportion to count^this, a node's count being the relations it takes part in
    (1: gensim's draw; 0: uniform over the nodes); a draw related to u (or u itself) is drawn again, up to
    ``negative_tries`` times, and left out if it still is."""
    negative_tries: int = 10
    burn_in: int = 10
    """Epochs at the reduced rate first (``model.burn_in_factor``; the paper's and gensim's 10)."""

    def validate(self, where: str = "data") -> None:
        super().validate(where)
        self.validate_poincare(where)

    def validate_poincare(self, where: str = "data") -> None:
        for name, low in (("negative", 1), ("negative_tries", 1), ("burn_in", 0)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ConfigError(f"{where}.{name}={v!r} must be an integer >= {low}")
        _number(where, "negative_power", self.negative_power, 0.0)
        if not isinstance(self.hierarchy, str):
            raise ConfigError(f"{where}.hierarchy={self.hierarchy!r}: give a relations file or 'generated'")
