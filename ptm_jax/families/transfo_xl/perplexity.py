"""Held-out perplexity of a Transformer-XL with its memory carried (``ptm perplexity``; Dai et al. 2019 Sec. 3.2 and
4: evaluation reuses the memory, which may be longer than in training; kimiyoung/transformer-xl ``eval.py``).

The file is read line by line, each line followed by eos (as the corpus reader ends a document), and cut into
``batch_size`` contiguous rows; each row is read in segments of ``--stride`` tokens, every segment attending to a
memory of the ``--seq-len`` minus ``--stride`` states before it in every layer (``--seq-len`` = ``--stride``: no
memory, each segment on its own). So ``--seq-len`` and ``--stride`` keep the meaning they have for the other causal
LMs (a token is scored with up to seq_len - stride tokens before it), while Transformer-XL's effective context
reaches further back through the layers. Every token after the first is scored exactly once; a row's first segment
has no memory (masked, not zeros). Defaults: ``segment_and_memory``.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.errors import ConfigError, DataError
from ptm_jax.evaluate.perplexity import contiguous_rows, line_stream_ids

SEGMENT = 64
"""Default evaluation segment: the paper's WikiText-103 base evaluation (eval_tgt_len 64)."""


def eval_config(cfg: Any, memory: int, same_length: bool | None = None, clamp_len: int | None = None) -> Any:
    """The model config for evaluation: dropout off, ``mem_len`` = ``memory``, optionally the paper's
    ``same_length`` and ``clamp_len`` of evaluation."""
    out = dataclasses.replace(cfg, hidden_dropout=0.0, attention_dropout=0.0, remat="none", mem_len=int(memory))
    if same_length is not None:
        out = dataclasses.replace(out, same_length=bool(same_length))
    if clamp_len is not None:
        out = dataclasses.replace(out, clamp_len=int(clamp_len))
    return out


def segment_and_memory(cfg: Any, seq_len: int | None, stride: int | None) -> tuple[int, int]:
    """(segment, memory): both given: (stride, seq_len - stride); --stride alone: the model's ``mem_len`` as memory;
    --seq-len alone: segments of seq_len without memory (``ptm perplexity``: --stride defaults to --seq-len);
    neither: (64, ``mem_len``)."""
    if seq_len is not None and stride is not None:
        segment, memory = int(stride), int(seq_len) - int(stride)
    elif seq_len is not None:
        segment, memory = int(seq_len), 0
    else:
        segment, memory = int(stride or SEGMENT), int(cfg.mem_len)
    if segment < 1 or memory < 0:
        raise ConfigError(f"--seq-len={seq_len} and --stride={stride}: each step scores --stride new tokens with "
                          "--seq-len minus --stride tokens of memory, so --seq-len must be >= --stride >= 1")
    return segment, memory


def perplexity(params: Any, cfg: Any, tokenizer, path: str | Path, *, seq_len: int | None = None,
               stride: int | None = None, batch_size: int = 16, max_tokens: int = 0,
               collapse_whitespace: bool = False, same_length: bool | None = None,
               clamp_len: int | None = None) -> dict[str, float]:
    """The registry's ``perplexity`` hook (module docstring); ``same_length`` / ``clamp_len`` override the model's
    (the paper evaluates with same_length on)."""
    from ptm_jax.families.transfo_xl.model import TransfoXLLMHeadModel

    segment, memory = segment_and_memory(cfg, seq_len, stride)
    ecfg = eval_config(cfg, memory, same_length, clamp_len)
    eos = getattr(tokenizer, "eos_id", None)
    ids = line_stream_ids(tokenizer, path, collapse_whitespace, max_tokens,
                          eos_id=tokenizer.sep_id if eos is None else eos)
    if len(ids) < 2:
        raise DataError(f"{path}: holds no token to score")
    rows = max(1, min(batch_size, len(ids) - 1))
    x, y, w = contiguous_rows(ids, rows, segment, tokenizer.pad_id)
    model = TransfoXLLMHeadModel(ecfg)
    variables = {"params": params.get("params", params)}

    @jax.jit
    def nll(mems, valid, xc, yc, wc):
        logp, new, new_valid = model.apply(variables, xc, mems, valid)
        picked = jnp.take_along_axis(logp, yc[..., None], axis=-1)[..., 0]
        return new, new_valid, -jnp.sum(picked * wc)

    mems = jnp.zeros((ecfg.num_layers, rows, memory, ecfg.hidden_size), jnp.float32) if memory else None
    valid = jnp.zeros((rows,), jnp.int32) if memory else None
    total = 0.0
    for c in range(x.shape[1] // segment):
        s = slice(c * segment, (c + 1) * segment)
        mems, valid, part = nll(mems, valid, jnp.asarray(x[:, s]), jnp.asarray(y[:, s]), jnp.asarray(w[:, s]))
        total += float(part)
    count = float(w.sum())
    words = int(np.sum(ids[1:] != (tokenizer.sep_id if eos is None else eos)))
    return {"tokens": int(count), "words": words, "nll_per_token": total / count,
            "token_perplexity": math.exp(total / count), "word_perplexity": math.exp(total / max(words, 1)),
            "segment": segment, "memory": memory, "same_length": ecfg.same_length, "clamp_len": ecfg.clamp_len,
            "rows": rows, "collapse_whitespace": collapse_whitespace}
