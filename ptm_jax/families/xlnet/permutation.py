"""XLNet prediction targets and factorization orders, in numpy (XLNet paper sec. 2.3 and appendix A.2).

Facts taken from zihangdai/xlnet data_utils.py (``_sample_mask``, ``_local_perm``, ``get_dataset``):

* A sample is split in two parts scored separately: the reuse part ``[0, reuse_len)`` and the rest. The reuse
  part gets ``ceil(P * reuse_len / L)`` of the P targets (the reference: ``P - P // 2`` with reuse_len = L/2),
  the rest the remainder.
* Span sampling over one part, left to right: draw an n-gram length n in 1..max_span with p(n) proportional to
  1/n (capped by what is left of the budget), a context of ``floor(n * alpha / beta)`` positions split at a
  uniform point into left and right context; the span starts at the first word-initial piece at or after
  ``cursor + left``, and the cursor moves to ``span end + right``. Stops when the budget is met or no word
  start is left. The shortfall is filled with uniformly chosen single positions.
  Differences, on purpose: (1) a span here is n *whole words* (a word-initial piece and the continuation pieces
  after it). The reference's comment says so too, but its inner loop tests the span's first piece instead of
  the current one, so it takes n pieces; (2) a span never holds a special token and whole words that would
  overflow the budget are not taken (the first word alone too long: the span is skipped); (3) specials
  ([SEP], [CLS], [PAD], [MASK]) are never targets, so every sample has exactly P targets (the reference may
  pick [SEP]/[CLS] and then drops them, padding the target list).
* Reversed (bi_data) samples: the part is flipped before sampling and the mask flipped back, so spans follow
  the forward text's words.
* Factorization order: within blocks of ``perm_size`` consecutive positions of each part, a uniformly random
  order; block b of a part precedes block b+1 and the reuse part precedes the rest (ranks are global). Tokens
  that are neither targets nor [SEP]/[CLS] get rank -1. ``perm_mask[i, j] = 1`` (i may not attend to j) iff
  j is a target or [SEP]/[CLS] and ``rank_i + (0 if i is a target else 1) <= rank_j``: so a target never
  sees itself (query stream), [SEP]/[CLS] and plain tokens see themselves. Reuse-part rows may not attend to
  any position of the rest. The reference draws one shuffle shared by all blocks of a part (it shuffles the
  rows of the transposed ``[perm_size, blocks]`` index); each block here draws its own, same law per block.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from functools import lru_cache

import numpy as np

SPAN_DRAWS_PER_POSITION = 2
"""Uniforms reserved per position of a part for span sampling (n-gram length, left context)."""


def part_budgets(seq_len: int, reuse_len: int, num_predict: int) -> tuple[int, int]:
    """(targets in the reuse part, targets in the rest): ``ceil(P * reuse_len / L)`` and the remainder."""
    first = -(-num_predict * reuse_len // seq_len) if reuse_len else 0
    return first, num_predict - first


@lru_cache(maxsize=16)
def _span_cdf(max_span: int) -> tuple[float, ...]:
    p = 1.0 / np.arange(1, max_span + 1)
    return tuple(np.cumsum(p / p.sum())[:-1].tolist())


def sample_spans(candidate: np.ndarray, continuation: np.ndarray, goal: int, span_draws: np.ndarray,
                 fill_keys: np.ndarray, *, max_span: int, mask_alpha: float,
                 mask_beta: float) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Targets of one part, in reading order: (bool mask [n], spans as ``(begin, end)`` half-open).

    ``candidate[i]``: position i may be a target (not a special). ``continuation[i]``: its token continues the
    previous word. ``span_draws``: at least ``2 * n`` uniforms (two per span attempt; attempts <= n since the
    cursor always advances). ``fill_keys``: n uniforms ranking the positions for the single-token shortfall.
    Exactly ``min(goal, candidate.sum())`` positions are returned.
    """
    n = candidate.shape[0]
    mask = np.zeros(n, dtype=bool)
    joins = candidate & continuation
    word_start = np.flatnonzero(candidate & ~joins)
    # A word runs from its start up to the next position that does not continue it.
    breaker = np.where(joins, n, np.arange(n))
    next_break = np.append(np.minimum.accumulate(breaker[::-1])[::-1], n)
    word_end = next_break[np.minimum(word_start + 1, n)]
    starts, ends = word_start.tolist(), word_end.tolist()
    cdf = _span_cdf(max_span)
    ratio = mask_alpha / mask_beta
    spans: list[tuple[int, int]] = []
    cursor = num = t = 0
    while num < goal and cursor < n:
        grams = min(bisect_right(cdf, float(span_draws[t])) + 1, goal - num)
        context = int(grams * ratio)
        left = int(float(span_draws[t + 1]) * context)
        t += SPAN_DRAWS_PER_POSITION
        w = bisect_left(starts, cursor + left)
        if w == len(starts):
            break
        begin, end = starts[w], ends[w]
        room = goal - num
        if end - begin <= room:
            taken = 1
            while (taken < grams and w + taken < len(starts) and starts[w + taken] == end
                   and ends[w + taken] - begin <= room):
                end = ends[w + taken]
                taken += 1
            mask[begin:end] = True
            num += end - begin
            spans.append((begin, end))
        cursor = end + (context - left)
    if num < goal:
        free = np.flatnonzero(candidate & ~mask)
        if free.size:
            need = min(goal - num, free.size)
            mask[free[np.argsort(fill_keys[free], kind="stable")[:need]]] = True
    return mask, spans


def factorization_ranks(keys: np.ndarray, reuse_len: int, perm_size: int) -> np.ndarray:
    """int32 [B, L] rank of every position in its sample's factorization order.

    ``keys`` [B, L] uniforms in [0, 1). Blocks: ``perm_size`` consecutive positions within the reuse part and
    within the rest (0: each part is one block). Positions of block b come before block b+1, in key order.
    """
    length = keys.shape[1]
    pos = np.arange(length)
    if perm_size <= 0:
        block = (pos >= reuse_len).astype(np.int64)
    else:
        first_blocks = -(-reuse_len // perm_size)
        block = np.where(pos < reuse_len, pos // perm_size, first_blocks + (pos - reuse_len) // perm_size)
    order = np.argsort(block[None, :] + keys, axis=1, kind="stable")
    ranks = np.empty(keys.shape, dtype=np.int32)
    np.put_along_axis(ranks, order, np.broadcast_to(np.arange(length, dtype=np.int32), keys.shape), axis=1)
    return ranks


def attention_ranks(ranks: np.ndarray, is_target: np.ndarray,
                    is_func: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(column rank, row threshold), int32 [B, L]: ``perm_mask[i, j] = threshold_i <= rank_j`` (+ reuse block).

    Plain tokens get rank -1, below every threshold (>= 0), so every row sees them; a row's threshold is its
    rank, plus one unless it is a target (specials and plain tokens see themselves, targets do not).
    """
    rank = np.where(is_target | is_func, ranks, -1).astype(np.int32)
    return rank, rank + (~is_target).astype(np.int32)


def perm_mask(rank: np.ndarray, threshold: np.ndarray, reuse_len: int) -> np.ndarray:
    """float32 [B, L, L] from ``attention_ranks``: 1 where row i may not attend to column j."""
    mask = np.empty(rank.shape + rank.shape[-1:], dtype=np.float32)
    np.less_equal(threshold[:, :, None], rank[:, None, :], out=mask, casting="unsafe")
    if reuse_len:
        mask[:, :reuse_len, reuse_len:] = 1.0
    return mask


def target_features(ids: np.ndarray, is_target: np.ndarray, num_predict: int) -> dict[str, np.ndarray]:
    """Targets in ascending position order, padded to ``num_predict`` (weight 0, position 0, id 0)."""
    first = np.argsort(~is_target, axis=1, kind="stable")[:, :num_predict]
    valid = np.arange(num_predict)[None, :] < is_target.sum(axis=1, keepdims=True)
    positions = np.where(valid, first, 0).astype(np.int32)
    return {
        "target_positions": positions,
        "target_ids": np.where(valid, np.take_along_axis(ids, positions, axis=1), 0).astype(np.int32),
        "target_weights": valid.astype(np.float32),
    }


def target_mapping(positions: np.ndarray, weights: np.ndarray, length: int) -> np.ndarray:
    """float32 [B, P, L] one-hot rows of the target positions (all-zero rows for padding)."""
    mapping = np.empty(positions.shape + (length,), dtype=np.float32)
    np.equal(np.where(weights > 0, positions, -1)[:, :, None], np.arange(length)[None, None, :], out=mapping,
             casting="unsafe")
    return mapping
