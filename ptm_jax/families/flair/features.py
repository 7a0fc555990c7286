"""Flair's contextual string embeddings of words (``Inspection.word_features``; Akbik et al. 2018 Sec. 2.2, Eq. 2;
flairNLP/flair ``FlairEmbeddings._add_embeddings_internal`` and ``LanguageModel.get_representation``).

A sentence (a list of words) is the string of its words joined by single spaces. The forward LM reads
``<eos> text " "`` and the backward LM reads ``<eos> reversed(text) " "`` (flair's start marker is the LM's
document delimiter, ``<eos>`` here as in training; its end marker is a space), each from a zero state. With
``model.with_whitespace = False`` (the paper's) word w, occupying characters [s, e) of the text, is

    [ forward state after reading text[e - 1] ; backward state after reading text[s] (right to left) ]

i.e. forward row position 1 + e - 1 and backward row position 1 + (len(text) - 1 - s); ``with_whitespace``
moves both one character on, to the space after (forward) and before (backward) the word. The state is the top
LSTM layer's output h. One float32 [1, n_words, 2 * hidden_size] array per sentence: one layer.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.families.flair.model import DIRECTIONS, Flair

_COMPILED: dict[Any, Any] = {}


def offsets(words: list[str], with_whitespace: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(forward row positions, backward row positions) of each word's embedding, for rows laid out as the module
    doc says (one start marker before the text)."""
    n = sum(len(w) for w in words) + max(len(words) - 1, 0)
    fwd, bwd, start = [], [], 0
    shift = 1 if with_whitespace else 0
    for w in words:
        end = start + len(w)
        fwd.append(1 + end - 1 + shift)
        bwd.append(1 + (n - 1 - start) + shift)
        start = end + 1
    return np.asarray(fwd, np.int64), np.asarray(bwd, np.int64)


def sentence_rows(words: list[str], tokenizer: Any) -> tuple[np.ndarray, np.ndarray]:
    """(forward row, backward row) of character ids: <eos> text ' ' and <eos> reversed(text) ' '."""
    text = " ".join(words)
    space = tokenizer.token_to_id(" ")
    ids = np.asarray(tokenizer.encode_batch_flat([text])[0], np.int32)
    eos = np.asarray([tokenizer.eos_id], np.int32)
    end = np.asarray([space], np.int32)
    return np.concatenate([eos, ids, end]), np.concatenate([eos, ids[::-1], end])


def states(cfg: Any):
    """(flair params, ids {dir: [B, T]}, lengths [B]) -> {dir: [B, T, H]} top-layer states (jitted per config)."""
    key = repr(cfg)
    if key not in _COMPILED:
        model = Flair(cfg)

        def run(params, ids, lengths):
            mask = jnp.arange(ids["forward"].shape[1])[None, :] < lengths[:, None]
            out = model.apply({"params": params}, ids, {d: mask for d in DIRECTIONS}, decode=False)
            return {d: out[d][0].astype(jnp.float32) for d in DIRECTIONS}

        _COMPILED[key] = jax.jit(run)
    return _COMPILED[key]


def word_features(params: dict, model_cfg: Any, tokenizer: Any, sentences: list[list[str]] = (), *,
                  batch_size: int = 32) -> list[np.ndarray]:
    """float32 [1, n_words, 2 * hidden_size] per sentence (module doc); ``tokenizer`` is the run's character
    vocabulary."""
    tree = params.get("params", params)
    trunk = tree.get("flair", tree)
    rows = [sentence_rows(list(s), tokenizer) for s in sentences]
    where = [offsets(list(s), model_cfg.with_whitespace) for s in sentences]
    run = states(model_cfg)
    out: list[np.ndarray | None] = [None] * len(rows)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
    for begin in range(0, len(order), batch_size):
        pick = order[begin:begin + batch_size]
        longest = max(len(rows[i][0]) for i in pick)
        T = 1 << max(longest - 1, 1).bit_length()        # a few compiled shapes: powers of two
        B = 1 << max(len(pick) - 1, 0).bit_length()
        ids = {d: np.full((B, T), tokenizer.pad_id, np.int32) for d in DIRECTIONS}
        lengths = np.zeros(B, np.int32)
        for j, i in enumerate(pick):
            for d, row in zip(DIRECTIONS, rows[i]):
                ids[d][j, :len(row)] = row
            lengths[j] = len(rows[i][0])
        got = run(trunk, {d: jnp.asarray(v) for d, v in ids.items()}, jnp.asarray(lengths))
        fwd, bwd = np.asarray(got["forward"]), np.asarray(got["backward"])
        for j, i in enumerate(pick):
            f_at, b_at = where[i]
            out[i] = np.concatenate([fwd[j, f_at], bwd[j, b_at]], axis=-1)[None]
    return out
