"""BERT's config sections: ``[model]`` adds the token-type embedding to the shared Transformer
fields; ``[data]`` adds the masking and sentence-pair fields of google-research/bert create_pretraining_data.py
(``masked_lm_prob``, ``short_seq_prob``, ``do_whole_word_mask``) to the shared masking base."""
from __future__ import annotations

from dataclasses import dataclass

from ptm_jax.config import MaskedDataConfig
from ptm_jax.errors import ConfigError
from ptm_jax.models.config import TransformerConfig


@dataclass
class BertConfig(TransformerConfig):
    """BERT-base by default (Devlin et al. 2019, Sec. 3; google-research/bert modeling.py ``BertConfig``)."""

    family: str = "bert"
    type_vocab_size: int = 2
    """Segment (token-type) embeddings: sentence A and B."""


@dataclass
class BertDataConfig(MaskedDataConfig):
    """MLM(+NSP) example construction (create_pretraining_data.py flags of the same names)."""

    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    """Probability of a shorter target length for an example (the reference's short_seq_prob)."""
    whole_word_masking: bool = False
    """Mask every piece of a chosen word together (the reference's do_whole_word_mask)."""

    def validate(self, where: str = "data") -> None:
        super().validate(where)
        if not 0.0 < self.masked_lm_prob < 1.0:
            raise ConfigError(f"{where}.masked_lm_prob={self.masked_lm_prob} must be in (0, 1)")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ConfigError(f"{where}.short_seq_prob={self.short_seq_prob} must be in [0, 1]")
