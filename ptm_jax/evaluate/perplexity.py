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


def read_text(path: str | Path, collapse_whitespace: bool = False) -> str:
    """The evaluation text of ``path`` (local or gs://), a DataError naming the file when it is unreadable, not
    UTF-8 or empty; ``collapse_whitespace``: ``' '.join(text.split())``."""
    from ptm_jax import fs

    p = fs.path(path)
    try:
        text = fs.read_bytes(p).decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{p}: cannot read the evaluation text ({e}); pass a UTF-8 text file") from None
    if not text.strip():
        raise DataError(f"{p}: is empty")
    return " ".join(text.split()) if collapse_whitespace else text


def line_stream_ids(tokenizer: Any, path: str | Path, collapse_whitespace: bool = False, max_tokens: int = 0,
                    eos_id: int | None = None) -> np.ndarray:
    """The file as one stream of ids for the models that read text line by line (the word-level LMs): each
    non-blank line tokenized and followed by ``eos_id`` (default the tokenizer's), as the corpus reader ends a
    document; the first ``max_tokens + 1`` ids when ``max_tokens`` is set."""
    text = read_text(path, collapse_whitespace)
    eos = tokenizer.eos_id if eos_id is None else eos_id
    ids: list[int] = []
    for row in tokenizer.encode_batch([ln for ln in text.splitlines() if ln.strip()]):
        ids.extend(row)
        ids.append(eos)
    out = np.asarray(ids, np.int32)
    return out[:max_tokens + 1] if max_tokens else out


def contiguous_rows(ids: np.ndarray, rows: int, chunk: int, pad_id: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(inputs, targets, weights [rows, width]) for a model that carries state along a row: the stream's targets
    cut into ``rows`` contiguous regions of R = ceil((N - 1) / rows), right-padded (weight 0) to a multiple of
    ``chunk``; row r scores the positions [1 + r R, 1 + (r + 1) R) exactly once."""
    R = -(-(len(ids) - 1) // rows)
    width = -(-R // chunk) * chunk
    x = np.full((rows, width), pad_id, np.int32)
    y = np.full((rows, width), pad_id, np.int32)
    w = np.zeros((rows, width), np.float32)
    for r in range(rows):
        lo, hi = r * R, min((r + 1) * R, len(ids) - 1)
        n = max(hi - lo, 0)
        x[r, :n], y[r, :n], w[r, :n] = ids[lo:hi], ids[lo + 1:hi + 1], 1.0
    return x, y, w


def summed_nll(nll: Any, arrays: tuple[np.ndarray, ...], batch_size: int) -> tuple[float, float]:
    """(total NLL, total weight) of ``nll(*batch) -> (sum of NLL, sum of weights)`` over the rows of ``arrays``
    in batches of ``batch_size``; the last batch is padded with zero rows (weight 0), so one shape compiles."""
    total, count = 0.0, 0.0
    for i in range(0, len(arrays[0]), batch_size):
        batch = [a[i: i + batch_size] for a in arrays]
        pad = batch_size - len(batch[0])
        if pad:
            batch = [np.concatenate([a, np.zeros((pad,) + a.shape[1:], a.dtype)]) for a in batch]
        a, b = nll(*batch)
        total, count = total + float(a), count + float(b)
    return total, count


def perplexity(params: Any, cfg: Any, tokenizer, path: str | Path, *, seq_len: int | None = None,
               stride: int | None = None, batch_size: int = 16, max_tokens: int = 0,
               collapse_whitespace: bool = False) -> dict[str, float]:
    """``collapse_whitespace``: score ``' '.join(text.split())``, for a model whose training text never held a
    newline (ptm's corpus reader joins the sentences of a document with single spaces)."""
    from ptm_jax.objectives.task_data import task_head

    text = read_text(path, collapse_whitespace)
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

    total, count = summed_nll(nll, (inputs, targets, weights), batch_size)
    words = len(tokenizer.decode(ids.tolist()).split()) if max_tokens else len(text.split())
    return {"tokens": int(count), "words": words, "nll_per_token": total / count,
            "token_perplexity": math.exp(total / count), "word_perplexity": math.exp(total / max(words, 1)),
            "seq_len": seq_len, "stride": stride, "collapse_whitespace": collapse_whitespace}
