"""What the spine asks of the Flair family besides its model and objective: gradient-norm groups, the head of a
params tree, a synthetic batch for ``ptm bench`` (ELMo's: the batches have the same lanes) and the analytic FLOPs
of a train step."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ptm_jax.families.elmo.hooks import synthetic_batch  # noqa: F401  (the same lanes: random ids in full rows)

TRUNK = "flair"


def layer_of(keys: Sequence[str]) -> str:
    """Parameter path -> gradient-norm group: '<direction>/embedding', '<direction>/lstm_<i>', '<direction>/decoder'."""
    keys = [str(k) for k in keys]
    for i, k in enumerate(keys):
        if k in ("forward", "backward") and i + 1 < len(keys):
            return f"{k}/{keys[i + 1]}"
    return "other"


def infer_head(params: dict) -> str:
    return "language_model"


def forward_flops(cfg: Any) -> dict[str, float]:
    """2 x MACs of one forward pass of both LMs: the four gate matmuls of each layer and the decoder, per
    character position and direction."""
    m = cfg.model
    positions = cfg.train.batch_size * cfg.data.max_seq_length
    out = {}
    for d in ("forward", "backward"):
        for i in range(m.lstm_layers):
            d_in = m.embed_dim if i == 0 else m.hidden_size
            out[f"{d}/lstm_{i}"] = 2.0 * positions * 4 * m.hidden_size * (d_in + m.hidden_size)
        out[f"{d}/decoder"] = 2.0 * positions * m.hidden_size * m.vocab_size
    return out


def step_flops(cfg: Any):
    from ptm_jax.bench.flops import StepFlops

    return StepFlops(forward=forward_flops(cfg), recompute=0.0, tokens=cfg.train.batch_size * cfg.data.max_seq_length)
