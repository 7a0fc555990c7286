"""The ``[model]`` fields every Transformer family here shares (BERT, GPT, XLNet): sizes, dropout, dtype,
attention implementation, rematerialisation, scanned layers.

Each family's ``config.py`` subclasses :class:`TransformerConfig`, sets its own ``family`` default and adds
only its own fields; ``ptm_jax/config.py`` picks the subclass by family
(``Family.model_config``). Defaults are BERT-base (Devlin et al. 2019, Sec. 3; google-research/bert
modeling.py ``BertConfig``), which every family starts from in its presets.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ptm_jax.errors import ConfigError


@dataclass
class TransformerConfig:
    """Architecture of a Transformer stack; a family's subclass names it in ``family``."""

    family: str = ""
    """The registered family this section belongs to (``ptm_jax/families/registry.py``)."""
    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    hidden_act: Literal["gelu", "gelu_tanh", "relu"] = "gelu"
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Compute dtype; parameters and optimizer state stay float32. 'auto': bfloat16 when the model is traced
    for a GPU or TPU, float32 on CPU (``models/layers.dtype_of``, logged once)."""
    attention_impl: Literal["auto", "einsum", "xla", "cudnn", "splash"] = "auto"
    """Attention path (``models/attention.py``): 'auto' picks cuDNN on GPU, splash on TPU for long sequences,
    XLA else, and the einsum path under attention dropout."""
    remat: Literal["none", "full", "save_dots"] = "none"
    scan_layers: bool = False

    def validate(self, where: str = "model") -> None:
        """Checks the fields against each other; ``where`` is the section's name in messages."""
        if self.hidden_size % self.num_heads:
            raise ConfigError(f"{where}.hidden_size must be divisible by {where}.num_heads (got {self.hidden_size} "
                              f"and {self.num_heads})")
        if not (0.0 <= self.hidden_dropout < 1.0 and 0.0 <= self.attention_dropout < 1.0):
            raise ConfigError(f"{where}.hidden_dropout and {where}.attention_dropout must be in [0, 1), got "
                              f"{self.hidden_dropout} and {self.attention_dropout}")
