"""Transformer-XL's ``Inspection.word_features`` hook: every layer's hidden states at each word's first piece.

The words are one causal row without special tokens and without memory (a sentence read as a first segment);
right padding is never attended (each token sees only the tokens before it). Layer 0 is the adaptive embedding
output (scaled by sqrt(d_model)), layer i the output of block i: transformers' ``output_hidden_states`` layout.
Read with Flax's ``capture_intermediates``; the spine's reader is ``evaluate/features.py``.
"""
from __future__ import annotations

from typing import Any

import numpy as np


def hidden_states_fn(cfg: Any):
    """fn(trunk params, ids [B,S], mask [B,S]) -> [L+1, B, S, H] float32 (cfg: an inference config)."""
    import jax.numpy as jnp

    from ptm_jax.families.transfo_xl.adaptive import AdaptiveEmbedding
    from ptm_jax.families.transfo_xl.model import TransfoXLLayer, TransfoXLModel

    model = TransfoXLModel(cfg)

    def keep(mdl, method: str) -> bool:
        return method == "__call__" and isinstance(mdl, (AdaptiveEmbedding, TransfoXLLayer))

    def fn(p, ids, mask):
        _, state = model.apply({"params": p}, ids, capture_intermediates=keep, mutable=["intermediates"])
        inter = state["intermediates"]
        hs = [inter["word_emb"]["__call__"][0]]
        hs += [inter["decoder"][f"layers_{i}"]["__call__"][0] for i in range(cfg.num_layers)]
        return jnp.stack(hs).astype(jnp.float32)

    return fn


def inference_config(model_cfg: Any) -> Any:
    """Dropout off, no remat, and no memory (a sentence is one segment)."""
    import dataclasses

    from ptm_jax.evaluate.features import inference_config as spine_config

    return dataclasses.replace(spine_config(model_cfg), mem_len=0)


def word_encoder(model_cfg: Any, tokenizer: Any):
    """``Inspection.word_encoder``: the decoder trunk (no softmax) as ``evaluate/features.WordEncoder``."""
    from ptm_jax.data.byte_bpe import ByteBPETokenizer
    from ptm_jax.evaluate.features import WordEncoder
    from ptm_jax.families.transfo_xl.model import TransfoXLModel

    cfg = inference_config(model_cfg)
    model = TransfoXLModel(cfg)
    return WordEncoder("transfo_xl", cfg, hidden_states_fn(cfg), lambda rng, ids, mask: model.init(rng, ids)["params"],
                       space_before=isinstance(tokenizer, ByteBPETokenizer))


def word_features(params: dict, model_cfg: Any, tokenizer: Any, sentences: list[list[str]], *,
                  batch_size: int = 32) -> list[np.ndarray]:
    from ptm_jax.evaluate.features import encoder_word_features

    return encoder_word_features(word_encoder(model_cfg, tokenizer), params, tokenizer, sentences,
                                 batch_size=batch_size)


def attention_maps(params: dict, model_cfg: Any, tokenizer: Any, text: str) -> tuple[list[str], np.ndarray]:
    """``Inspection.attention_maps``: the text's tokens as one causal segment -> (tokens, float32 [layers, heads,
    S, S])."""
    from ptm_jax.evaluate.attention_maps import sown_probs
    from ptm_jax.export.params import to_layout
    from ptm_jax.families.transfo_xl.model import TransfoXLModel

    cfg = inference_config(model_cfg)
    ids = list(tokenizer.encode(text))[: cfg.max_position_embeddings]
    probs = sown_probs(TransfoXLModel(cfg), to_layout(params, False)["transfo_xl"], np.asarray([ids], np.int32))
    return [tokenizer.id_to_token(i) for i in ids], probs[:, 0]
