"""BERT's ``Inspection.word_features`` hook: every layer's hidden states at each word's first WordPiece.

Input ``[CLS] pieces [SEP]`` (one segment, ids 0), as the BERT paper's feature-based NER experiment
(Devlin et al. 2019 Sec. 5.4, which reads the first sub-token of each word). Layer 0 is the embedding output
(word + position + segment embeddings after LayerNorm), layer i the output of block i: the layout of
transformers' ``output_hidden_states``. The states are read with Flax's ``capture_intermediates`` (each
module's ``__call__`` output), so the encoder needs no extra output; the spine's reader is
``evaluate/features.py``.
"""
from __future__ import annotations

from typing import Any

import numpy as np


def hidden_states_fn(cfg: Any):
    """fn(trunk params, ids [B,S], mask [B,S]) -> [L+1, B, S, H] float32 (cfg: an inference config)."""
    import jax.numpy as jnp

    from ptm_jax.families.bert.model import BertEmbeddings, BertLayer, BertModel

    model = BertModel(cfg, add_pooler=False)

    def keep(mdl, method: str) -> bool:
        return method == "__call__" and isinstance(mdl, (BertEmbeddings, BertLayer))

    def fn(p, ids, mask):
        _, state = model.apply({"params": p}, ids, mask, jnp.zeros_like(ids), capture_intermediates=keep,
                               mutable=["intermediates"])
        inter = state["intermediates"]
        hs = [inter["embeddings"]["__call__"][0]]
        hs += [inter["encoder"][f"layers_{i}"]["__call__"][0] for i in range(cfg.num_layers)]
        return jnp.stack(hs).astype(jnp.float32)

    return fn


def word_encoder(model_cfg: Any, tokenizer: Any):
    """``Inspection.word_encoder``: the encoder (no pooler) as ``evaluate/features.WordEncoder``; the trunk key is the
    family's (BERT's "bert"; a family that reuses BERT's network under its own key registers this too)."""
    import jax.numpy as jnp

    from ptm_jax.evaluate.features import WordEncoder, inference_config, trunk_of
    from ptm_jax.families.bert.model import BertModel

    cfg = inference_config(model_cfg)
    model = BertModel(cfg, add_pooler=False)
    return WordEncoder(trunk_of(model_cfg), cfg, hidden_states_fn(cfg),
                       lambda rng, ids, mask: model.init(rng, ids, mask, jnp.zeros_like(ids))["params"],
                       prefix=(tokenizer.cls_id,), suffix=(tokenizer.sep_id,))


def word_features(params: dict, model_cfg: Any, tokenizer: Any, sentences: list[list[str]], *,
                  batch_size: int = 32) -> list[np.ndarray]:
    from ptm_jax.evaluate.features import encoder_word_features

    return encoder_word_features(word_encoder(model_cfg, tokenizer), params, tokenizer, sentences,
                                 batch_size=batch_size)


def attention_maps(params: dict, model_cfg: Any, tokenizer: Any, text: str) -> tuple[list[str], np.ndarray]:
    """``Inspection.attention_maps``: ``[CLS] text [SEP]`` -> (tokens, float32 [layers, heads, S, S])."""
    from ptm_jax.evaluate.attention_maps import sown_probs
    from ptm_jax.evaluate.features import inference_model, trunk_of
    from ptm_jax.families.bert.model import BertModel

    params, cfg, _ = inference_model(params, model_cfg)
    ids = [tokenizer.cls_id, *tokenizer.encode(text)[: cfg.max_position_embeddings - 2], tokenizer.sep_id]
    x = np.asarray([ids], np.int32)
    probs = sown_probs(BertModel(cfg, add_pooler=False), params[trunk_of(model_cfg)], x, np.ones_like(x), np.zeros_like(x))
    return [tokenizer.id_to_token(i) for i in ids], probs[:, 0]
