"""The ``[model]`` section of the ELMo family (Peters et al. 2018, "Deep contextualized word representations";
allenai/bilm-tf ``bilm/training.py`` options and ``bilm/model.py``).

Field names follow bilm-tf's ``options.json`` where one exists (``char_cnn.filters``, ``lstm.dim``,
``lstm.projection_dim``, ...); ``weights.py`` maps an ``options.json`` onto this dataclass and back.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ptm_jax.errors import ConfigError

REFERENCE_FILTERS = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))
"""bilm-tf's filter bank (width, count): 2048 filters in all."""


@dataclass
class ElmoConfig:
    """Character CNN -> highway -> projection (the token representation), then a 2-layer LSTMP per direction.

    Defaults are the original ELMo (allenai/bilm-tf): 4096 cells projected to 512, cell and projection clip 3,
    a residual connection on every layer but the first, 8192 sampled classes."""

    family: str = "elmo"
    vocab_size: int = 16000
    """The softmax vocabulary: the word vocabulary (``data/word_vocab.py``), most frequent words first, which
    the log-uniform sampler assumes."""
    max_characters_per_token: int = 50
    """Characters per token, begin/end-of-word included (bilm-tf ``max_characters_per_token``)."""
    n_characters: int = 262
    """Character ids: 256 bytes + 5 specials (261) + id 0 for the mask (bilm-tf's inference layout; the hdf5's
    ``char_embed`` has 261 rows and import prepends the zero row, as bilm-tf and AllenNLP do)."""
    char_embed_dim: int = 16
    filters: list = field(default_factory=lambda: [list(f) for f in REFERENCE_FILTERS])
    """[[width, count], ...] of the character convolutions."""
    n_highway: int = 2
    activation: str = "relu"
    """Of the convolutions: 'relu' (the original ELMo) or 'tanh' (bilm-tf's other option)."""
    projection_dim: int = 512
    """Size of the token representation and of each LSTM's projected output (LSTMP's P)."""
    lstm_dim: int = 4096
    """LSTM cells per layer and direction (H)."""
    n_layers: int = 2
    cell_clip: float = 3.0
    proj_clip: float = 3.0
    use_skip_connections: bool = True
    """Residual connection around every LSTM layer but the first (bilm-tf's ResidualWrapper)."""
    dropout: float = 0.1
    """Dropout on each LSTM layer's input and on the top output before the softmax (bilm-tf ``dropout``)."""
    num_sampled: int = 8192
    """Negative classes of the sampled softmax in training (0 or >= vocab_size: the full softmax)."""
    init_std: float = 1.0
    """Scale of the character embeddings' uniform init, U(-1, 1) as bilm-tf."""
    dtype: str = "float32"
    """Compute dtype: 'float32', 'bfloat16' (parameters float32), or 'float64' (parameters, compute and the
    carried state; needs JAX's 64-bit mode, for parity runs against a float64 reference)."""

    @property
    def num_layers(self) -> int:
        """The LSTM layers per direction (``evaluate/features.py`` reads ``num_layers`` + 1 feature layers)."""
        return self.n_layers

    @property
    def n_filters(self) -> int:
        return sum(int(n) for _, n in self.filters)

    def validate(self, where: str = "model") -> None:
        if self.family != "elmo":
            raise ConfigError(f"{where}.family={self.family!r}: this section is the ELMo family's ('elmo')")
        for name, low in (("vocab_size", 4), ("max_characters_per_token", 3), ("n_characters", 262),
                          ("char_embed_dim", 1), ("n_highway", 0), ("projection_dim", 1), ("lstm_dim", 1),
                          ("n_layers", 1), ("num_sampled", 0)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ConfigError(f"{where}.{name}={v!r} must be an integer >= {low}")
        if not self.filters or any(not isinstance(f, (list, tuple)) or len(f) != 2 or int(f[0]) < 1
                                   or int(f[1]) < 1 or int(f[0]) > self.max_characters_per_token
                                   for f in self.filters):
            raise ConfigError(f"{where}.filters={self.filters!r} must be a non-empty list of [width, count] "
                              f"with 1 <= width <= max_characters_per_token and count >= 1")
        if self.activation not in ("relu", "tanh"):
            raise ConfigError(f"{where}.activation={self.activation!r} must be 'relu' or 'tanh'")
        for name in ("cell_clip", "proj_clip"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise ConfigError(f"{where}.{name}={v!r} must be positive (or absent: no clipping)")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"{where}.dropout={self.dropout!r} must be in [0, 1)")
        if self.dtype not in ("float32", "bfloat16", "float64"):
            raise ConfigError(f"{where}.dtype={self.dtype!r} must be 'float32', 'bfloat16' or 'float64'")
        if self.dtype == "float64":
            import jax

            if not jax.config.jax_enable_x64:
                raise ConfigError(f"{where}.dtype='float64' needs JAX's 64-bit mode: set JAX_ENABLE_X64=1 (it is "
                                  f"there for parity runs against a float64 reference; train in 'float32')")
