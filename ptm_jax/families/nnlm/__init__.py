"""Bengio et al. 2003's neural probabilistic language model as one family package.

``config.py`` the ``[model]`` section, ``model.py`` the Flax module, ``data.py`` the tf.data rows,
``objective.py`` the loss and streams, ``hooks.py`` parameter groups, FLOPs and the bench batch. Its tokenizer
is the word vocabulary with counts (``ptm_jax/data/word_vocab.py``). Importing this package registers it.
"""
from __future__ import annotations

from typing import Any

from ptm_jax.families.nnlm import hooks
from ptm_jax.families.nnlm.config import NnlmConfig
from ptm_jax.families.registry import Bench, Family, Inspection, ParamLayout, Pretraining, lazy, register


def build_nnlm(cfg: Any, corpus: Any):
    """The registry's objective builder: ``corpus`` holds the word tokenizer and the train/eval sources."""
    from ptm_jax.families.nnlm.objective import NnlmObjective

    tok = corpus.tokenizer
    initial = None
    if cfg.model.init_vectors:  # word2vec/GloVe vectors as the initial C
        from ptm_jax.export.vector_files import vectors_for_vocab

        initial = vectors_for_vocab(cfg.model.init_vectors, tok, cfg.model.vocab_size, cfg.model.embed_dim,
                                    "model.init_vectors")[:2]
    return NnlmObjective(cfg, corpus.train, corpus.eval, eos_id=tok.eos_id, pad_id=tok.pad_id,
                         initial_vectors=initial)


FAMILY = register(Family(
    name="nnlm",
    model_config=NnlmConfig,
    pretraining=Pretraining(
        objectives={"nnlm": build_nnlm},
        tokenizer_kinds=("word",),
        specials=("pad", "eos"),
    ),
    layout=ParamLayout(
        trunk=hooks.TRUNK,
        heads=("language_model",),
        infer_head=hooks.infer_head,
        param_groups=hooks.param_groups,
        layer_of=hooks.layer_of,
    ),
    inspection=Inspection(
        perplexity=lazy("ptm_jax.families.nnlm.perplexity", "perplexity"),
        word_vectors=hooks.word_vectors,
    ),
    bench=Bench(
        flops=hooks.step_flops,
        synthetic_batch=hooks.synthetic_batch,
    ),
    tiny_preset="nnlm_tiny",
))
