"""What the spine asks of the GloVe family besides its model and objective: the exported word vectors, the
gradient-norm groups and a synthetic batch for ``ptm bench``."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ptm_jax.families.glove.model import TRUNK

HEAD = "word_vectors"


def word_vectors(params: dict, model_cfg: Any = None) -> np.ndarray:
    """W + W~ (Pennington et al. 2014 Sec. 4.2; glove.c ``-model 2``), [vocab_size, dim] float32."""
    t = params[TRUNK]
    return np.asarray(t["word"], np.float32) + np.asarray(t["context"], np.float32)


def layer_of(keys: Sequence[str]) -> str:
    """Parameter path -> gradient-norm group: 'word' (W, b) or 'context' (W~, b~)."""
    keys = [str(k) for k in keys]
    return "context" if any(k.startswith("context") for k in keys) else "word"


def infer_head(params: dict) -> str:
    return HEAD


def synthetic_batch(example: dict[str, np.ndarray], cfg: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random word pairs (specials excluded) with counts drawn like a co-occurrence matrix's (mostly small)."""
    n = example["x"].shape[0]
    v = max(cfg.model.vocab_size, 4)
    return {"x": (1.0 / rng.integers(1, 16, n) + rng.pareto(1.0, n)).astype(np.float32),
            "row": rng.integers(3, v, n).astype(np.int32), "col": rng.integers(3, v, n).astype(np.int32)}
