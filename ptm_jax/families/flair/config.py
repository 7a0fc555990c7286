"""The ``[model]`` section of the Flair family (Akbik et al. 2018, "Contextual String Embeddings for Sequence
Labeling", Sec. 2; flairNLP/flair ``flair/models/language_model.py`` ``LanguageModel``, whose constructor
arguments the fields follow: ``embedding_size``, ``hidden_size``, ``nlayers``, ``dropout``)."""
from __future__ import annotations

from dataclasses import dataclass

from ptm_jax.errors import ConfigError


@dataclass
class FlairConfig:
    """A forward and a backward character-level LSTM language model of the same shape. Defaults are the paper's
    (Sec. 3: one layer of 2048 units per direction) with flair's ``LanguageModel`` defaults for the rest
    (character embeddings of 100, dropout 0.1 on the embeddings and on the LSTM output)."""

    family: str = "flair"
    vocab_size: int = 300
    """Character ids (``data/char_vocab.py``: pad, unk, eos, then the characters by count); flair's ``chars``
    dictionary has 275."""
    embed_dim: int = 100
    """Character embedding size (flair ``embedding_size``)."""
    hidden_size: int = 2048
    """LSTM units per layer and direction (flair ``hidden_size``; 2048 in the paper)."""
    lstm_layers: int = 1
    """LSTM layers per direction (flair ``nlayers``; 1 in the paper). A word reads the top layer."""
    dropout: float = 0.1
    """Dropout on the character embeddings, between LSTM layers and on the top LSTM output in training (flair
    ``dropout``)."""
    with_whitespace: bool = False
    """Where a word's embedding is read. False (the paper's Eq. 2, and flair's ``with_whitespace=False``): the
    forward state after the word's last character and the backward state after (reading right to left) its first.
    True (flair's ``FlairEmbeddings`` default today): one character further on each side, the whitespace after
    (forward) and before (backward) the word."""
    lstm_impl: str = "scan"
    """'scan' (``lax.scan``), 'cudnn' (GPU) or 'auto' (cuDNN on GPU, the scan elsewhere): ``models/lstm.py``."""
    dtype: str = "float32"

    @property
    def num_layers(self) -> int:
        """Feature layers above the first (``evaluate/features.py`` reads ``num_layers`` + 1): a Flair embedding is
        one vector per word, [forward; backward], so 0."""
        return 0

    @property
    def feature_dim(self) -> int:
        return 2 * self.hidden_size

    def validate(self, where: str = "model") -> None:
        if self.family != "flair":
            raise ConfigError(f"{where}.family={self.family!r}: this section is the Flair family's ('flair')")
        for name, low in (("vocab_size", 4), ("embed_dim", 1), ("hidden_size", 1), ("lstm_layers", 1)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ConfigError(f"{where}.{name}={v!r} must be an integer >= {low}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"{where}.dropout={self.dropout!r} must be in [0, 1)")
        if self.lstm_impl not in ("auto", "scan", "cudnn"):
            raise ConfigError(f"{where}.lstm_impl={self.lstm_impl!r} must be 'auto', 'scan' or 'cudnn'")
        if self.dtype not in ("float32", "bfloat16"):
            raise ConfigError(f"{where}.dtype={self.dtype!r} must be 'float32' or 'bfloat16'")
