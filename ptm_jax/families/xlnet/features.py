"""XLNet's ``Inspection.word_features`` hook: every layer's content-stream states at each word's first piece.

Input ``pieces <sep> <cls>`` with segment ids 0 (the words and <sep>) and 2 (<cls>), the finetuning layout of
``classification.py`` (transformers' XLNetTokenizer), padded on the right and masked; no memory, no query
stream (finetuning and feature extraction read the content stream only: Yang et al. 2019 Sec. 2.3). Layer 0
is the word embedding, layer i the content stream after block i: transformers' ``output_hidden_states``
layout. Read with Flax's ``capture_intermediates``; the spine's reader is ``evaluate/features.py``.
"""
from __future__ import annotations

from typing import Any

import numpy as np


def segment_ids(mask):
    """[B, S] 1 = real token -> segment ids: 0 for the words and <sep>, 2 for <cls> (the last real token)."""
    import jax.numpy as jnp

    last = jnp.sum(mask, axis=-1, keepdims=True) - 1
    return jnp.where(jnp.arange(mask.shape[-1])[None] == last, 2, 0).astype(jnp.int32)


def hidden_states_fn(cfg: Any):
    """fn(trunk params, ids [B,S], mask [B,S]) -> [L+1, B, S, H] float32 (cfg: an inference config)."""
    import jax.numpy as jnp

    from ptm_jax.families.xlnet.model import XLNetEmbeddings, XLNetLayer, XLNetModel

    model = XLNetModel(cfg)

    def keep(mdl, method: str) -> bool:
        return method == "__call__" and isinstance(mdl, (XLNetEmbeddings, XLNetLayer))

    def fn(p, ids, mask):
        _, state = model.apply({"params": p}, ids, segment_ids(mask), 1.0 - mask.astype(jnp.float32),
                               capture_intermediates=keep, mutable=["intermediates"])
        inter = state["intermediates"]
        hs = [inter["embeddings"]["__call__"][0]]
        hs += [inter["encoder"][f"layers_{i}"]["__call__"][0][0] for i in range(cfg.num_layers)]
        return jnp.stack(hs).astype(jnp.float32)

    return fn


def word_encoder(model_cfg: Any, tokenizer: Any):
    """``Inspection.word_encoder``: the content stream of the trunk as ``evaluate/features.WordEncoder``."""
    import jax.numpy as jnp

    from ptm_jax.evaluate.features import WordEncoder, inference_config
    from ptm_jax.families.xlnet.model import XLNetModel

    cfg = inference_config(model_cfg)
    model = XLNetModel(cfg)
    return WordEncoder("xlnet", cfg, hidden_states_fn(cfg),
                       lambda rng, ids, mask: model.init(rng, ids, segment_ids(mask),
                                                         1.0 - mask.astype(jnp.float32))["params"],
                       suffix=(tokenizer.sep_id, tokenizer.cls_id))


def word_features(params: dict, model_cfg: Any, tokenizer: Any, sentences: list[list[str]], *,
                  batch_size: int = 32) -> list[np.ndarray]:
    from ptm_jax.evaluate.features import encoder_word_features

    return encoder_word_features(word_encoder(model_cfg, tokenizer), params, tokenizer, sentences,
                                 batch_size=batch_size)


def attention_maps(params: dict, model_cfg: Any, tokenizer: Any, text: str) -> tuple[list[str], np.ndarray]:
    """``Inspection.attention_maps``: ``text <sep> <cls>`` -> (tokens, content-stream float32 [layers, heads, S, S])."""
    from ptm_jax.evaluate.attention_maps import sown_probs
    from ptm_jax.evaluate.features import inference_model
    from ptm_jax.families.xlnet.model import XLNetModel

    params, cfg, _ = inference_model(params, model_cfg)
    ids = [*tokenizer.encode(text)[: cfg.max_position_embeddings - 2], tokenizer.sep_id, tokenizer.cls_id]
    x = np.asarray([ids], np.int32)
    probs = sown_probs(XLNetModel(cfg), params["xlnet"], x, segment_ids(np.ones_like(x)),
                       np.zeros(x.shape, np.float32))
    return [tokenizer.id_to_token(i) for i in ids], probs[:, 0]
