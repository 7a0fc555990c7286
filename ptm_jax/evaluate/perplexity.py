"""Held-out perplexity of a causal LM on a text file (Radford et al. 2019 Sec. 3.1 report it per word-level
token of WikiText; we report both per model token and per whitespace word).

The file is tokenized as one stream (lines joined by newlines, as the file is) and cut into rows of
``seq_len`` tokens with a ``stride``: each row predicts only its last ``stride`` tokens, so each token is
scored once with at least ``seq_len - stride`` tokens of context (stride = seq_len: non-overlapping rows).
Word perplexity = exp(total NLL / number of whitespace-separated words): comparable across tokenizers.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.errors import ConfigError, DataError


def stream_rows(ids: np.ndarray, seq_len: int, stride: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(inputs [R, L], targets [R, L], weights [R, L]): every token after the first is a target exactly once."""
    if not 0 < stride <= seq_len:
        raise ConfigError(f"stride={stride} must be in (0, seq_len={seq_len}]")
    n = len(ids) - 1  # targets are ids[1:]
    starts = list(range(0, max(n - seq_len, 0) + 1, stride))
    if starts[-1] + seq_len < n:
        starts.append(n - seq_len if n > seq_len else 0)
    inputs = np.zeros((len(starts), seq_len), np.int32)
    targets = np.zeros_like(inputs)
    weights = np.zeros(inputs.shape, np.float32)
    scored_until = 0  # targets [0, scored_until) are done
    for r, s in enumerate(starts):
        row = ids[s: s + seq_len + 1]
        m = len(row) - 1
        inputs[r, :m], targets[r, :m] = row[:-1], row[1:]
        first = max(scored_until - s, 0)
        weights[r, first:m] = 1.0
        scored_until = s + m
    return inputs, targets, weights


def perplexity(params: Any, cfg: Any, tokenizer, path: str | Path, *, seq_len: int | None = None,
               stride: int | None = None, batch_size: int = 16, max_tokens: int = 0,
               collapse_whitespace: bool = False) -> dict[str, float]:
    """``collapse_whitespace``: score ``' '.join(text.split())``, for a model whose training text never held a
    newline (ptm's corpus reader joins the sentences of a document with single spaces)."""
    from ptm_jax import fs
    from ptm_jax.objectives.task_data import task_head

    p = fs.path(path)
    try:
        text = fs.read_bytes(p).decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{p}: cannot read the evaluation text ({e}); pass a UTF-8 text file") from None
    if not text.strip():
        raise DataError(f"{p}: is empty")
    if collapse_whitespace:
        text = " ".join(text.split())
    seq_len = seq_len or cfg.max_position_embeddings
    if seq_len > cfg.max_position_embeddings:
        raise ConfigError(f"seq_len={seq_len} exceeds the model's context of {cfg.max_position_embeddings}")
    stride = stride or seq_len
    ids = np.asarray(tokenizer.encode(text), np.int32)
    if max_tokens:
        ids = ids[:max_tokens]
    inputs, targets, weights = stream_rows(ids, seq_len, stride)
    model = task_head(cfg, "causal_lm")(cfg)

    @jax.jit
    def nll(x, y, w):
        logits, _ = model.apply({"params": params}, x, None, None, deterministic=True)
        logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
        picked = jnp.take_along_axis(logp, y[..., None], axis=-1)[..., 0]
        return -jnp.sum(picked * w), jnp.sum(w)

    total, count = 0.0, 0.0
    for i in range(0, len(inputs), batch_size):
        x, y, w = inputs[i: i + batch_size], targets[i: i + batch_size], weights[i: i + batch_size]
        if len(x) < batch_size:  # one compiled shape: pad with weight-0 rows
            pad = batch_size - len(x)
            x, y, w = (np.concatenate([a, np.zeros((pad,) + a.shape[1:], a.dtype)]) for a in (x, y, w))
        a, b = nll(x, y, w)
        total, count = total + float(a), count + float(b)
    words = len(tokenizer.decode(ids.tolist()).split()) if max_tokens else len(text.split())
    return {"tokens": int(count), "words": words, "nll_per_token": total / count,
            "token_perplexity": math.exp(total / count), "word_perplexity": math.exp(total / max(words, 1)),
            "seq_len": seq_len, "stride": stride, "collapse_whitespace": collapse_whitespace}
