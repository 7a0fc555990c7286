"""Batched autoregressive generation with a fixed-size KV cache (ptm_jax.families.gpt.model decode mode).

Prompts of different lengths are left-padded to the longest one: padding gets segment id 0 (no real token
attends to it) and each row's real tokens get positions 0..n-1, so every row computes what it would alone.
One jitted prefill writes the prompts into the cache and gives the first next-token logits; then one
jitted ``lax.while_loop`` samples a token, feeds it back at the next cache slot and stops after
``max_new_tokens`` or when every row has produced ``eos_id``. The cache has ``max_length`` slots whatever
the prompt length, so the decode loop compiles once per (batch, max_length, sampling mode) and a new token costs
the same for a 16- or a 768-token prompt. Draws use ``fold_in(PRNGKey(seed), step)``: reproducible.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.config_loading import to_dict
from ptm_jax.families.gpt.config import GptConfig
from ptm_jax.errors import ConfigError, DataError
from ptm_jax.families.gpt.model import GPTLMHeadModel
from ptm_jax.generate.sampling import sample


@dataclass(frozen=True)
class Sampling:
    greedy: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def check(self) -> None:
        if not self.greedy and not self.temperature > 0:
            raise ConfigError(f"temperature={self.temperature} must be > 0 (use greedy decoding for argmax)")
        if self.top_k < 0:
            raise ConfigError(f"top_k={self.top_k} must be >= 0 (0 = no top-k filtering)")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p={self.top_p} must be in (0, 1] (1 = no nucleus filtering)")


_COMPILED: dict[tuple, tuple[Callable, Callable]] = {}


def decode_functions(cfg: GptConfig, *, cache_length: int, max_new_tokens: int, greedy: bool = False,
                     top_k: int = 0, nucleus: bool = False, pad_id: int = 0) -> tuple[Callable, Callable]:
    """(prefill, decode_loop), jitted and memoised by their static settings.

    ``prefill(params, ids [B,P], segments [B,P], positions [B,P]) -> (last logits [B,V], cache)``;
    ``decode_loop(params, cache, logits [B,V], next_positions [B], key, temperature, top_p, eos_id)
    -> (tokens [B, max_new_tokens], steps)``: temperature, top_p (used when ``nucleus``) and eos_id (-1 = none)
    are traced scalars, so changing them does not recompile; rows that finished hold ``pad_id``."""
    key = (json.dumps(to_dict(cfg), sort_keys=True), cache_length, max_new_tokens, greedy, top_k, nucleus, pad_id)
    if key in _COMPILED:
        return _COMPILED[key]
    model = GPTLMHeadModel(cfg, cache_length=cache_length)

    @jax.jit
    def prefill(params, ids, segments, positions):
        (logits, _), state = model.apply({"params": params}, ids, segments, positions, decode=True,
                                         mutable=["cache"])
        return logits[:, -1], state["cache"]

    @jax.jit
    def decode_loop(params, cache, logits, positions, rng, temperature, top_p, eos_id):
        b = logits.shape[0]
        opts = dict(greedy=greedy, temperature=temperature, top_k=top_k, top_p=top_p if nucleus else 1.0)
        ones = jnp.ones((b, 1), jnp.int32)

        def cond(state):
            step, *_, done = state
            return (step < max_new_tokens) & ~jnp.all(done)

        def body(state):
            step, logits, cache, pos, out, done = state
            tok = jnp.where(done, pad_id, sample(logits, jax.random.fold_in(rng, step), **opts))
            out = jax.lax.dynamic_update_slice(out, tok[:, None], (0, step))
            done = done | (tok == eos_id)
            (next_logits, _), upd = model.apply({"params": params, "cache": cache}, tok[:, None], ones, pos[:, None],
                                                decode=True, mutable=["cache"])
            return step + 1, next_logits[:, 0], upd["cache"], pos + 1, out, done

        init = (jnp.zeros((), jnp.int32), logits, cache, positions.astype(jnp.int32),
                jnp.full((b, max_new_tokens), pad_id, jnp.int32), jnp.zeros((b,), bool))
        steps, _, _, _, out, _ = jax.lax.while_loop(cond, body, init)
        return out, steps

    _COMPILED[key] = (prefill, decode_loop)
    return prefill, decode_loop


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int, width: int | None = None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(ids, segments, positions [B, width], lengths [B]): each prompt right-aligned, padding segment 0."""
    lengths = np.array([len(p) for p in prompts], np.int32)
    width = int(lengths.max()) if width is None else width
    ids = np.full((len(prompts), width), pad_id, np.int32)
    seg = np.zeros((len(prompts), width), np.int32)
    pos = np.zeros((len(prompts), width), np.int32)
    for r, p in enumerate(prompts):
        n = len(p)
        ids[r, width - n:] = p
        seg[r, width - n:] = 1
        pos[r, width - n:] = np.arange(n)
    return ids, seg, pos, lengths


def _check_prompts(prompts: Any, cfg: GptConfig, max_new_tokens: int, max_length: int) -> None:
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise DataError("no prompts: pass at least one non-empty list of token ids")
    if max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens={max_new_tokens} must be >= 1")
    if max_length > cfg.max_position_embeddings:
        raise ConfigError(f"max_length={max_length} exceeds the model's context "
                          f"(max_position_embeddings={cfg.max_position_embeddings})")
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise DataError(f"prompt {i + 1} is empty; every prompt needs at least one token")
        arr = np.asarray(p)
        if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise DataError(f"prompt {i + 1} is not a flat list of integer token ids")
        if arr.min() < 0 or arr.max() >= cfg.vocab_size:
            bad = int(arr.max() if arr.max() >= cfg.vocab_size else arr.min())
            raise DataError(f"prompt {i + 1} has token id {bad} outside the vocabulary [0, {cfg.vocab_size})")
        if len(p) + max_new_tokens > max_length:
            raise DataError(f"prompt {i + 1} has {len(p)} tokens; with max_new_tokens={max_new_tokens} it needs "
                            f"{len(p) + max_new_tokens} positions but the context is {max_length}; shorten the "
                            "prompt or ask for fewer tokens")


def generate(params: Any, cfg: GptConfig, prompts: list[list[int]], max_new_tokens: int, *,
             temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, greedy: bool = False, seed: int = 0,
             eos_id: int | None = None, pad_id: int = 0, max_length: int | None = None,
             prompt_width: int | None = None) -> list[list[int]]:
    """New tokens for each prompt (token-id lists), up to ``max_new_tokens``, ending with ``eos_id`` when it
    is produced. ``params``: a GPTLMHeadModel tree {'gpt': ...} (or {'params': {...}}) in the layout of
    ``cfg.scan_layers``. ``max_length``: KV-cache slots (default ``cfg.max_position_embeddings``); the longest
    prompt plus ``max_new_tokens`` must fit in it. ``prompt_width``: the left-padded width of the prompts (default
    the longest prompt; a fixed width lets batches of different prompt lengths share one compiled prefill)."""
    if cfg.family != "gpt":
        raise ConfigError(f"generation needs a GPT model (model.family='gpt'), got {cfg.family!r}")
    max_length = int(max_length or cfg.max_position_embeddings)
    sampling = Sampling(greedy=bool(greedy), temperature=float(temperature), top_k=int(top_k), top_p=float(top_p))
    sampling.check()
    _check_prompts(prompts, cfg, max_new_tokens, max_length)
    if isinstance(params, dict) and set(params) == {"params"}:
        params = params["params"]
    if prompt_width is not None and not max(map(len, prompts)) <= prompt_width <= max_length - max_new_tokens:
        raise ConfigError(f"prompt_width={prompt_width} must hold the longest prompt ({max(map(len, prompts))} "
                          f"tokens) and leave max_new_tokens={max_new_tokens} of the {max_length} positions")
    ids, seg, pos, lengths = left_pad(prompts, pad_id, prompt_width)
    prefill, loop = decode_functions(cfg, cache_length=max_length, max_new_tokens=max_new_tokens,
                                     greedy=sampling.greedy, top_k=0 if sampling.greedy else sampling.top_k,
                                     nucleus=not sampling.greedy and sampling.top_p < 1.0, pad_id=pad_id)
    logits, cache = prefill(params, ids, seg, pos)
    out, steps = loop(params, cache, logits, jnp.asarray(lengths), jax.random.PRNGKey(seed),
                      jnp.float32(sampling.temperature), jnp.float32(sampling.top_p),
                      jnp.int32(-1 if eos_id is None else eos_id))
    out, steps = np.asarray(out), int(steps)
    result = []
    for row in out[:, :steps]:
        row = row.tolist()
        if eos_id is not None and eos_id in row:
            row = row[: row.index(eos_id) + 1]
        result.append(row)
    return result
