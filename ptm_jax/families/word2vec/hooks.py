"""What the spine asks of the word2vec family besides its model and objective: the exported word vectors,
gradient-norm groups, the analytic FLOPs of a train step and a synthetic batch for ``ptm bench``."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ptm_jax.families.word2vec.model import TRUNK


def word_vectors(params: Any, model_cfg: Any = None) -> np.ndarray:
    """The input vectors (word2vec.c ``syn0``, what it writes to ``-output``): float32 [vocab_size, dim]."""
    tree = params.get("params", params)
    table = tree[TRUNK]["input"]
    table = getattr(table, "value", table)  # a boxed (LogicallyPartitioned) leaf
    return np.asarray(table, dtype=np.float32)


def layer_of(keys: Sequence[str]) -> str:
    """Parameter path -> gradient-norm group: the table's name ('input', 'output', 'hs_output')."""
    keys = [str(k) for k in keys]
    for name in ("hs_output", "output", "input"):
        if name in keys:
            return name
    return "other"


def infer_head(params: dict) -> str:
    return "word_vectors"


def forward_flops(cfg: Any) -> dict[str, float]:
    """2 x multiply-adds of one forward pass over the expected pairs of a batch without subsampling: B centers,
    S = window + 1 contexts a center (2 x (window - b), b uniform in [0, window)), K negatives, D Huffman depth
    (taken as log2 V); the table lookups are gathers."""
    d, b, s = cfg.model.dim, cfg.train.batch_size, cfg.data.window + 1
    pairs = b if cfg.objective == "cbow" else b * s
    macs = {}
    if cfg.data.negative:
        macs["negative_sampling"] = pairs * (1 + cfg.data.negative) * d
    if cfg.data.hs:
        macs["hierarchical_softmax"] = pairs * float(np.ceil(np.log2(cfg.model.vocab_size))) * d
    if cfg.objective == "cbow":
        macs["context_mean"] = b * s * d
    return {k: 2.0 * v for k, v in macs.items()}


def step_flops(cfg: Any):
    from ptm_jax.bench.flops import StepFlops

    return StepFlops(forward=forward_flops(cfg), recompute=0.0, tokens=cfg.train.batch_size)


def synthetic_batch(example: dict[str, np.ndarray], cfg: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random word ids (specials excluded) with every slot training, each pair slot naming a random center of
    its packing block (``data.py``)."""
    from ptm_jax.families.word2vec.data import block_rows

    out = {k: np.array(v) for k, v in example.items()}
    v = max(cfg.model.vocab_size, 4)
    block = block_rows(cfg.train.batch_size, cfg.data.pack_rows)
    for k in ("center", "pair_input", "negatives", "path"):
        if k in out:
            out[k] = rng.integers(3, v - 1 if k == "path" else v, out[k].shape).astype(np.int32)
    for k in ("pair_row", "unit_row"):
        if k in out:
            out[k] = rng.integers(0, block, out[k].shape).astype(np.int32)
    for k in ("center_weight", "pair_weight", "negative_weight", "path_weight", "unit_weight"):
        if k in out:
            out[k] = np.ones(out[k].shape, np.float32)
    if "code" in out:
        out["code"] = rng.integers(0, 2, out["code"].shape).astype(np.float32)
    return out
