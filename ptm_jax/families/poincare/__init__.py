"""Poincare embeddings (Nickel & Kiela 2017) as one family package: points in the Poincare ball trained on a
hierarchy's transitive closure by the distance loss with negatives and Riemannian SGD.

``config.py`` the ``[model]`` and ``[data]`` sections, ``hierarchy.py`` the closure, ``corpus.py`` the corpus (the
family's own input: ``Pretraining.corpus``), ``data.py`` the examples, ``geometry.py`` the ball, ``model.py``
the table, ``objective.py`` the loss and the Riemannian step, ``reconstruction.py`` mean rank and MAP. Its
vectors are queried by the hyperbolic distance (``ptm neighbors``) and exported in word2vec's text format, which
gensim's ``PoincareKeyedVectors.load_word2vec_format`` reads. Importing this package registers it.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ptm_jax.families.poincare.config import PoincareConfig, PoincareDataConfig
from ptm_jax.families.poincare.geometry import distances_np
from ptm_jax.families.poincare.model import TRUNK
from ptm_jax.families.registry import Bench, Family, Inspection, ParamLayout, Pretraining, lazy, register


def _build(cfg: Any, corpus: Any):
    from ptm_jax.families.poincare.objective import PoincareObjective

    return PoincareObjective(cfg, "poincare", corpus.train, corpus.eval)


def word_vectors(params: Any, model_cfg: Any = None) -> np.ndarray:
    """The points: float32 [vocab_size, dim], row = vocabulary id."""
    tree = params.get("params", params)
    table = tree[TRUNK]["embedding"]
    return np.asarray(getattr(table, "value", table), dtype=np.float32)


def _layer_of(keys: Sequence[str]) -> str:
    return "embedding"


def synthetic_batch(example: dict, cfg: Any, rng: np.random.Generator) -> dict:
    """Random node ids (specials excluded), every target live, no burn-in: ``ptm bench``'s batch."""
    out = {k: np.array(v) for k, v in example.items()}
    for k in ("u", "targets"):
        out[k] = rng.integers(3, max(cfg.model.vocab_size, 4), out[k].shape).astype(np.int32)
    out["target_weight"] = np.ones(out["target_weight"].shape, np.float32)
    return out


FAMILY = register(Family(
    name="poincare",
    model_config=PoincareConfig,
    pretraining=Pretraining(
        objectives={"poincare": _build},
        data_config=PoincareDataConfig,
        tokenizer_kinds=("word",),
        specials=("pad", "eos"),
        corpus=lazy("ptm_jax.families.poincare.corpus", "build_corpus"),
    ),
    layout=ParamLayout(trunk=TRUNK, heads=("word_vectors",), infer_head=lambda params: "word_vectors",
                       layer_of=_layer_of),
    inspection=Inspection(word_vectors=word_vectors, vector_distance=distances_np),
    bench=Bench(synthetic_batch=synthetic_batch),
    tiny_preset="poincare_tiny",
))

__all__ = ["FAMILY", "PoincareConfig", "PoincareDataConfig"]
