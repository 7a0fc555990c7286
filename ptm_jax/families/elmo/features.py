"""ELMo's per-word, per-layer features (``Inspection.word_features``; Peters et al. 2018 Sec. 3.2, allenai/bilm-tf
``bilm/model.py`` ``BidirectionalLanguageModel`` and ``usage_character.py``).

Each sentence is read as bilm-tf's ``Batcher`` lays it out: ``<S>`` words ``</S>``, every word as its 50
character ids (``chars.py``; OOV words have characters too, so no word is unknown). The forward LSTMs read
the row left to right; the backward LSTMs read it reversed within its length (the same rows bilm-tf's reversed
inputs give), from a zero state per sentence (AllenNLP's ``_ElmoBiLm`` at its first batch; bilm-tf's
inference graph keeps the state between batches, which makes features depend on the batch order: we do not).
Layer 0 is the token representation duplicated to [x, x] (2 x projection_dim, as bilm-tf's
``lm_embeddings`` layer 0 and AllenNLP's); layer k >= 1 is [forward_k, backward_k] (the residual included).
The boundaries are then removed (AllenNLP's ``remove_sentence_boundaries``): float32 [n_layers + 1, n_words,
2 * projection_dim] per sentence.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.families.elmo.chars import sentence_char_ids
from ptm_jax.families.elmo.model import DIRECTIONS, Elmo

_COMPILED: dict[Any, Any] = {}


def reverse_within(x: jax.Array, lengths: jax.Array) -> jax.Array:
    """[B, T, ...] -> each row's first ``lengths[b]`` positions reversed, the padding left in place."""
    t = jnp.arange(x.shape[1])[None, :]
    idx = jnp.where(t < lengths[:, None], lengths[:, None] - 1 - t, t)
    return jnp.take_along_axis(x, idx.reshape(idx.shape + (1,) * (x.ndim - 2)), axis=1)


def layer_stack(cfg: Any):
    """(elmo params, chars [B, T, C], lengths [B]) -> [n_layers + 1, B, T, 2P] (jitted, one per config)."""
    key = repr(cfg)
    if key not in _COMPILED:
        model = Elmo(cfg)

        def run(params, chars, lengths):
            mask = jnp.arange(chars.shape[1])[None, :] < lengths[:, None]
            inputs = {"forward": chars, "backward": reverse_within(chars, lengths)}
            tokens, layers, _ = model.apply({"params": params}, inputs, {d: mask for d in DIRECTIONS})
            tok = tokens["forward"]
            out = [jnp.concatenate([tok, tok], -1)]
            for f, b in zip(layers["forward"], layers["backward"]):
                out.append(jnp.concatenate([f, reverse_within(b, lengths)], -1))
            return jnp.stack(out).astype(jnp.float32) * mask[None, :, :, None]

        _COMPILED[key] = jax.jit(run)
    return _COMPILED[key]


def word_features(params: dict, model_cfg: Any, tokenizer: Any = None, sentences: list[list[str]] = (), *,
                  batch_size: int = 32) -> list[np.ndarray]:
    """float32 [n_layers + 1, n_words, 2 * projection_dim] per sentence (module doc). ``tokenizer`` is unused:
    the characters come from the words themselves."""
    tree = params.get("params", params)
    elmo = tree.get("elmo", tree)
    width = model_cfg.max_characters_per_token
    rows = [sentence_char_ids(list(s), width, where=f"sentence {i + 1}") for i, s in enumerate(sentences)]
    run = layer_stack(model_cfg)
    out: list[np.ndarray | None] = [None] * len(rows)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    for start in range(0, len(order), batch_size):
        pick = order[start:start + batch_size]
        longest = max(len(rows[i]) for i in pick)
        T = 1 << max(longest - 1, 1).bit_length()                 # a few compiled lengths: powers of two
        B = 1 << max(len(pick) - 1, 0).bit_length()
        chars = np.zeros((B, T, width), np.int32)
        lengths = np.zeros(B, np.int32)
        for j, i in enumerate(pick):
            chars[j, :len(rows[i])] = rows[i]
            lengths[j] = len(rows[i])
        feats = np.asarray(run(elmo, jnp.asarray(chars), jnp.asarray(lengths)))
        for j, i in enumerate(pick):
            out[i] = feats[:, j, 1:lengths[j] - 1]                 # drop <S> and </S>
    return out
