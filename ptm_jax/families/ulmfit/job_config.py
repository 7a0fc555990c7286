"""The ``[ulmfit]`` config section of ULMFiT's finetuning job (``finetune.job = "ulmfit"``, ``job.py``)."""
from __future__ import annotations

from dataclasses import dataclass

from ptm_jax.errors import ConfigError


@dataclass
class UlmfitJobConfig:
    """ULMFiT's stages after the general-domain LM (Howard & Ruder 2018 Sec. 3; ``job.py``)."""

    target_lm_steps: int = 0
    """Stage 2: steps of LM finetuning on the target task's training sentences, from the general-domain LM; 0: the
    classifier starts from the general-domain LM (the paper's ablation 'no LM fine-tuning')."""

    def validate(self, where: str = "ulmfit") -> None:
        if self.target_lm_steps < 0:
            raise ConfigError(f"{where}.target_lm_steps must be >= 0 (0: no target-task LM stage), got "
                              f"{self.target_lm_steps}")
