"""GloVe (Pennington, Socher and Manning 2014) as one family package (issue 17, item 3).

``config.py`` the ``[model]`` and ``[data]`` sections, ``cooccur.py`` the co-occurrence pass (an artifact
cached beside the token cache, sharded over hosts), ``data.py`` the shuffled entries in tf.data,
``model.py`` W, W~, b, b~, ``objective.py`` the weighted least squares, ``hooks.py`` the exported vectors
W + W~. Its tokenizer is the word vocabulary (``ptm_jax/data/word_vocab.py``). Importing it registers it.
"""
from __future__ import annotations

from typing import Any

from ptm_jax.families.glove import hooks
from ptm_jax.families.glove.config import GloveConfig, GloveDataConfig
from ptm_jax.families.registry import Family, register

ARTIFACT = "cooccurrence"


def build_glove(cfg: Any, corpus: Any):
    """The registry's objective builder: the co-occurrence matrix is ``corpus.artifacts['cooccurrence']``."""
    from ptm_jax.errors import ConfigError
    from ptm_jax.families.glove.objective import GloveObjective

    cooc = getattr(corpus, "artifacts", {}).get(ARTIFACT)
    if cooc is None:
        raise ConfigError("objective='glove' needs the co-occurrence artifact; build the corpus with "
                          "ptm_jax.train.stages.prepare_corpus (it calls the family's artifact builders)")
    return GloveObjective(cfg, cooc)


def build_cooccurrence(cfg: Any, corpus: Any, directory: Any):
    from ptm_jax.families.glove.cooccur import build_cooccurrence as build

    return build(cfg, corpus, directory)


_FIELDS = dict(
    name="glove",
    model_config=GloveConfig,
    data_config=GloveDataConfig,
    objectives={"glove": build_glove},
    trunk=hooks.TRUNK,
    heads=(hooks.HEAD,),
    infer_head=hooks.infer_head,
    layer_of=hooks.layer_of,
    synthetic_batch=hooks.synthetic_batch,
    word_vectors=hooks.word_vectors,
    capabilities=frozenset({"word_vectors"}),
)
_LATER = dict(tokenizer_kinds=("word",), specials=("pad",), artifacts={ARTIFACT: build_cooccurrence})
FAMILY = register(Family(**_FIELDS, **{k: v for k, v in _LATER.items()
                                       if k in Family.__dataclass_fields__}))
