"""GPT's ``[model]`` section: the shared Transformer fields plus the LayerNorm position that
tells GPT-1 from GPT-2. Its ``[data]`` section is the shared ``DataConfig`` (a causal LM packs the stream)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ptm_jax.models.config import TransformerConfig


@dataclass
class GptConfig(TransformerConfig):
    family: str = "gpt"
    layer_norm_position: Literal["post", "pre"] = "post"
    """post-LN (GPT-1, Radford et al. 2018) or pre-LN with a final LayerNorm (GPT-2, Radford et al. 2019
    Sec. 2.3)."""


@dataclass
class GptFinetuneConfig:
    """GPT's ``[gpt_finetune]`` section (``Finetuning.sections`` of the family): its finetuning loss, task +
    lm_coef x LM (``classification.py``)."""

    lm_coef: float = 0.5
    """Weight of the auxiliary language-model loss on the task's own tokens during finetuning (Radford et al. 2018
    Sec. 3.2: 0.5); 0 trains on the task loss alone."""
