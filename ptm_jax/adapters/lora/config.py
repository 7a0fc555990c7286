"""The ``[lora]`` config section (``finetune.adapter = "lora"``)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from ptm_jax.errors import ConfigError

DEFAULT_TARGETS = (r"/(query|value|q|v)/kernel$",)
"""The attention query and value projections (Hu et al. 2021 Sec. 4.2 and 7.1: adapting W_q and W_v is the best
use of a fixed parameter budget) of every Transformer family: BERT and ERNIE ``.../attention/query/kernel`` and
``.../attention/value/kernel``, GPT ``.../attn/query|value/kernel``, XLNet ``.../attention/q|v/kernel``."""


@dataclass
class LoraConfig:
    """LoRA (Hu et al. 2021): each targeted frozen kernel W is used as W + (alpha / rank) * A B, with A
    [d_in, rank] and B [rank, d_out] trained and B initialised to zero (so training starts from the pretrained
    model). ``ptm_jax/adapters/lora``."""

    rank: int = 8
    """r, the rank of each update (the paper's GLUE runs: 8)."""
    alpha: float = 8.0
    """The update is scaled by alpha / rank (Sec. 4.1; peft's lora_alpha). Keeping alpha fixed while changing
    the rank keeps the learning rate roughly right."""
    dropout: float = 0.0
    """Dropout on the adapter's input x before A (peft's lora_dropout): h = W x + s B A dropout(x). 0 merges
    W + s A B into the kernel on the fly (exact); above 0 the adapter runs beside flax Dense/DenseGeneral calls
    (not available for XLNet's q/v projections or scanned layer stacks)."""
    targets: list[str] = field(default_factory=lambda: list(DEFAULT_TARGETS))
    """Regular expressions over parameter paths (as ``finetune.param_groups``: 'params/bert/encoder/layers_3/
    attention/query/kernel'); every pretrained kernel a pattern finds (``re.search``) gets an adapter. Each pattern
    must match at least one kernel of the trunk."""
    trainable: list[str] = field(default_factory=list)
    """Regular expressions of pretrained trunk parameters that train in full beside the adapters (peft's
    modules_to_save), e.g. 'embeddings' for GPT's task tokens. The task head always trains."""
    init: Literal["kaiming", "gaussian"] = "kaiming"
    """A's initialisation: 'kaiming' U(-1/sqrt(d_in), 1/sqrt(d_in)) (peft's default, torch's Linear init), or
    'gaussian' N(0, 1/rank^2) (peft's init_lora_weights='gaussian'; the paper: "random Gaussian"). B is zero."""

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def validate(self, where: str = "lora") -> None:
        if self.rank < 1:
            raise ConfigError(f"{where}.rank={self.rank}: must be >= 1")
        if self.alpha <= 0:
            raise ConfigError(f"{where}.alpha={self.alpha}: must be > 0")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"{where}.dropout={self.dropout}: must be in [0, 1)")
        if not self.targets:
            raise ConfigError(f"{where}.targets is empty: give at least one pattern over kernel paths, such as "
                              f"{DEFAULT_TARGETS[0]!r}")
        for name in ("targets", "trainable"):
            for i, p in enumerate(getattr(self, name)):
                try:
                    re.compile(p)
                except re.error as e:
                    raise ConfigError(f"{where}.{name}[{i}]={p!r} is not a regular expression ({e})") from None
