"""word2vec (Mikolov et al. 2013; word2vec.c) as one family package: skip-gram and CBOW with negative
sampling and/or the hierarchical softmax, trained through the one loop.

``config.py`` the ``[model]`` and ``[data]`` sections, ``sampling.py`` subsampling, unigram^0.75 negatives and
the Huffman tree, ``artifacts.py`` those tables built once and cached beside the token cache, ``data.py`` the
tf.data examples, ``model.py`` the tables, ``objective.py`` the loss,
``hooks.py`` the exported word vectors, FLOPs and the bench batch. Its tokenizer is the word vocabulary with
counts (``ptm_jax/data/word_vocab.py``). Importing this package registers it.
"""
from __future__ import annotations

from typing import Any

from ptm_jax.families.registry import Bench, Family, Inspection, ParamLayout, Pretraining, lazy, register
from ptm_jax.families.word2vec import hooks
from ptm_jax.families.word2vec.config import Word2VecConfig, Word2VecDataConfig, steps_for_epochs
from ptm_jax.families.word2vec.model import TRUNK


def _builder(name: str):
    def build(cfg: Any, corpus: Any):
        """The registry's objective builder: ``corpus`` holds the word tokenizer and the train/eval sources;
        the sampling tables are ``corpus.artifacts['sampling_tables']`` (``prepare_corpus`` builds them once
        beside the token cache), else built here from the vocabulary's counts (``vocab.tsv``, or counted over
        the train source)."""
        from ptm_jax.families.word2vec.artifacts import ARTIFACT, build_tables, vocabulary_counts
        from ptm_jax.families.word2vec.objective import Word2VecObjective

        tok = corpus.tokenizer
        tables = (getattr(corpus, "artifacts", None) or {}).get(ARTIFACT)
        counts, specials = None, None
        if tables is None:
            cfg.model.validate()
            cfg.data.validate_word2vec()
            counts, specials = vocabulary_counts(cfg, corpus)
            tables = build_tables(cfg, counts, specials)
        initial = None
        if cfg.model.init_vectors:
            from ptm_jax.export.vector_files import vectors_for_vocab

            initial = vectors_for_vocab(cfg.model.init_vectors, tok, cfg.model.vocab_size, cfg.model.dim,
                                        "model.init_vectors")[:2]
        return Word2VecObjective(cfg, name, corpus.train, getattr(corpus, "eval", None), counts, specials,
                                 eos_id=tok.eos_id, pad_id=tok.pad_id, tables=tables, initial_vectors=initial)

    return build


FAMILY = register(Family(
    name="word2vec",
    model_config=Word2VecConfig,
    pretraining=Pretraining(
        objectives={"skipgram": _builder("skipgram"), "cbow": _builder("cbow")},
        data_config=Word2VecDataConfig,
        tokenizer_kinds=("word",),
        specials=("pad", "eos"),
        artifacts={"sampling_tables": lazy("ptm_jax.families.word2vec.artifacts", "build_sampling_tables")},
    ),
    layout=ParamLayout(
        trunk=TRUNK,
        heads=("word_vectors",),
        infer_head=hooks.infer_head,
        layer_of=hooks.layer_of,
    ),
    inspection=Inspection(
        word_vectors=hooks.word_vectors,
    ),
    bench=Bench(
        flops=hooks.step_flops,
        synthetic_batch=hooks.synthetic_batch,
    ),
    tiny_preset="word2vec_tiny",
))

__all__ = ["FAMILY", "Word2VecConfig", "Word2VecDataConfig", "steps_for_epochs"]
