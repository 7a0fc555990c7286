"""Sampling from a Transformer-XL with its memory as the cache (Dai et al. 2019 Sec. 3.2: "during evaluation, the
representations from the previous segments can be reused instead of being computed from scratch").

Every step feeds one token per row as a segment of length 1 against a memory of ``max_length`` states per layer
(default: the model's ``mem_len``, at least 64): the prompt token by token (teacher-forced), then the sampled
tokens. Prompts of different lengths are left-padded; a row's padding steps do not count as memory
(``mem_valid`` counts only the row's real tokens, which are the last ones), so each row computes what it would
alone. A prompt may be longer than the memory: the memory keeps its last ``max_length`` states. One jitted
``lax.while_loop`` runs the prompt and the sampling (it compiles once per batch, memory, step count and sampling
mode); temperature and top-p are traced scalars; draws are ``fold_in(PRNGKey(seed), step)``.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.errors import ConfigError, DataError
from ptm_jax.families.transfo_xl.perplexity import eval_config
from ptm_jax.generate.sampling import sample


def _check(prompts: Any, vocab_size: int, max_new_tokens: int, memory: int) -> None:
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise DataError("no prompts: pass at least one non-empty list of token ids")
    if max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens={max_new_tokens} must be >= 1")
    if memory < 1:
        raise ConfigError(f"max_length={memory}: decoding reads the context from a memory of max_length states; "
                          "it must be >= 1")
    for i, p in enumerate(prompts):
        arr = np.asarray(p)
        if len(p) == 0 or arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise DataError(f"prompt {i + 1} is not a non-empty flat list of integer token ids")
        if arr.min() < 0 or arr.max() >= vocab_size:
            bad = int(arr.max() if arr.max() >= vocab_size else arr.min())
            raise DataError(f"prompt {i + 1} has token id {bad} outside the vocabulary [0, {vocab_size})")


def generate(params: Any, cfg: Any, prompts: list[list[int]], max_new_tokens: int, *, temperature: float = 1.0,
             top_k: int = 0, top_p: float = 1.0, greedy: bool = False, seed: int = 0, eos_id: int | None = None,
             pad_id: int = 0, max_length: int | None = None) -> list[list[int]]:
    """New tokens for each prompt, up to ``max_new_tokens``, ending with ``eos_id`` when it is produced.
    ``max_length``: the memory (states per layer) the new tokens attend to."""
    from ptm_jax.families.transfo_xl.model import TransfoXLLMHeadModel

    memory = int(max_length or max(cfg.mem_len, 64))
    _check(prompts, cfg.vocab_size, max_new_tokens, memory)
    if not greedy and not temperature > 0:
        raise ConfigError(f"temperature={temperature} must be > 0 (use greedy decoding for argmax)")
    if top_k < 0 or not 0.0 < top_p <= 1.0:
        raise ConfigError(f"top_k={top_k} must be >= 0 and top_p={top_p} in (0, 1]")
    model = TransfoXLLMHeadModel(eval_config(cfg, memory))
    variables = {"params": params.get("params", params)}
    b, width = len(prompts), max(len(p) for p in prompts)
    ids = np.full((b, width), pad_id, np.int32)
    for r, p in enumerate(prompts):
        ids[r, width - len(p):] = p
    starts = jnp.asarray([width - len(p) for p in prompts], jnp.int32)
    opts = dict(greedy=bool(greedy), top_k=0 if greedy else int(top_k))
    nucleus = not greedy and top_p < 1.0

    @jax.jit
    def run(ids, starts, rng, temperature, top_p, eos):
        total = width + max_new_tokens

        def cond(state):
            t, *_, done = state
            return (t < total - 1) & ~jnp.all(done & (t >= width - 1))

        def body(state):
            t, tok, mems, valid, out, done = state
            logp, mems, valid = model.apply(variables, tok[:, None], mems, valid)
            valid = jnp.where(t >= starts, valid, 0)  # left padding is not memory
            nxt = sample(logp[:, 0], jax.random.fold_in(rng, t), temperature=temperature,
                         top_p=top_p if nucleus else 1.0, **opts)
            new_step = t + 1 >= width
            prompt_tok = ids[:, jnp.minimum(t + 1, width - 1)]
            nxt = jnp.where(new_step, jnp.where(done, pad_id, nxt), prompt_tok)
            out = jnp.where(new_step, jax.lax.dynamic_update_slice(out, nxt[:, None], (0, jnp.maximum(t + 1 - width,
                                                                                                      0))), out)
            done = done | (new_step & (nxt == eos))
            return t + 1, nxt, mems, valid, out, done

        mems = jnp.zeros((cfg.num_layers, b, memory, cfg.hidden_size), jnp.float32)
        init = (jnp.zeros((), jnp.int32), ids[:, 0], mems, jnp.zeros((b,), jnp.int32),
                jnp.full((b, max_new_tokens), pad_id, jnp.int32), jnp.zeros((b,), bool))
        t, _, _, _, out, _ = jax.lax.while_loop(cond, body, init)
        return out, t + 1 - width

    out, steps = run(jnp.asarray(ids), starts, jax.random.PRNGKey(seed), jnp.float32(temperature),
                     jnp.float32(top_p), jnp.int32(-1 if eos_id is None else eos_id))
    result = []
    for row in np.asarray(out)[:, :int(steps)].tolist():
        if eos_id is not None and eos_id in row:
            row = row[: row.index(eos_id) + 1]
        result.append(row)
    return result
