"""The ``[model]`` and ``[data]`` sections of the ULMFiT family (Howard & Ruder 2018; the AWD-LSTM of Merity,
Keskar & Socher 2018, "Regularizing and Optimizing LSTM Language Models").

Defaults are the paper's sizes (3 layers, 400 embedding, 1150 hidden; fastai's ``awd_lstm_lm_config`` uses 1152)
and fastai's LM dropouts (``fastai/text/models/awdlstm.py`` ``awd_lstm_lm_config``: output_p 0.1, hidden_p 0.15,
input_p 0.25, embed_p 0.02, weight_p 0.2) with AR alpha 2 and TAR beta 1 (fastai's ``RNNRegularizer``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ptm_jax.config import DataConfig
from ptm_jax.errors import ConfigError


@dataclass
class UlmfitConfig:
    """AWD-LSTM sizes, its five dropouts, AR/TAR and the classifier head of ULMFiT."""

    run_settings = ("output_p", "hidden_p", "input_p", "embed_p", "weight_p", "head_hidden", "head_p",
                    "discriminative_factor", "discriminative_lrs", "gradual_unfreezing", "unfreeze_every", "lstm_impl")
    """Fields the classifier stage takes from its own run's config, not from the pretrained checkpoint
    (``train/finetune.py``)."""

    family: str = "ulmfit"
    vocab_size: int = 60000
    embed_dim: int = 400
    """Embedding size; the last LSTM layer outputs this size too, so the decoder can tie to the embedding."""
    hidden_dim: int = 1150
    num_layers: int = 3
    pad_id: int = 0
    """Padding id of the classifier's inputs (the word vocabulary's ``<pad>``)."""
    output_p: float = 0.1
    """Locked dropout on the last layer's output (before the decoder / the pooling)."""
    hidden_p: float = 0.15
    """Locked dropout between LSTM layers."""
    input_p: float = 0.25
    """Locked dropout on the embedded input."""
    embed_p: float = 0.02
    """Embedding dropout: whole vocabulary rows (words) zeroed, the rest scaled by 1/(1-p)."""
    weight_p: float = 0.2
    """DropConnect on each hidden-to-hidden matrix (one mask per forward pass)."""
    tie_weights: bool = True
    ar_alpha: float = 2.0
    """Activation regularisation: alpha * mean(h_last_dropped^2)."""
    tar_beta: float = 1.0
    """Temporal activation regularisation: beta * mean((h_t - h_{t-1})^2) of the last layer before dropout."""
    head_hidden: int = 50
    """Classifier head: [3 * embed_dim] -> head_hidden -> labels (fastai ``lin_ftrs=[50]``)."""
    head_p: float = 0.1
    """Dropout before the head's last linear layer (fastai: 0.1; the first gets output_p)."""
    init_range: float = 0.1
    dtype: str = "float32"
    lstm_impl: str = "auto"
    """'scan' (``lax.scan``), 'cudnn' (cuDNN's fused LSTM through ``jax.experimental.rnn``; GPU only) or 'auto'
    (cuDNN on GPU, the scan elsewhere): ``models/lstm.py``."""
    discriminative_factor: float = 2.6
    """Classifier stage: the lr of each lower layer group is the one above divided by this (1.0: off)."""
    discriminative_lrs: list = field(default_factory=list)
    """Explicit lr multipliers, one per layer group bottom first (embedding, each layer, head); overrides
    discriminative_factor."""
    gradual_unfreezing: bool = True
    unfreeze_every: int = 0
    """Gradual unfreezing: steps between unfreezing one more layer group from the top (one epoch in ULMFiT;
    0: every group trains from the first step)."""

    def validate(self, where: str = "model") -> None:
        if self.family != "ulmfit":
            raise ConfigError(f"{where}.family={self.family!r}: this section is the ULMFiT family's ('ulmfit')")
        for name, low in (("vocab_size", 4), ("embed_dim", 1), ("hidden_dim", 1), ("num_layers", 1),
                          ("head_hidden", 1)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ConfigError(f"{where}.{name}={v!r} must be an integer >= {low}")
        for name in ("output_p", "hidden_p", "input_p", "embed_p", "weight_p", "head_p"):
            v = getattr(self, name)
            if not 0.0 <= v < 1.0:
                raise ConfigError(f"{where}.{name}={v!r} is a dropout probability: it must be in [0, 1)")
        if self.dtype not in ("float32", "bfloat16"):
            raise ConfigError(f"{where}.dtype={self.dtype!r} must be 'float32' or 'bfloat16'")
        if self.lstm_impl not in ("auto", "scan", "cudnn"):
            raise ConfigError(f"{where}.lstm_impl={self.lstm_impl!r} must be 'auto', 'scan' or 'cudnn'")
        if not self.discriminative_factor > 0:
            raise ConfigError(f"{where}.discriminative_factor={self.discriminative_factor!r} must be > 0 "
                              "(1.0 switches discriminative rates off)")
        if not isinstance(self.unfreeze_every, int) or self.unfreeze_every < 0:
            raise ConfigError(f"{where}.unfreeze_every={self.unfreeze_every!r} must be an integer >= 0 (steps)")
        if self.discriminative_lrs:
            from ptm_jax.families.ulmfit.hooks import group_multipliers

            group_multipliers(self)

    @property
    def layer_sizes(self) -> list[tuple[int, int]]:
        """(input, hidden) of each LSTM layer; the last one outputs embed_dim (fastai ``AWD_LSTM``)."""
        return [(self.embed_dim if i == 0 else self.hidden_dim,
                 self.embed_dim if i == self.num_layers - 1 else self.hidden_dim) for i in range(self.num_layers)]


@dataclass
class UlmfitDataConfig(DataConfig):
    """``max_seq_length`` is the BPTT length (AWD-LSTM: 70). Variable BPTT (Merity et al. 2018 Sec. 4.1): each
    batch takes bptt with probability ``bptt_p``, else bptt/2, then a length drawn from N(that, ``bptt_std``),
    at least 5 and at most ``max_seq_length + 3 * bptt_std``; the batch is padded to the next multiple of
    ``bptt_bucket`` (so a run compiles one step per bucket, not one per length)."""

    max_seq_length: int = 70
    variable_bptt: bool = True
    bptt_p: float = 0.95
    bptt_std: float = 5.0
    bptt_bucket: int = 16

    def validate(self, where: str = "data") -> None:
        super().validate(where)
        if not 0.0 <= self.bptt_p <= 1.0:
            raise ConfigError(f"{where}.bptt_p={self.bptt_p!r} must be a probability in [0, 1]")
        if self.bptt_std < 0:
            raise ConfigError(f"{where}.bptt_std={self.bptt_std!r} must be >= 0")
        if not isinstance(self.bptt_bucket, int) or self.bptt_bucket < 1:
            raise ConfigError(f"{where}.bptt_bucket={self.bptt_bucket!r} must be an integer >= 1")

    @property
    def max_bptt(self) -> int:
        return int(self.max_seq_length + 3 * self.bptt_std) if self.variable_bptt else int(self.max_seq_length)
