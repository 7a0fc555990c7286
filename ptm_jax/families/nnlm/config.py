"""The ``[model]`` section of the NNLM family (Bengio, Ducharme, Vincent and Jauvin 2003, JMLR 3, Sec. 2)."""
from __future__ import annotations

from dataclasses import dataclass

from ptm_jax.errors import ConfigError


@dataclass
class NnlmConfig:
    """y = b + W x + U tanh(d + H x), x = (C(w_{t-1}), ..., C(w_{t-n+1})) (paper Sec. 2, eq. 1).

    Paper names: ``order`` = n, ``embed_dim`` = m, ``hidden_dim`` = h, ``direct`` = whether W exists (the
    paper's Table 1 compares models with and without it)."""

    family: str = "nnlm"
    vocab_size: int = 16000
    """|V|: the word vocabulary (``data/word_vocab.py``; ``<pad>``, ``<unk>``, ``<eos>`` included)."""
    order: int = 5
    """n of the n-gram: each word is predicted from its n-1 predecessors."""
    embed_dim: int = 60
    """m: the size of a word's feature vector C(w)."""
    hidden_dim: int = 100
    """h: tanh hidden units (0: no hidden layer, y = b + W x, the paper's h=0 rows; needs direct=true)."""
    direct: bool = True
    """W: direct connections from the word features to the output (the paper's "direct" column)."""
    init_std: float = 0.01
    """Standard deviation of the (truncated normal) initial weights and features."""
    dtype: str = "float32"
    """Compute dtype (float32 or bfloat16); parameters stay float32."""
    init_vectors: str = ""
    """A word2vec text/binary or GloVe text vector file (``export/vector_files.py``) whose vectors initialise C
    for the vocabulary's words it holds (the coverage is logged; the other rows keep ``init_std``); '': none.
    Its dimension must be ``embed_dim``."""

    @property
    def context(self) -> int:
        """n - 1: predecessors per prediction (a row of L predictions holds L + n - 1 tokens)."""
        return self.order - 1

    def validate(self, where: str = "model") -> None:
        if self.family != "nnlm":
            raise ConfigError(f"{where}.family={self.family!r}: this section is the NNLM family's ('nnlm')")
        for name, low in (("vocab_size", 4), ("order", 2), ("embed_dim", 1), ("hidden_dim", 0)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ConfigError(f"{where}.{name}={v!r} must be an integer >= {low}")
        if self.hidden_dim == 0 and not self.direct:
            raise ConfigError(f"{where}.hidden_dim=0 and {where}.direct=false leave the output no input; "
                              "set hidden_dim > 0 or direct=true")
        if self.dtype not in ("float32", "bfloat16"):
            raise ConfigError(f"{where}.dtype={self.dtype!r} must be 'float32' or 'bfloat16'")
        if not self.init_std > 0:
            raise ConfigError(f"{where}.init_std={self.init_std!r} must be positive")
