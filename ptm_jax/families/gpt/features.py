"""GPT's ``Inspection.word_features`` hook: every layer's hidden states at each word's first BPE piece.

The words are one causal row with no special tokens (the feature-extraction layout of transformers'
``GPT2Model``); with a byte-level BPE every word after the first is tokenized with its leading space
('Ġword', as it appears in running text). Layer 0 is the embedding output (token + position embeddings), layer
i the output of block i, and the last layer is the trunk's output, after the final LayerNorm of a pre-LN
(GPT-2) stack: transformers' ``output_hidden_states`` layout. Each word only sees the words before it
(Radford et al. 2018 Sec. 3.1). Read with Flax's ``capture_intermediates``; the spine's reader is
``evaluate/features.py``.
"""
from __future__ import annotations

from typing import Any

import numpy as np


def hidden_states_fn(cfg: Any):
    """fn(trunk params, ids [B,S], mask [B,S]) -> [L+1, B, S, H] float32 (cfg: an inference config)."""
    import flax.linen as nn
    import jax.numpy as jnp

    from ptm_jax.families.gpt.model import GPTBlock, GPTModel

    model = GPTModel(cfg)

    def keep(mdl, method: str) -> bool:
        return method == "__call__" and isinstance(mdl, (GPTBlock, nn.Embed))

    def fn(p, ids, mask):
        out, state = model.apply({"params": p}, ids, mask.astype(jnp.int32), capture_intermediates=keep,
                                 mutable=["intermediates"])
        inter = state["intermediates"]
        hs = [inter["wte"]["__call__"][0] + inter["wpe"]["__call__"][0]]
        hs += [inter["decoder"][f"layers_{i}"]["__call__"][0] for i in range(cfg.num_layers - 1)]
        return jnp.stack(hs + [out]).astype(jnp.float32)

    return fn


def word_encoder(model_cfg: Any, tokenizer: Any):
    """``Inspection.word_encoder``: the decoder trunk (no LM head) as ``evaluate/features.WordEncoder``."""
    import jax.numpy as jnp

    from ptm_jax.data.byte_bpe import ByteBPETokenizer
    from ptm_jax.evaluate.features import WordEncoder, inference_config
    from ptm_jax.families.gpt.model import GPTModel

    cfg = inference_config(model_cfg)
    model = GPTModel(cfg)
    return WordEncoder("gpt", cfg, hidden_states_fn(cfg),
                       lambda rng, ids, mask: model.init(rng, ids, mask.astype(jnp.int32))["params"],
                       space_before=isinstance(tokenizer, ByteBPETokenizer))


def word_features(params: dict, model_cfg: Any, tokenizer: Any, sentences: list[list[str]], *,
                  batch_size: int = 32) -> list[np.ndarray]:
    from ptm_jax.evaluate.features import encoder_word_features

    return encoder_word_features(word_encoder(model_cfg, tokenizer), params, tokenizer, sentences,
                                 batch_size=batch_size)


def attention_maps(params: dict, model_cfg: Any, tokenizer: Any, text: str) -> tuple[list[str], np.ndarray]:
    """``Inspection.attention_maps``: the text's pieces as one causal row -> (tokens, float32 [layers, heads, S, S])."""
    from ptm_jax.evaluate.attention_maps import sown_probs
    from ptm_jax.evaluate.features import inference_model
    from ptm_jax.families.gpt.model import GPTModel

    params, cfg, _ = inference_model(params, model_cfg)
    ids = list(tokenizer.encode(text))[: cfg.max_position_embeddings]
    probs = sown_probs(GPTModel(cfg), params["gpt"], np.asarray([ids], np.int32))
    return [tokenizer.id_to_token(i) for i in ids], probs[:, 0]
