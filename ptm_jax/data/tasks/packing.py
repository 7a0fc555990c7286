"""Packing short finetuning examples into shared rows (Krell et al. 2021, "Efficient Sequence Packing without
Cross-contamination"): each example keeps its own [CLS] ... [SEP] tokens, token types and positions from 0, and
a pack id (1..k in its row, 0 = padding) that confines its attention to itself; the classifier reads each
example's [CLS] at ``cls_positions``. SST-2 sentences average about 13 pieces, so a row of 64 holds about 3.5 of
them instead of one.

Rows are filled first-fit in a seeded random order of the examples: an example goes to the first row with room
for it and fewer than ``max_per_row`` examples, else it opens a row. Every example sits in exactly one row and
the rows mix lengths and labels; the loop then streams the rows in its own per-epoch order.
"""
from __future__ import annotations

import numpy as np

from ptm_jax.errors import ConfigError

PACKED_KEYS = ("input_ids", "input_mask", "segment_ids", "position_ids", "pack_ids", "cls_positions", "labels",
               "weights")


def pack_examples(features: dict[str, np.ndarray], max_per_row: int, seed: int) -> dict[str, np.ndarray]:
    """One-example-per-row features (input_ids/input_mask/segment_ids [N, L], labels/weights [N]) -> packed
    rows: token arrays [R, L] plus cls_positions/labels/weights [R, max_per_row] (weight 0 = empty slot)."""
    if max_per_row < 1:
        raise ConfigError(f"packing.max_examples_per_row must be >= 1, got {max_per_row}")
    ids, mask = features["input_ids"], features["input_mask"]
    n, length = ids.shape
    lengths = mask.sum(axis=1).astype(np.int64)
    order = np.random.default_rng([seed, 0x9ACC]).permutation(n)
    rows: list[list[int]] = []
    room = np.zeros(n, np.int64)   # free tokens of row r (at most n rows)
    slots = np.zeros(n, np.int64)  # examples in row r
    for i in order:
        fits = np.flatnonzero((room[:len(rows)] >= lengths[i]) & (slots[:len(rows)] < max_per_row))
        r = int(fits[0]) if len(fits) else len(rows)
        if r == len(rows):
            rows.append([])
            room[r] = length
        rows[r].append(int(i))
        room[r] -= lengths[i]
        slots[r] += 1
    return _lay_out(features, rows, max_per_row, length, lengths)


def one_per_row(features: dict[str, np.ndarray], max_per_row: int) -> dict[str, np.ndarray]:
    """The packed layout with one example per row (evaluation: predictions stay in example order)."""
    lengths = features["input_mask"].sum(axis=1).astype(np.int64)
    return _lay_out(features, [[i] for i in range(len(lengths))], max_per_row, features["input_ids"].shape[1],
                    lengths)


def _lay_out(features, rows: list[list[int]], k: int, length: int, lengths: np.ndarray) -> dict[str, np.ndarray]:
    r = len(rows)
    out = {"input_ids": np.zeros((r, length), np.int32), "segment_ids": np.zeros((r, length), np.int32),
           "position_ids": np.zeros((r, length), np.int32), "pack_ids": np.zeros((r, length), np.int32),
           "cls_positions": np.zeros((r, k), np.int32),
           "labels": np.zeros((r, k), features["labels"].dtype), "weights": np.zeros((r, k), np.float32)}
    for row, members in enumerate(rows):
        at = 0
        for slot, i in enumerate(members):
            n = int(lengths[i])
            out["input_ids"][row, at:at + n] = features["input_ids"][i, :n]
            out["segment_ids"][row, at:at + n] = features["segment_ids"][i, :n]
            out["position_ids"][row, at:at + n] = np.arange(n)
            out["pack_ids"][row, at:at + n] = slot + 1
            out["cls_positions"][row, slot] = at
            out["labels"][row, slot] = features["labels"][i]
            out["weights"][row, slot] = features["weights"][i]
            at += n
    out["input_mask"] = (out["pack_ids"] > 0).astype(np.int32)
    return {key: out[key] for key in PACKED_KEYS}
