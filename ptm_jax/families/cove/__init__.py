"""CoVe (McCann et al. 2017, "Learned in Translation: Contextualized Word Vectors"; salesforce/cove) as one
family package: the MT-LSTM, an attentional LSTM encoder-decoder trained on translation, whose encoder gives
context vectors of words.

``config.py`` the ``[model]`` and ``[data]`` sections, ``parallel.py`` the parallel corpus (line-aligned source and
target files, checked) and the fixed input vectors, ``corpus.py`` the corpus (the family's own input:
``Pretraining.corpus``), ``data.py`` the tf.data batches, ``model.py`` the encoder (two bidirectional LSTM layers)
and the attentional decoder, ``objective.py`` the teacher-forced cross-entropy, ``features.py`` CoVe(w)
(``Inspection.word_features``), ``hooks.py`` groups and heads. Importing this package registers it.
"""
from __future__ import annotations

from typing import Any

from ptm_jax.families.cove import hooks
from ptm_jax.families.cove.config import CoveConfig, CoveDataConfig
from ptm_jax.families.registry import Bench, Family, Inspection, ParamLayout, Pretraining, lazy, register


def build_translation(cfg: Any, corpus: Any):
    """The registry's objective builder: the target vocabulary and the tokenized pairs."""
    from ptm_jax.families.cove.objective import TranslationObjective

    return TranslationObjective(cfg, corpus.train, corpus.eval, corpus.tokenizer)


FAMILY = register(Family(
    name="cove",
    model_config=CoveConfig,
    pretraining=Pretraining(
        objectives={"cove_translation": build_translation},
        data_config=CoveDataConfig,
        tokenizer_kinds=("word",),
        specials=("pad", "eos"),
        corpus=lazy("ptm_jax.families.cove.corpus", "build_corpus"),
    ),
    layout=ParamLayout(
        trunk=hooks.TRUNK,
        heads=("translation",),
        infer_head=hooks.infer_head,
        layer_of=hooks.layer_of,
    ),
    inspection=Inspection(
        word_features=lazy("ptm_jax.families.cove.features", "word_features"),
    ),
    bench=Bench(
        corpus="configured",  # the pairs and the target vocabulary come from the configured parallel corpus
    ),
    tiny_preset="cove_tiny",
))

__all__ = ["FAMILY", "CoveConfig", "CoveDataConfig"]
