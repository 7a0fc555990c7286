"""GPT's task-specific input transformations (Radford et al. 2018, Sec. 3.3 and Figure 1).

Every task becomes one or more token sequences for the same left-to-right model:

- classification: ``[s] x [e]``
- entailment: ``[s] premise $ hypothesis [e]``
- similarity: both orders ``[s] a $ b [e]`` and ``[s] b $ a [e]``; their final states are summed
- multiple choice: ``[s] context $ answer_k [e]`` for each answer k; softmax over the answers

``[s]``, ``$`` and ``[e]`` are the tokenizer's start, delimiter and extract tokens (``ByteBPETokenizer``
has ``<|start|>``, ``<|delim|>``, ``<|extract|>``; other vocabularies fall back to [CLS] / [SEP]). The
classifier reads the hidden state at ``[e]``, the last real token of each view. Rows are right-padded;
segment id 1 marks real tokens and 0 padding, so the causal mask of the packed-row model also hides padding.
"""
from __future__ import annotations

from typing import Literal, Sequence

import numpy as np

from ptm_jax.data.tasks.features import truncate_pair
from ptm_jax.errors import ConfigError

Mode = Literal["classification", "entailment", "similarity"]
SIMILARITY_TASKS = ("stsb", "mrpc", "qqp")
"""The GPT paper's semantic-similarity tasks (Sec. 4.2); other pair tasks use the entailment transform."""


def transform_for(task: str, is_pair: bool) -> Mode:
    if not is_pair:
        return "classification"
    return "similarity" if task in SIMILARITY_TASKS else "entailment"


def special_tokens(tokenizer) -> tuple[int, int, int]:
    start = getattr(tokenizer, "start_id", None)
    delim = getattr(tokenizer, "delim_id", None)
    extract = getattr(tokenizer, "extract_id", None)
    return (tokenizer.cls_id if start is None else start, tokenizer.sep_id if delim is None else delim,
            tokenizer.sep_id if extract is None else extract)


def _row(start: int, delim: int, extract: int, a: Sequence[int], b: Sequence[int] | None, max_len: int
         ) -> np.ndarray:
    if b is None:
        return np.asarray([start, *a[: max_len - 2], extract], np.int32)
    la, lb = truncate_pair(len(a), len(b), max_len - 3)
    return np.asarray([start, *a[:la], delim, *b[:lb], extract], np.int32)


def gpt_features(tokenizer, texts: Sequence[str], pairs: Sequence[str] | None, max_len: int, mode: Mode
                 ) -> dict[str, np.ndarray]:
    """-> input_ids / segment_ids / position_ids [N, V, L], extract_index [N, V], lm_targets and lm_weights
    [N, V, L] (next token within the row; the auxiliary LM loss of Sec. 3.2). V = 2 for similarity, else 1."""
    if max_len < 3 + (pairs is not None):
        raise ConfigError(f"finetune.max_seq_length={max_len} is too short for the GPT input transformation")
    if mode != "classification" and pairs is None:
        raise ConfigError(f"the {mode} transform needs sentence pairs")
    start, delim, extract = special_tokens(tokenizer)
    a_ids = tokenizer.encode_batch(list(texts))
    b_ids = tokenizer.encode_batch(list(pairs)) if pairs is not None else [None] * len(a_ids)
    views = 2 if mode == "similarity" else 1
    n = len(a_ids)
    ids = np.zeros((n, views, max_len), np.int32)
    seg = np.zeros((n, views, max_len), np.int32)
    ext = np.zeros((n, views), np.int32)
    for i, (a, b) in enumerate(zip(a_ids, b_ids)):
        orders = [(a, b), (b, a)] if views == 2 else [(a, b)]
        for v, (x, y) in enumerate(orders):
            row = _row(start, delim, extract, x, y, max_len)
            ids[i, v, : len(row)] = row
            seg[i, v, : len(row)] = 1
            ext[i, v] = len(row) - 1
    pos = np.broadcast_to(np.arange(max_len, dtype=np.int32), ids.shape).copy()
    targets = np.zeros_like(ids)
    targets[..., :-1] = ids[..., 1:]
    weights = (seg[..., 1:] > 0).astype(np.float32)  # predict every real token after the first
    lm_w = np.zeros(ids.shape, np.float32)
    lm_w[..., :-1] = weights
    return {"input_ids": ids, "segment_ids": seg, "position_ids": pos, "extract_index": ext,
            "lm_targets": targets, "lm_weights": lm_w}
