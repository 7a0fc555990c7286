"""Held-out perplexity of an AWD-LSTM LM with its state carried (``ptm perplexity``; Merity et al. 2018 evaluate
the same way: the test stream cut into ``batch_size`` contiguous rows, read chunk by chunk, each chunk starting
from the state the previous one left).

The file is read as lines, each followed by eos (the corpus reader's document end), tokenized with the model's
word vocabulary; every token after the first is scored exactly once. Row r scores the stream positions
[1 + r R, 1 + (r + 1) R) (R = ceil((N - 1) / rows)); only the first chunk of a row starts from the zero state.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.errors import ConfigError, DataError
from ptm_jax.evaluate.perplexity import contiguous_rows, line_stream_ids


def perplexity(params: Any, cfg: Any, tokenizer, path: str | Path, *, seq_len: int | None = None,
               stride: int | None = None, batch_size: int = 16, max_tokens: int = 0,
               collapse_whitespace: bool = False) -> dict[str, float]:
    """The registry's ``perplexity`` hook. ``seq_len``: the chunk length (default 70, the BPTT length)."""
    from ptm_jax.families.ulmfit.model import AwdLstmLanguageModel

    seq_len = seq_len or 70
    if stride not in (None, seq_len):
        raise ConfigError(f"--stride={stride}: the AWD-LSTM carries its state from chunk to chunk, so chunks never "
                          "overlap; leave --stride unset")
    ids = line_stream_ids(tokenizer, path, collapse_whitespace, max_tokens)
    if len(ids) < 2:
        raise DataError(f"{path}: holds no token to score")
    rows = max(1, min(batch_size, len(ids) - 1))
    x, y, w = contiguous_rows(ids, rows, seq_len, tokenizer.pad_id)
    chunks = x.shape[1] // seq_len
    model = AwdLstmLanguageModel(cfg)
    variables = {"params": params}

    @jax.jit
    def nll(carry, xc, yc, wc):
        logits, _, _, new = model.apply(variables, xc, wc > 0, carry, True)
        logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
        picked = jnp.take_along_axis(logp, yc[..., None], axis=-1)[..., 0]
        return new, -jnp.sum(picked * wc)

    from ptm_jax.families.ulmfit.model import zero_carries

    carry = zero_carries(cfg, rows)
    total = 0.0
    for c in range(chunks):
        s = slice(c * seq_len, (c + 1) * seq_len)
        carry, part = nll(carry, jnp.asarray(x[:, s]), jnp.asarray(y[:, s]), jnp.asarray(w[:, s]))
        total += float(part)
    count = float(w.sum())
    words = int(np.sum(ids[1:] != tokenizer.eos_id))
    return {"tokens": int(count), "words": words, "nll_per_token": total / count,
            "token_perplexity": math.exp(total / count), "word_perplexity": math.exp(total / max(words, 1)),
            "seq_len": seq_len, "rows": rows, "collapse_whitespace": collapse_whitespace}
