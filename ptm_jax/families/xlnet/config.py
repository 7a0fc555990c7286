"""XLNet's config sections: ``[model]`` adds the Transformer-XL memory and relative-position
fields; ``[data]`` adds the permutation-LM sampling of zihangdai/xlnet data_utils.py to the shared masking base
(``num_predict`` is ``max_predictions_per_seq``)."""
from __future__ import annotations

from dataclasses import dataclass

from ptm_jax.config import MaskedDataConfig
from ptm_jax.errors import ConfigError
from ptm_jax.models.config import TransformerConfig


@dataclass
class XlnetConfig(TransformerConfig):
    family: str = "xlnet"
    mem_len: int = 0
    """Hidden states cached from the previous segment (Transformer-XL memory); 0 = none."""
    clamp_len: int = -1
    """Relative distances are clamped to this (-1 = no clamping)."""
    untie_r: bool = True
    """Separate r_w/r_r/r_s biases per layer (True) or one set shared by all layers."""

    def validate(self, where: str = "model") -> None:
        super().validate(where)
        if self.mem_len < 0:
            raise ConfigError(f"{where}.mem_len={self.mem_len} must be >= 0")


@dataclass
class XlnetDataConfig(MaskedDataConfig):
    """Permutation-LM samples (zihangdai/xlnet data_utils.py ``_create_data``/``_sample_mask``)."""

    reuse_len: int = 0
    """Tokens at the start of a sample that the next segment reuses through memory."""
    perm_size: int = 0
    """Length of a factorization-order block (0 = max_seq_length)."""
    bi_data: bool = False
    """Half of each batch is the reversed stream."""
    max_span: int = 5
    """Longest n-gram span of prediction targets (p(n) proportional to 1/n)."""
    mask_alpha: float = 6.0
    mask_beta: float = 1.0
