"""word2vec's sampling rules as pure numpy over a word vocabulary's counts (Mikolov et al. 2013, "Distributed
Representations of Words and Phrases and their Compositionality", Sec. 2.2-2.3; word2vec.c ``TrainModelThread``,
``InitUnigramTable``, ``CreateBinaryTree``), and the stateless draws they are made with.

* Subsampling of frequent words: word2vec.c keeps an occurrence of a word of count c out of T training words
  with probability ``(sqrt(c / (s T)) + 1) * (s T) / c`` (s = ``sample``; >= 1 means always kept). T is the sum
  of the counts of the vocabulary's words (word2vec.c's ``train_words``: the words it trains on, OOV excluded).
* Negatives: drawn from the unigram distribution raised to 0.75. word2vec.c fills a 1e8-entry table with word
  ids in proportion to count^0.75 and indexes it; here the draw is exact: inverse CDF of count^0.75 / Z
  (``np.searchsorted`` on the cumulative sum), so no table rounding.
* Hierarchical softmax: a Huffman tree over the counts (word2vec.c's ``CreateBinaryTree``): each word's path
  is the inner nodes from the root down (``points``) and the branch bit taken at each (``codes``); at a merge the
  node with the larger count (the second one taken) gets bit 1, as in word2vec.c.

Specials (``<pad>``, ``<unk>``, ``<eos>``) never take part: their keep probability and negative mass are 0 and
they have no Huffman code. word2vec.c skips out-of-vocabulary words the same way (``if (word == -1) continue``).

Draws are keyed on (seed, purpose, index) through the splitmix64 finaliser (Steele, Lea and Flood 2014), a
counter-based generator: the same index always gives the same number, whatever the process, host count or
the order in which batches are built, so a run resumed at any step draws exactly what it would have.
"""
from __future__ import annotations

import heapq

import numpy as np

from ptm_jax.errors import DataError

SUBSAMPLE, WINDOW, NEGATIVE = 1, 2, 3
"""Purposes of the draws (a separate stream each)."""

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def uniforms(seed: int, purpose: int, index: np.ndarray) -> np.ndarray:
    """float64 uniforms in [0, 1), one per entry of the non-negative integer array ``index``."""
    with np.errstate(over="ignore"):
        key = _mix(np.uint64(seed) * _GOLDEN + np.uint64(purpose))
        x = _mix(np.asarray(index).astype(np.uint64) * _GOLDEN + key)
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def word_counts(counts: np.ndarray, special_ids) -> np.ndarray:
    """float64 counts with the specials zeroed (they are never trained on)."""
    out = np.asarray(counts, dtype=np.float64).copy()
    out[list(special_ids)] = 0.0
    if out.sum() <= 0:
        raise DataError("the word vocabulary has no word with a positive count: word2vec has nothing to train "
                        "on; check data.corpus and tokenizer.min_count")
    return out


def keep_probability(counts: np.ndarray, sample: float) -> np.ndarray:
    """word2vec.c's probability of keeping one occurrence of each word (1 where ``sample`` <= 0, 0 for words of
    count 0), from ``word_counts``."""
    counts = np.asarray(counts, dtype=np.float64)
    if sample <= 0:
        return (counts > 0).astype(np.float64)
    st = sample * counts.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        p = (np.sqrt(counts / st) + 1.0) * st / counts
    return np.where(counts > 0, np.minimum(p, 1.0), 0.0)


def unigram_cdf(counts: np.ndarray, power: float = 0.75) -> np.ndarray:
    """Cumulative count^power / Z (float64, last entry 1): the negative-sampling distribution."""
    w = np.asarray(counts, dtype=np.float64) ** power
    cdf = np.cumsum(w)
    return cdf / cdf[-1]


GUIDE_BUCKETS = 1 << 16
"""Buckets of the guide table that starts each inverse-CDF search near its answer (``draw_negatives``)."""

_guides: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def guide_table(cdf: np.ndarray) -> np.ndarray:
    """For bucket b of [0, 1) the first id whose cumulative probability exceeds b / ``GUIDE_BUCKETS`` (cached per
    ``cdf`` array)."""
    key = id(cdf)
    hit = _guides.get(key)
    if hit is None or hit[0] is not cdf:
        guide = np.searchsorted(cdf, np.arange(GUIDE_BUCKETS) / GUIDE_BUCKETS, side="right").astype(np.int32)
        hit = _guides[key] = (cdf, np.minimum(guide, cdf.shape[0] - 1))
    return hit[1]


def draw_negatives(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    """int32 word ids for uniforms ``u``: inverse CDF, the first id whose cumulative probability exceeds u (exact,
    the same as ``np.searchsorted(cdf, u, side='right')``; zero-probability ids are never drawn). A guide table
    (Chen and Asau 1974) starts each search at the first id of u's bucket, a step or two from the answer, instead
    of a binary search of the whole vocabulary (the examples' largest cost before)."""
    last = cdf.shape[0] - 1
    flat = np.asarray(u, np.float64).reshape(-1)
    idx = guide_table(cdf)[np.minimum((flat * GUIDE_BUCKETS).astype(np.int64), GUIDE_BUCKETS - 1)]
    todo = np.flatnonzero((cdf[idx] <= flat) & (idx < last))
    while todo.size:
        idx[todo] += 1
        todo = todo[(cdf[idx[todo]] <= flat[todo]) & (idx[todo] < last)]
    return idx.reshape(np.shape(u)).astype(np.int32)


def huffman(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Huffman tree of the words with a positive count: (points int32 [V, D], codes int8 [V, D], lengths int32
    [V]), D the deepest code. Row w holds w's inner nodes from the root down (ids 0 .. n-2, the root n-2) and the
    bit taken at each; words of count 0 have length 0. Ties merge the lower (count, id) first."""
    counts = np.asarray(counts)
    words = np.flatnonzero(counts > 0)
    n, v = words.size, counts.shape[0]
    lengths = np.zeros(v, np.int32)
    if n < 2:
        return np.zeros((v, 1), np.int32), np.zeros((v, 1), np.int8), lengths
    parent = np.zeros(2 * n - 1, np.int64)
    bit = np.zeros(2 * n - 1, np.int8)
    heap = [(int(counts[w]), i, i) for i, w in enumerate(words)]  # (count, tie order, node)
    heapq.heapify(heap)
    for inner in range(n - 1):
        c1, _, a = heapq.heappop(heap)
        c2, _, b = heapq.heappop(heap)
        node = n + inner
        parent[a] = parent[b] = node
        bit[b] = 1
        heapq.heappush(heap, (c1 + c2, node, node))
    root = 2 * n - 2
    # walk every leaf up to the root at once, one level a round (no Python loop over the words)
    up_points, up_codes = [], []
    depth = np.zeros(n, np.int32)
    cur = np.arange(n)
    alive = np.ones(n, bool)
    while alive.any():
        up_points.append(np.where(alive, parent[cur] - n, 0).astype(np.int32))
        up_codes.append(np.where(alive, bit[cur], 0).astype(np.int8))
        depth += alive
        cur = np.where(alive, parent[cur], root)
        alive = cur != root
    up_p, up_c = np.stack(up_points, axis=1), np.stack(up_codes, axis=1)     # leaf first
    d_max = up_p.shape[1]
    back = depth[:, None] - 1 - np.arange(d_max)[None, :]                     # root first
    ok = back >= 0
    back = np.maximum(back, 0)
    points = np.zeros((v, d_max), np.int32)
    codes = np.zeros((v, d_max), np.int8)
    points[words] = np.where(ok, np.take_along_axis(up_p, back, axis=1), 0)
    codes[words] = np.where(ok, np.take_along_axis(up_c, back, axis=1), 0)
    lengths[words] = depth
    return points, codes, lengths
