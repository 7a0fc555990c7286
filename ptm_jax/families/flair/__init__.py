"""Flair's contextual string embeddings (Akbik et al. 2018, "Contextual String Embeddings for Sequence
Labeling"; flairNLP/flair) as one family package.

``config.py`` the ``[model]`` section, ``model.py`` the forward and backward character LSTM language models,
``objective.py`` their loss over ELMo's state-carrying lanes of the character stream, ``features.py`` a word's
embedding (``Inspection.word_features``: [forward state after its last character; backward state before its
first]), ``hooks.py`` groups, FLOPs and the bench batch. Its tokenizer is a character vocabulary
(``tokenizer.kind = "char"``, ``data/char_vocab.py``). The BiLSTM-CRF tagger over the embeddings is the
``features`` job's BiLSTM with ``tagging.head = "crf"``. Importing this package registers it.
"""
from __future__ import annotations

from typing import Any

from ptm_jax.families.flair import hooks
from ptm_jax.families.flair.config import FlairConfig
from ptm_jax.families.registry import Bench, Family, Inspection, ParamLayout, Pretraining, lazy, register


def build_flair(cfg: Any, corpus: Any):
    """The registry's objective builder: the character tokenizer and the train/eval sources."""
    from ptm_jax.families.flair.objective import FlairObjective

    return FlairObjective(cfg, corpus.train, corpus.eval, corpus.tokenizer)


FAMILY = register(Family(
    name="flair",
    model_config=FlairConfig,
    pretraining=Pretraining(
        objectives={"flair_char_lm": build_flair},
        tokenizer_kinds=("char",),
        specials=("pad", "eos"),
    ),
    layout=ParamLayout(
        trunk=hooks.TRUNK,
        heads=("language_model",),
        infer_head=hooks.infer_head,
        layer_of=hooks.layer_of,
    ),
    inspection=Inspection(
        word_features=lazy("ptm_jax.families.flair.features", "word_features"),
    ),
    bench=Bench(
        flops=hooks.step_flops,
        synthetic_batch=hooks.synthetic_batch,
    ),
    tiny_preset="flair_tiny",
))
