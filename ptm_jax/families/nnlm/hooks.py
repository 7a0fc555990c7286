"""What the spine asks of the NNLM family besides its model and objective: parameter groups, per-group
gradient-norm names, the analytic FLOPs of a train step and a synthetic batch for ``ptm bench``."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

TRUNK, HEAD = "nnlm", "lm_head"
NO_DECAY_ON_BIASES = r"(^|/)bias$"


def param_groups(model_cfg: Any = None, stage: str = "pretrain") -> list:
    """Bengio et al. 2003 Sec. 2: the weight-decay penalty applies to the weights (H, U, W) and the features C,
    not to the biases (b, d)."""
    from ptm_jax.train.param_groups import Rule

    return [Rule(NO_DECAY_ON_BIASES, weight_decay=0.0, where="NNLM: no weight decay on biases (Bengio et al. "
                 "2003 Sec. 2)", must_match=False)]


def layer_of(keys: Sequence[str]) -> str:
    """Parameter path -> gradient-norm group: 'embeddings' (C), 'hidden' (H, d), 'output' (U, b), 'direct' (W)."""
    keys = [str(k) for k in keys]
    for name in ("embedding", "hidden", "output", "direct"):
        if name in keys:
            return "embeddings" if name == "embedding" else name
    return "other"


def infer_head(params: dict) -> str:
    return "language_model"


def forward_flops(cfg: Any) -> dict[str, float]:
    """2 x MACs of one forward pass over the global batch: B rows of L predictions, each with H over the
    (n-1) m features, U over the h hidden units and W over the features; the feature lookup is a gather."""
    m = cfg.model
    positions = cfg.train.batch_size * cfg.data.max_seq_length
    x = m.context * m.embed_dim
    macs = {"hidden": positions * x * m.hidden_dim, "output": positions * m.hidden_dim * m.vocab_size}
    if m.direct:
        macs["direct"] = positions * x * m.vocab_size
    return {k: 2.0 * v for k, v in macs.items()}


def step_flops(cfg: Any):
    from ptm_jax.bench.flops import StepFlops

    return StepFlops(forward=forward_flops(cfg), recompute=0.0,
                     tokens=cfg.train.batch_size * cfg.data.max_seq_length)


def synthetic_batch(example: dict[str, np.ndarray], cfg: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random word ids (specials excluded) in full rows: every prediction counts."""
    out = {k: np.array(v) for k, v in example.items()}
    out["window_ids"] = rng.integers(3, max(cfg.model.vocab_size, 4), out["window_ids"].shape).astype(np.int32)
    out["target_weights"] = np.ones(out["target_weights"].shape, np.float32)
    return out


def word_vectors(params: dict, model_cfg: Any = None) -> np.ndarray:
    """The static word vectors NNLM exports: its shared features C (Bengio et al. 2003 Sec. 2, "the real vector
    C(i) associated with each word i"), [vocab_size, embed_dim] float32, row i = word id i."""
    return np.asarray(params[TRUNK]["embedding"], dtype=np.float32)
