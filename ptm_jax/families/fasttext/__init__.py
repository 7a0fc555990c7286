"""fastText's subword word vectors (Bojanowski et al. 2017, "Enriching Word Vectors with Subword Information";
facebookresearch/fastText) as one family package: skip-gram and CBOW with negative sampling
in which a word's input vector is the mean of its own row and its hashed character n-gram rows.

``ngrams.py`` the character n-grams and their FNV-1a buckets, ``subwords.py`` the n-gram ids of every
vocabulary word (an artifact cached beside the token cache), ``config.py`` the ``[model]`` and ``[data]``
sections, ``data.py`` the tf.data examples (word2vec's, with the input units added), ``model.py`` the tables,
``objective.py`` the loss, ``hooks.py`` the vectors of any word (out-of-vocabulary ones from their n-grams).
Its tokenizer is the word vocabulary with counts (``ptm_jax/data/word_vocab.py``). Importing it registers it.
"""
from __future__ import annotations

from typing import Any

from ptm_jax.families.fasttext import hooks
from ptm_jax.families.fasttext.config import FastTextConfig, FastTextDataConfig
from ptm_jax.families.fasttext.model import TRUNK
from ptm_jax.families.fasttext.subwords import ARTIFACT
from ptm_jax.families.registry import Bench, Family, Inspection, ParamLayout, Pretraining, lazy, register


def _builder(name: str):
    def build(cfg: Any, corpus: Any):
        """The registry's objective builder: the n-gram table is ``corpus.artifacts['subwords']``
        (``prepare_corpus`` builds it once beside the token cache); a corpus assembled without that step (a
        test's in-memory documents with a word tokenizer) gets its table built here, uncached."""
        from ptm_jax.families.fasttext.objective import FastTextObjective
        from ptm_jax.families.fasttext.subwords import build_table
        from ptm_jax.families.word2vec.objective import source_counts

        tok = corpus.tokenizer
        subwords = (getattr(corpus, "artifacts", None) or {}).get(ARTIFACT)
        if subwords is None:
            subwords = build_table(cfg.model, tok)
        counts = getattr(tok, "counts", None)
        if counts is None:
            counts = source_counts(corpus.train, cfg.model.vocab_size)
        specials = sorted({i for i in (getattr(tok, "pad_id", None), getattr(tok, "unk_id", None),
                                       getattr(tok, "eos_id", None)) if i is not None})
        initial = None
        if cfg.model.init_vectors:
            from ptm_jax.export.vector_files import vectors_for_vocab

            initial = vectors_for_vocab(cfg.model.init_vectors, tok, cfg.model.vocab_size, cfg.model.dim,
                                        "model.init_vectors")[:2]
        return FastTextObjective(cfg, name, corpus.train, getattr(corpus, "eval", None), counts, specials,
                                 subwords, eos_id=tok.eos_id, pad_id=tok.pad_id, initial_vectors=initial)

    return build


FAMILY = register(Family(
    name="fasttext",
    model_config=FastTextConfig,
    pretraining=Pretraining(
        objectives={"fasttext_skipgram": _builder("fasttext_skipgram"), "fasttext_cbow": _builder("fasttext_cbow")},
        data_config=FastTextDataConfig,
        tokenizer_kinds=("word",),
        specials=("pad", "eos"),
        artifacts={ARTIFACT: lazy("ptm_jax.families.fasttext.subwords", "build_subwords")},
    ),
    layout=ParamLayout(
        trunk=TRUNK,
        heads=("word_vectors",),
        infer_head=hooks.infer_head,
        layer_of=hooks.layer_of,
    ),
    inspection=Inspection(
        subword_vectors=hooks.subword_vectors,
    ),
    bench=Bench(
        flops=hooks.step_flops,
        synthetic_batch=hooks.synthetic_batch,
    ),
    tiny_preset="fasttext_tiny",
))

__all__ = ["FAMILY", "FastTextConfig", "FastTextDataConfig"]
