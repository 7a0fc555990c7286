"""CoVe vectors of words (``Inspection.word_features``; McCann et al. 2017 Sec. 4, Eq. 4-5): CoVe(w) =
MT-LSTM(GloVe(w)), the top encoder layer's [forward; backward] state at each word, the encoder alone (the decoder
is not run). A sentence is its list of words, each looked up in ``model.input_vectors`` as in training
(``parallel.input_vectors``: any word the vectors know, not only the translation corpus's). One float32
[1, n_words, 2 * hidden_size] array per sentence: one layer. The paper's task models read [GloVe(w); CoVe(w)]: the
feature heads do with ``features.word_init`` set to the same vectors (docs/families.md, "CoVe").
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.families.cove.model import TRUNK, MTLSTM
from ptm_jax.families.cove.parallel import input_vectors

_COMPILED: dict[Any, Any] = {}


def encoder(cfg: Any):
    """(encoder params, vectors [B, S, D], lengths [B]) -> top-layer states [B, S, 2H] (jitted per config)."""
    key = repr(cfg)
    if key not in _COMPILED:
        model = MTLSTM(cfg)

        def run(params, vectors, lengths):
            mask = jnp.arange(vectors.shape[1])[None, :] < lengths[:, None]
            return model.apply({"params": params}, vectors, mask)[0][-1].astype(jnp.float32)

        _COMPILED[key] = jax.jit(run)
    return _COMPILED[key]


def word_features(params: dict, model_cfg: Any, tokenizer: Any = None, sentences: list[list[str]] = (), *,
                  batch_size: int = 32) -> list[np.ndarray]:
    """float32 [1, n_words, 2 * hidden_size] per sentence (module doc); ``tokenizer`` (the target vocabulary) is
    not read."""
    tree = params.get("params", params)
    enc = tree.get(TRUNK, tree)["encoder"]
    sentences = [list(s) for s in sentences]
    vocab = sorted({w for s in sentences for w in s})
    index = {w: i for i, w in enumerate(vocab)}
    table = input_vectors(model_cfg, vocab) if vocab else np.zeros((0, model_cfg.input_dim), np.float32)
    run = encoder(model_cfg)
    out: list[np.ndarray | None] = [None] * len(sentences)
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    for begin in range(0, len(order), batch_size):
        pick = order[begin:begin + batch_size]
        longest = max(max(len(sentences[i]) for i in pick), 1)
        T = 1 << max(longest - 1, 1).bit_length()        # a few compiled shapes: powers of two
        B = 1 << max(len(pick) - 1, 0).bit_length()
        vectors = np.zeros((B, T, model_cfg.input_dim), np.float32)
        lengths = np.zeros(B, np.int32)
        for j, i in enumerate(pick):
            s = sentences[i]
            if s:
                vectors[j, :len(s)] = table[[index[w] for w in s]]
            lengths[j] = len(s)
        got = np.asarray(run(enc, jnp.asarray(vectors), jnp.asarray(lengths)))
        for j, i in enumerate(pick):
            out[i] = got[j, :len(sentences[i])][None]
    return out
