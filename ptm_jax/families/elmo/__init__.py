"""ELMo (Peters et al. 2018; allenai/bilm-tf) as one family package.

``config.py`` the ``[model]`` section, ``chars.py`` the character ids of a word, ``model.py`` the char-CNN and
biLM modules, ``softmax.py`` the sampled and full softmax, ``data.py`` the tf.data lanes (state carried across
steps), ``objective.py`` the loss, ``features.py`` the per-layer word features (``Inspection.word_features``),
``weights.py`` the import of bilm-tf / AllenNLP weights (``options.json`` + ``weights.hdf5``). Its tokenizer is
the word vocabulary (the softmax's classes); characters are computed from the words' strings.
Importing this package registers it.
"""
from __future__ import annotations

from typing import Any

from ptm_jax.families.elmo import hooks
from ptm_jax.families.elmo.config import ElmoConfig
from ptm_jax.families.registry import (
    Bench, Family, Importer, Inspection, Interop, ParamLayout, Pretraining, lazy, register)


def build_elmo(cfg: Any, corpus: Any):
    """The registry's objective builder: ``corpus`` holds the word tokenizer and the train/eval sources."""
    from ptm_jax.families.elmo.objective import ElmoObjective

    return ElmoObjective(cfg, corpus.train, corpus.eval, corpus.tokenizer, corpus.artifacts["char_ids"])


FAMILY = register(Family(
    name="elmo",
    model_config=ElmoConfig,
    pretraining=Pretraining(
        objectives={"elmo_bilm": build_elmo},
        tokenizer_kinds=("word",),
        specials=("pad", "eos"),
        artifacts={"char_ids": lazy("ptm_jax.families.elmo.chars", "build_char_table")},
    ),
    layout=ParamLayout(
        trunk=hooks.TRUNK,
        heads=("language_model",),
        infer_head=hooks.infer_head,
        layer_of=hooks.layer_of,
    ),
    interop=Interop(
        importers={"bilm-tf": Importer(
            files=("options.json", "weights.hdf5"), run=lazy("ptm_jax.families.elmo.weights", "import_bilm"),
            description="allenai/bilm-tf or AllenNLP ELMo weights (the character encoder and biLSTMs; the softmax "
                        "is left out): features for `ptm embed --layers`, probes and feature heads")},
    ),
    inspection=Inspection(
        word_features=lazy("ptm_jax.families.elmo.features", "word_features"),
    ),
    bench=Bench(
        synthetic_batch=hooks.synthetic_batch,
        corpus="configured",  # the character table spells the words of a real vocabulary
    ),
    tiny_preset="elmo_tiny",
))
