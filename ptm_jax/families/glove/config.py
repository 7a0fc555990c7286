"""The ``[model]`` and ``[data]`` sections of the GloVe family (Pennington, Socher and Manning 2014, EMNLP,
Sec. 3-4; stanfordnlp/GloVe src/cooccur.c and src/glove.c for the defaults)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ptm_jax.config import DataConfig
from ptm_jax.errors import ConfigError


@dataclass
class GloveConfig:
    """J = sum_ij f(X_ij) (w_i . w~_j + b_i + b~_j - log X_ij)^2, f(x) = min(1, (x / x_max)^alpha) (paper eq. 8-9).

    The exported vectors are W + W~ (paper Sec. 4.2; glove.c ``-model 2``)."""

    family: str = "glove"
    vocab_size: int = 16000
    """|V|: rows of W and W~ (the word vocabulary, ``<pad>``, ``<unk>``, ``<eos>`` included: their rows are
    never trained, as no co-occurrence names them)."""
    dim: int = 50
    """d: vector size (glove.c ``-vector-size``; demo.sh 50, the paper up to 300)."""
    x_max: float = 100.0
    """Cut-off of the weighting function (paper Sec. 4.2: 100; demo.sh uses 10 on text8)."""
    alpha: float = 0.75
    """Exponent of the weighting function (paper Sec. 4.2)."""

    def validate(self, where: str = "model") -> None:
        if self.family != "glove":
            raise ConfigError(f"{where}.family={self.family!r}: this section is the GloVe family's ('glove')")
        for name, low in (("vocab_size", 4), ("dim", 1)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ConfigError(f"{where}.{name}={v!r} must be an integer >= {low}")
        if not (isinstance(self.x_max, (int, float)) and self.x_max > 0):
            raise ConfigError(f"{where}.x_max={self.x_max!r} must be a positive number (the paper's 100)")
        if not (isinstance(self.alpha, (int, float)) and self.alpha > 0):
            raise ConfigError(f"{where}.alpha={self.alpha!r} must be a positive number (the paper's 0.75)")


MAX_WINDOW = 40
"""Counts are kept exactly as integers in units of 1 / lcm(1..window) (so any sharding sums to the same bytes);
lcm(1..40) ~ 5.3e15 is the last that leaves room in int64 for the counts."""


@dataclass
class GloveDataConfig(DataConfig):
    """The co-occurrence pass (cooccur.c): within ``window`` words of each other, inside one document."""

    window: int = 15
    """Context words counted on each side (cooccur.c ``-window-size``, default 15)."""
    symmetric: bool = True
    """Count left and right contexts (cooccur.c ``-symmetric 1``); False: left context only."""
    distance_weighting: bool = True
    """Weight a pair d words apart by 1/d (cooccur.c ``-distance-weighting 1``); False: 1."""

    def validate(self, where: str = "data") -> None:
        if hasattr(DataConfig, "validate"):
            super().validate(where)
        w = self.window
        if not isinstance(w, int) or isinstance(w, bool) or not 1 <= w <= MAX_WINDOW:
            raise ConfigError(f"{where}.window={w!r} must be an integer in [1, {MAX_WINDOW}]")

    @property
    def weight_unit(self) -> int:
        """Counts are integers in units of 1/unit: lcm(1..window) with distance weighting, else 1."""
        return math.lcm(*range(1, self.window + 1)) if self.distance_weighting else 1
