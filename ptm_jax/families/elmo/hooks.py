"""What the spine asks of the ELMo family besides its model and objective: gradient-norm groups, the head of a
params tree and a synthetic batch for ``ptm bench``."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

TRUNK = "elmo"


def layer_of(keys: Sequence[str]) -> str:
    """Parameter path -> gradient-norm group: 'char_encoder', 'forward_<i>' / 'backward_<i>', 'softmax'."""
    keys = [str(k) for k in keys]
    for k in keys:
        if k == "char_encoder" or k == "softmax" or k.startswith(("forward_", "backward_")):
            return k
    return "other"


def infer_head(params: dict) -> str:
    return "language_model"


def synthetic_batch(example: dict[str, np.ndarray], cfg: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random word ids (specials excluded) in full rows: every prediction counts."""
    out = {k: np.array(v) for k, v in example.items()}
    for k in ("fwd_ids", "bwd_ids"):
        out[k] = rng.integers(3, max(cfg.model.vocab_size, 4), out[k].shape).astype(np.int32)
    out["target_ids"] = out["fwd_ids"][:, 1:]
    for k in ("target_weights", "bwd_weights"):
        out[k] = np.ones(out[k].shape, np.float32)
    return out
