"""Transformer-XL (Dai et al. 2019) as one family package: a causal LM with segment-level recurrence and relative
positional encodings. ``config.py`` the ``[model]`` section, ``model.py`` the decoder over [memory; segment] (the
relative attention is ``ptm_jax/models/relative_attention.py``, shared with XLNet), ``adaptive.py`` adaptive input
and softmax, ``objective.py`` the LM objective carrying the memory across steps over the contiguous rows of
``data/pretraining/contiguous_rows.py``, ``perplexity.py`` evaluation with a memory longer than the segment,
``decode.py`` sampling with the memory as the cache, ``features.py`` per-layer word features, ``hf.py`` transformers'
``TransfoXLLMHeadModel`` in and out. Importing this package registers it (``ptm_jax/families/registry.py``)."""
from __future__ import annotations

from typing import Any

from ptm_jax.families.registry import (
    SUBWORD_KINDS, Bench, Family, HfConverter, Inspection, Interop, ParamLayout, Pretraining, lazy, register)
from ptm_jax.families.transfo_xl.config import TransfoXlConfig

HF = "ptm_jax.families.transfo_xl.hf"
FEATURES = "ptm_jax.families.transfo_xl.features"


def _lm(cfg: Any, corpus: Any):
    from ptm_jax.families.transfo_xl.objective import SegmentLmObjective

    tok = corpus.tokenizer
    eos = getattr(tok, "eos_id", None)
    eos = tok.sep_id if eos is None else eos  # WordPiece/SentencePiece vocabularies: [SEP] ends a document
    return SegmentLmObjective(cfg, corpus.train, corpus.eval, eos_id=eos, pad_id=tok.pad_id)


def _load_hf(hf_dir):
    from ptm_jax.families.transfo_xl.hf import import_hf

    return import_hf(hf_dir)


FAMILY = register(Family(
    name="transfo_xl",
    model_config=TransfoXlConfig,
    pretraining=Pretraining(
        objectives={"transfo_xl_lm": _lm},
        tokenizer_kinds=("word",) + SUBWORD_KINDS,
        specials=("pad", "eos"),
    ),
    layout=ParamLayout(
        trunk="transfo_xl",
        stack="decoder",
        heads=("language_model",),
        infer_head=lambda params: "language_model",
    ),
    interop=Interop(
        hf=HfConverter(model_types=("transfo-xl",), import_dir=lazy(HF, "import_hf_to_params_dir"),
                       export_dir=lazy(HF, "export_hf"), load=_load_hf),
    ),
    inspection=Inspection(
        generate=lazy("ptm_jax.families.transfo_xl.decode", "generate"),
        perplexity=lazy("ptm_jax.families.transfo_xl.perplexity", "perplexity"),
        word_features=lazy(FEATURES, "word_features"),
        word_encoder=lazy(FEATURES, "word_encoder"),
        attention_maps=lazy(FEATURES, "attention_maps"),
    ),
    bench=Bench(
        synthetic_batch=lazy("ptm_jax.bench.harness", "packed_lm_batch"),
    ),
    tiny_preset="transfo_xl_tiny",
))
