"""Transformer-XL's ``[model]`` section (Dai et al. 2019; kimiyoung/transformer-xl ``pytorch/train.py`` arguments,
transformers' ``TransfoXLConfig`` names in brackets below).

The shared Transformer fields keep their meaning: ``hidden_size`` [d_model], ``num_layers`` [n_layer],
``num_heads`` [n_head], ``intermediate_size`` [d_inner], ``hidden_dropout`` [dropout], ``attention_dropout``
[dropatt], ``layer_norm_eps`` [layer_norm_epsilon], ``initializer_range`` [init_std]. The segment length is
``data.max_seq_length`` [tgt_len]. ``max_position_embeddings`` is unused: relative positions have no limit.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ptm_jax.errors import ConfigError
from ptm_jax.models.config import TransformerConfig


@dataclass
class TransfoXlConfig(TransformerConfig):
    family: str = "transfo_xl"
    hidden_act: Literal["gelu", "gelu_tanh", "relu"] = "relu"
    attention_dropout: float = 0.0
    layer_norm_eps: float = 1e-5
    head_dim: int = 0
    """Size of one attention head [d_head]; 0 = hidden_size // num_heads (the paper's base: 410 / 10 = 41)."""
    embed_dim: int = 0
    """Size of the (first cluster's) word embedding [d_embed]; 0 = hidden_size. Projected to hidden_size when it
    differs."""
    cutoffs: list[int] = field(default_factory=list)
    """Adaptive input and softmax (Baevski & Auli 2019; Grave et al. 2017): the vocabulary ids where a new cluster
    starts, ascending (the paper's WikiText-103: 20000, 40000, 200000); empty = one full softmax."""
    div_val: int = 1
    """Cluster i has embeddings of embed_dim // div_val**i, each projected to hidden_size (1: one table)."""
    share_projections: bool = True
    """The tail clusters' output projections are their input projections [proj_share_all_but_first]."""
    mem_len: int = 0
    """Hidden states of earlier segments kept per layer as memory (Sec. 3.2); 0 = no recurrence."""
    clamp_len: int = -1
    """Relative distances beyond this share one encoding; -1 = no clamping."""
    same_length: bool = False
    """Every query attends to the same number of keys (the paper's evaluation setting)."""
    untie_r: bool = True
    """The u/v biases (r_w_bias, r_r_bias) per layer (True) or shared by all layers."""
    pre_lnorm: bool = False
    """LayerNorm before each sub-layer (pre-LN, no final LayerNorm) instead of after its residual sum."""
    proj_init_std: float = 0.01
    """Initial std of the adaptive embedding and softmax projections."""

    @property
    def d_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def d_embed(self) -> int:
        return self.embed_dim or self.hidden_size

    def clusters(self) -> list[tuple[int, int, int]]:
        """(first id, end id, embedding size) of every cluster, the head (shortlist) first."""
        ends = [0] + list(self.cutoffs) + [self.vocab_size]
        if self.div_val == 1:
            return [(ends[i], ends[i + 1], self.d_embed) for i in range(len(ends) - 1)]
        return [(ends[i], ends[i + 1], self.d_embed // self.div_val ** i) for i in range(len(ends) - 1)]

    def validate(self, where: str = "model") -> None:
        if self.head_dim == 0:  # explicit head sizes need not divide hidden_size (transformers' d_head)
            super().validate(where)
        elif not (0.0 <= self.hidden_dropout < 1.0 and 0.0 <= self.attention_dropout < 1.0):
            raise ConfigError(f"{where}.hidden_dropout and {where}.attention_dropout must be in [0, 1)")
        for name in ("head_dim", "embed_dim", "mem_len"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"{where}.{name}={v!r} must be an integer >= 0")
        if not isinstance(self.div_val, int) or isinstance(self.div_val, bool) or self.div_val < 1:
            raise ConfigError(f"{where}.div_val={self.div_val!r} must be an integer >= 1")
        cuts = list(self.cutoffs)
        if (not all(isinstance(c, int) and not isinstance(c, bool) for c in cuts)
                or any(b <= a for a, b in zip([0] + cuts, cuts + [self.vocab_size]))):
            raise ConfigError(f"{where}.cutoffs={cuts!r} must be integers ascending strictly inside (0, "
                              f"{where}.vocab_size={self.vocab_size})")
        if self.d_embed // self.div_val ** len(cuts) < 1:
            raise ConfigError(f"{where}.embed_dim={self.d_embed} with div_val={self.div_val} leaves the last of "
                              f"{len(cuts) + 1} clusters no embedding dimension; lower div_val")
        if self.scan_layers:
            raise ConfigError(f"{where}.scan_layers=true: the Transformer-XL family runs its layers in a Python "
                              "loop (each layer reads and writes its own memory); set model.scan_layers=false")
        if self.attention_impl not in ("auto", "einsum"):
            raise ConfigError(f"{where}.attention_impl={self.attention_impl!r}: relative attention has one path, "
                              "the einsum one; set model.attention_impl='auto' or 'einsum'")
