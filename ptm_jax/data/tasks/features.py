"""Sentence / sentence-pair inputs for BERT finetuning (google-research/bert run_classifier.py).

``[CLS] a [SEP]`` or ``[CLS] a [SEP] b [SEP]`` with segment ids 0 then 1; a pair is truncated by popping
tokens from the end of the longer segment (the second on ties) until it fits.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ptm_jax.errors import ConfigError


def truncate_pair(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
    """Lengths after popping tokens from the longer segment (the second on ties) until a + b <= budget."""
    excess = len_a + len_b - budget
    if excess <= 0:
        return len_a, len_b
    if len_a > len_b and excess <= len_a - len_b:
        return len_a - excess, len_b
    if len_b >= len_a and excess <= len_b - len_a:
        return len_a, len_b - excess
    return (budget + 1) // 2, budget // 2


def encode_inputs(tokenizer, texts: Sequence[str], pairs: Sequence[str] | None, max_length: int
                  ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Token ids with [CLS]/[SEP] and segment ids per example, truncated to ``max_length``."""
    if max_length < 3 + (pairs is not None):
        raise ConfigError(f"--max-length={max_length} is too short")
    a_ids = tokenizer.encode_batch(list(texts))
    b_ids = tokenizer.encode_batch(list(pairs)) if pairs is not None else None
    cls, sep = np.array([tokenizer.cls_id], np.int32), np.array([tokenizer.sep_id], np.int32)
    ids, segs = [], []
    for i, a in enumerate(a_ids):
        if b_ids is None:
            x = np.concatenate([cls, np.asarray(a[: max_length - 2], np.int32), sep])
            ids.append(x)
            segs.append(np.zeros(len(x), np.int32))
            continue
        la, lb = truncate_pair(len(a), len(b_ids[i]), max_length - 3)
        first = np.concatenate([cls, np.asarray(a[:la], np.int32), sep])
        second = np.concatenate([np.asarray(b_ids[i][:lb], np.int32), sep])
        ids.append(np.concatenate([first, second]))
        segs.append(np.concatenate([np.zeros(len(first), np.int32), np.ones(len(second), np.int32)]))
    return ids, segs


def pad_rows(rows: list[np.ndarray], length: int, value: int = 0) -> np.ndarray:
    out = np.full((len(rows), length), value, np.int32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r[:length]
    return out
