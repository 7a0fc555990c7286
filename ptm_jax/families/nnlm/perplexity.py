"""Held-out perplexity of an NNLM on a text file (``ptm perplexity``), as Bengio et al. 2003 Sec. 4 report it:
exp of the mean negative log-likelihood of every word of the held-out text given its n-1 predecessors.

The file is read as the training stream is built (``data.py``): every non-empty line is a segment of words
followed by ``<eos>``, and the stream starts with n-1 ``<eos>`` so that its first word has a context (the
``<eos>`` before a document is what the model saw at document starts). Rows of ``seq_len + n - 1`` stream
tokens predict their last ``seq_len`` tokens and tile the stream with no gap and no overlap, so every word and
every ``<eos>`` is scored exactly once. Token perplexity counts the ``<eos>`` predictions (as the training loss
does); word perplexity divides the same total by the number of whitespace-separated words.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.errors import ConfigError, DataError
from ptm_jax.evaluate.perplexity import read_text, summed_nll


def stream_windows(ids: np.ndarray, length: int, context: int, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(windows [R, length + context], weights [R, length]) over ``ids`` (which begin with ``context`` tokens of
    context): window r holds ids[r*length : r*length + length + context] and predicts its last ``length``."""
    n = len(ids) - context  # predictions
    rows = max(-(-n // length), 1)
    padded = np.full(rows * length + context, pad_id, np.int32)
    padded[: len(ids)] = ids
    windows = np.lib.stride_tricks.sliding_window_view(padded, length + context)[::length][:rows].copy()
    weights = (np.arange(rows * length).reshape(rows, length) < n).astype(np.float32)
    return windows, weights


def perplexity(params: Any, cfg: Any, tokenizer, path: str | Path, *, seq_len: int | None = None,
               stride: int | None = None, batch_size: int = 16, max_tokens: int = 0,
               collapse_whitespace: bool = False) -> dict[str, float]:
    """The registry's ``perplexity`` hook (``ptm perplexity``). ``stride`` must equal ``seq_len`` (an n-gram
    model's context is its n-1 predecessors, so overlapping rows would add nothing)."""
    from ptm_jax.families.nnlm.model import NnlmLanguageModel

    seq_len = seq_len or 128
    if stride not in (None, seq_len):
        raise ConfigError(f"--stride={stride}: an NNLM sees only its {cfg.context} predecessors, so rows never "
                          f"overlap; leave --stride unset")
    text = read_text(path, collapse_whitespace)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    eos = tokenizer.eos_id
    ids = [eos] * cfg.context
    for row in tokenizer.encode_batch(lines):
        ids.extend(row)
        ids.append(eos)
    ids = np.asarray(ids, np.int32)
    if max_tokens:
        ids = ids[: cfg.context + max_tokens]
    if len(ids) <= cfg.context:
        raise DataError(f"{path}: holds no word to score")
    windows, weights = stream_windows(ids, seq_len, cfg.context, tokenizer.pad_id)
    model = NnlmLanguageModel(cfg)

    @jax.jit
    def nll(x, w):
        logp = jax.nn.log_softmax(model.apply({"params": params}, x).astype(jnp.float32), axis=-1)
        picked = jnp.take_along_axis(logp, x[:, cfg.context:, None], axis=-1)[..., 0]
        return -jnp.sum(picked * w), jnp.sum(w)

    total, count = summed_nll(nll, (windows, weights), batch_size)
    scored = ids[cfg.context:]
    words = int(np.sum(scored != eos))
    return {"tokens": int(count), "words": words, "nll_per_token": total / count,
            "token_perplexity": math.exp(total / count), "word_perplexity": math.exp(total / max(words, 1)),
            "seq_len": seq_len, "stride": seq_len, "collapse_whitespace": collapse_whitespace}
