"""GloVe (Pennington, Socher and Manning 2014) as one family package.

``config.py`` the ``[model]`` and ``[data]`` sections, ``cooccur.py`` the co-occurrence pass (an artifact
cached beside the token cache, sharded over hosts), ``data.py`` the shuffled entries in tf.data,
``model.py`` W, W~, b, b~, ``objective.py`` the weighted least squares, ``hooks.py`` the exported vectors
W + W~. Its tokenizer is the word vocabulary (``ptm_jax/data/word_vocab.py``). Importing it registers it.
"""
from __future__ import annotations

from typing import Any

from ptm_jax.families.glove import hooks
from ptm_jax.families.glove.config import GloveConfig, GloveDataConfig
from ptm_jax.families.registry import Bench, Family, Inspection, ParamLayout, Pretraining, register

ARTIFACT = "cooccurrence"


def build_glove(cfg: Any, corpus: Any):
    """The registry's objective builder: the co-occurrence matrix is ``corpus.artifacts['cooccurrence']``
    (``prepare_corpus`` builds it once beside the token cache); a corpus assembled without that step (a test's
    in-memory documents) gets its matrix counted in memory here, uncached."""
    from ptm_jax.families.glove.cooccur import count_documents, to_triples
    from ptm_jax.families.glove.objective import GloveObjective

    cooc = (getattr(corpus, "artifacts", None) or {}).get(ARTIFACT)
    if cooc is None:
        import numpy as np

        cfg.data.validate()
        unit = cfg.data.weight_unit
        cooc = to_triples(count_documents(corpus.train, np.arange(corpus.train.num_docs), cfg.model.vocab_size,
                                          cfg.data.window, unit=unit, symmetric=cfg.data.symmetric,
                                          distance_weighting=cfg.data.distance_weighting), unit)
    return GloveObjective(cfg, cooc)


def build_cooccurrence(cfg: Any, corpus: Any, directory: Any):
    from ptm_jax.families.glove.cooccur import build_cooccurrence as build

    return build(cfg, corpus, directory)


FAMILY = register(Family(
    name="glove",
    model_config=GloveConfig,
    pretraining=Pretraining(
        objectives={"glove": build_glove},
        data_config=GloveDataConfig,
        tokenizer_kinds=("word",),
        specials=("pad",),
        artifacts={ARTIFACT: build_cooccurrence},
    ),
    layout=ParamLayout(
        trunk=hooks.TRUNK,
        heads=(hooks.HEAD,),
        infer_head=hooks.infer_head,
        layer_of=hooks.layer_of,
    ),
    inspection=Inspection(
        word_vectors=hooks.word_vectors,
    ),
    bench=Bench(
        synthetic_batch=hooks.synthetic_batch,
    ),
    tiny_preset="glove_tiny",
))
