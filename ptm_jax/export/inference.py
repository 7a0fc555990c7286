"""Batched inference of a sequence encoder or classifier on lines of text: `ptm embed` and `ptm predict` run it.

Inference runs one jitted forward over fixed-size batches: texts are sorted by length, each batch is padded to the
smallest of a few bucket lengths, and the last batch is padded with empty rows, so a whole file compiles at most
``len(BUCKETS)`` times. Inputs are ``[CLS] a [SEP] (b [SEP])`` with BERT's pair truncation (google-research/bert
run_classifier.py ``_truncate_seq_pair``: drop from the end of the longer segment, the second one on ties).
"""
from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any, Callable, Sequence

import numpy as np

from ptm_jax import fs
from ptm_jax.config_loading import to_dict
from ptm_jax.models.config import TransformerConfig
from ptm_jax.data.tasks.features import encode_inputs
from ptm_jax.errors import ConfigError, DataError

BUCKETS = (16, 32, 48, 64, 96, 128, 192, 256, 384, 512)
_COMPILED: dict[tuple, Callable] = {}  # jitted forwards by (kind, model config, options): compiled once


# ----------------------------------------------------------------------------------------------------
# Text input


def read_lines(source: str) -> list[str]:
    """Lines of a UTF-8 file, or of stdin for '-'; every line is kept (an empty line is an empty text)."""
    if source == "-":
        data, name = sys.stdin.buffer.read(), "<stdin>"
    else:
        p = fs.path(source)
        if not p.is_file():
            raise DataError(f"{p}: input file not found; pass a text file with one example per line, or '-'")
        data, name = fs.read_bytes(p), str(p)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for lineno, line in enumerate(lines, 1):
        try:
            out.append(line.rstrip(b"\r").decode("utf-8"))
        except UnicodeDecodeError as e:
            raise DataError(f"{name}:{lineno}: not UTF-8 ({e.reason} at byte {e.start}); re-encode the file "
                            "as UTF-8") from None
    return out


# ----------------------------------------------------------------------------------------------------
# Batched jitted forward


def _bucket(n: int, max_length: int) -> int:
    return min([b for b in BUCKETS if b >= n] + [max(n, max_length)])


def run_batched(fn: Callable, params: Any, ids: list[np.ndarray], segs: list[np.ndarray], max_length: int,
                batch_size: int) -> np.ndarray:
    """Applies ``fn(params, input_ids, input_mask, segment_ids) -> [B, ...]`` over fixed-size batches in
    length order; returns the rows in input order."""
    if batch_size < 1:
        raise ConfigError(f"--batch-size={batch_size} must be at least 1")
    n = len(ids)
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=n)
    order = np.argsort(lengths, kind="stable")
    out: np.ndarray | None = None
    for start in range(0, n, batch_size):
        rows = order[start:start + batch_size]
        width = _bucket(int(lengths[rows].max()), max_length)
        x = np.zeros((3, batch_size, width), np.int32)
        for j, r in enumerate(rows):
            x[0, j, : lengths[r]] = ids[r]
            x[1, j, : lengths[r]] = 1
            x[2, j, : lengths[r]] = segs[r]
        y = np.asarray(fn(params, x[0], x[1], x[2]))[: len(rows)]
        if out is None:
            out = np.zeros((n,) + y.shape[1:], y.dtype)
        out[rows] = y
    return out if out is not None else np.zeros((0,), np.float32)


def _inference_cfg(cfg: TransformerConfig) -> TransformerConfig:
    return dataclasses.replace(cfg, remat="none", hidden_dropout=0.0, attention_dropout=0.0)


def embed_texts(params: dict, cfg: TransformerConfig, tokenizer, texts: Sequence[str], *, pooling: str = "mean",
                max_length: int = 128, batch_size: int = 64, normalize: bool = False) -> np.ndarray:
    """float32 [N, H] sentence vectors: the attention-mask mean (or the [CLS] state) of the last layer."""
    import jax
    import jax.numpy as jnp

    from ptm_jax.families import registry

    fam = registry.get(cfg.family)
    encoder = registry.require(fam, "finetuning.task_heads", "sentence embeddings").get("encoder")
    if encoder is None:
        raise ConfigError(f"model.family={cfg.family!r} does not support sentence embeddings (no encoder head)")
    if pooling not in ("mean", "cls"):
        raise ConfigError(f"--pooling={pooling!r}: expected 'mean' or 'cls'")
    max_length = min(max_length, cfg.max_position_embeddings)
    key = ("embed", json.dumps(to_dict(cfg), sort_keys=True), pooling, normalize)
    if key not in _COMPILED:
        model = encoder()(_inference_cfg(cfg), add_pooler=False)

        def fn(p, input_ids, input_mask, segment_ids):
            h, _ = model.apply({"params": p}, input_ids, input_mask, segment_ids)
            h = h.astype(jnp.float32)
            if pooling == "cls":
                v = h[:, 0]
            else:
                m = input_mask[..., None].astype(jnp.float32)
                v = jnp.sum(h * m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1e-9)
            if normalize:
                v = v / jnp.maximum(jnp.linalg.norm(v, axis=-1, keepdims=True), 1e-12)
            return v

        _COMPILED[key] = jax.jit(fn)
    ids, segs = encode_inputs(tokenizer, texts, None, max_length)
    out = run_batched(_COMPILED[key], jax.device_put(params[fam.layout.trunk]), ids, segs, max_length, batch_size)
    return out.reshape(len(texts), cfg.hidden_size).astype(np.float32)


def classify_texts(params: dict, cfg: TransformerConfig, num_labels: int, tokenizer, texts: Sequence[str],
                   pairs: Sequence[str] | None = None, *, max_length: int = 128, batch_size: int = 64,
                   san: dict | None = None) -> np.ndarray:
    """float32 [N, num_labels] logits of a sequence classifier; with ``san`` ({steps, step_dropout}: the
    ``ptm.json`` entry of a head ``san_classification`` model) the log of the SAN answer module's averaged step
    predictions (``models/san.py``, all K steps at inference)."""
    import jax

    from ptm_jax.families import registry

    fam = registry.get(cfg.family)
    classifier = fam.finetuning.task_heads.get("sequence_classification")
    if classifier is None or "classify" not in fam.capabilities:
        raise ConfigError(f"model.family={cfg.family!r} does not support `ptm predict` (sequence classification)")
    max_length = min(max_length, cfg.max_position_embeddings)
    key = ("classify", json.dumps(to_dict(cfg), sort_keys=True), num_labels, json.dumps(san, sort_keys=True))
    if key not in _COMPILED:
        if san is None:
            model = classifier()(_inference_cfg(cfg), num_labels)
        else:
            from ptm_jax.objectives.san_classification import san_classifier

            model = san_classifier(_inference_cfg(cfg), num_labels, san, 0.0)
        _COMPILED[key] = jax.jit(lambda p, i, m, s: model.apply({"params": p}, i, m, s))
    ids, segs = encode_inputs(tokenizer, texts, pairs, max_length)
    out = run_batched(_COMPILED[key], jax.device_put(params), ids, segs, max_length, batch_size)
    return out.reshape(len(texts), num_labels).astype(np.float32)
