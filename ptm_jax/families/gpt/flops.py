"""Analytic FLOPs of a GPT causal-LM step (``Bench.flops``; conventions in ``ptm_jax/bench/flops.py``)."""
from __future__ import annotations

from typing import Any

from ptm_jax.bench.flops import StepFlops, transformer_recompute


def forward_flops(cfg: Any) -> dict[str, float]:
    """GPT (Radford et al. 2018/2019) on packed rows of S tokens: the Transformer layer terms, the attention
    scores and values given for the full S x S (``step_flops`` marks them causal: model FLOPs count half, as
    MaxText does) and the tied LM head at every position, ``B S H V``. No pooler, no transform before the
    decoder."""
    m = cfg.model
    B, S = cfg.train.batch_size, cfg.data.max_seq_length
    H, I, L, V = m.hidden_size, m.intermediate_size, m.num_layers, m.vocab_size
    macs = {"attention_projections": L * 4 * B * S * H * H, "attention_scores": L * 2 * B * S * S * H,
            "ffn": L * 2 * B * S * H * I, "lm_head": B * S * H * V}
    return {k: 2.0 * v for k, v in macs.items()}


def step_flops(cfg: Any) -> StepFlops:
    fwd = forward_flops(cfg)
    return StepFlops(forward=fwd, recompute=transformer_recompute(cfg, fwd),
                     tokens=cfg.train.batch_size * cfg.data.max_seq_length, causal=("attention_scores",))
