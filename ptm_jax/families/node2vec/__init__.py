"""node2vec (Grover & Leskovec 2016) as one family package: second-order biased random walks over a graph,
trained with word2vec's skip-gram (the ``word2vec`` family's objective, examples and kernels, by import).

``config.py`` the ``[model]`` and ``[data]`` sections, ``graph.py`` the edge list, ``alias.py`` the transition
tables, ``walks.py`` the walks as a stream of running words, ``corpus.py`` the corpus (the family's own input:
``Pretraining.corpus``), ``objective.py`` the objective, ``quality.py`` node classification and link prediction.
DeepWalk is ``data.p = data.q = 1`` (``configs/deepwalk.toml``). Importing this package registers it.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ptm_jax.families.node2vec.config import TRUNK, Node2VecConfig, Node2VecDataConfig
from ptm_jax.families.registry import Bench, Family, Inspection, ParamLayout, Pretraining, lazy, register
from ptm_jax.families.word2vec import hooks as w2v_hooks


def _build(cfg: Any, corpus: Any):
    """The objective over ``corpus`` (``corpus.build_corpus``'s): the sampling tables from the walk counts."""
    from ptm_jax.families.node2vec.objective import Node2VecObjective
    from ptm_jax.families.word2vec.artifacts import build_tables, vocabulary_counts

    cfg.model.validate()
    cfg.data.validate_node2vec()
    counts, specials = vocabulary_counts(cfg, corpus)
    tok = corpus.tokenizer
    return Node2VecObjective(cfg, "node2vec", corpus.train, corpus.eval, counts, specials, eos_id=tok.eos_id,
                             pad_id=tok.pad_id, tables=build_tables(cfg, counts, specials))


def word_vectors(params: Any, model_cfg: Any = None) -> np.ndarray:
    """The input table: one vector per node (row = vocabulary id)."""
    tree = params.get("params", params)
    table = tree[TRUNK]["input"]
    return np.asarray(getattr(table, "value", table), dtype=np.float32)



FAMILY = register(Family(
    name="node2vec",
    model_config=Node2VecConfig,
    pretraining=Pretraining(
        objectives={"node2vec": _build},
        data_config=Node2VecDataConfig,
        tokenizer_kinds=("word",),
        specials=("pad", "eos"),
        corpus=lazy("ptm_jax.families.node2vec.corpus", "build_corpus"),
    ),
    layout=ParamLayout(trunk=TRUNK, heads=("word_vectors",), infer_head=w2v_hooks.infer_head,
                       layer_of=w2v_hooks.layer_of),
    inspection=Inspection(word_vectors=word_vectors),
    bench=Bench(flops=w2v_hooks.step_flops, synthetic_batch=w2v_hooks.synthetic_batch),
    tiny_preset="node2vec_tiny",
))

__all__ = ["FAMILY", "Node2VecConfig", "Node2VecDataConfig"]
