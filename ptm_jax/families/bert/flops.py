"""Analytic FLOPs of a BERT pretraining step (``Bench.flops``; conventions in ``ptm_jax/bench/flops.py``).

BERT (Devlin et al. 2019; google-research/bert modeling.py, run_pretraining.py), batch B, length S,
hidden H, FFN I, layers L, vocabulary V, P gathered masked positions per sequence. Forward MACs:

- embeddings: lookups, 0 (gathers are not matmuls);
- per layer: Q, K, V and output projections ``4 B S H^2``; scores ``Q K^T`` and the weighted sum of V
  ``2 B S^2 H`` (summed over heads, ``N * d_head = H``); FFN ``2 B S H I``;
- pooler ``B H^2`` and NSP classifier ``2 B H`` (objective ``mlm_nsp`` only: with ``mlm`` XLA drops the
  unused pooler);
- MLM head at the P gathered positions only: transform ``B P H^2`` and the tied decoder ``B P H V``.
"""
from __future__ import annotations

from typing import Any

from ptm_jax.bench.flops import StepFlops, transformer_recompute


def forward_flops(cfg: Any) -> dict[str, float]:
    """Forward matmul FLOPs of BertForPreTraining on one global batch, by component (module docstring)."""
    m = cfg.model
    B, S, P = cfg.train.batch_size, cfg.data.max_seq_length, cfg.data.max_predictions_per_seq
    H, I, L, V = m.hidden_size, m.intermediate_size, m.num_layers, m.vocab_size
    macs = {
        "attention_projections": L * 4 * B * S * H * H,
        "attention_scores": L * 2 * B * S * S * H,
        "ffn": L * 2 * B * S * H * I,
        "mlm_head": B * P * H * H + B * P * H * V,
    }
    if cfg.objective == "mlm_nsp":
        macs["pooler_nsp"] = B * H * H + B * H * 2
    return {k: 2.0 * v for k, v in macs.items()}


def step_flops(cfg: Any) -> StepFlops:
    fwd = forward_flops(cfg)
    return StepFlops(forward=fwd, recompute=transformer_recompute(cfg, fwd),
                     tokens=cfg.train.batch_size * cfg.data.max_seq_length)
