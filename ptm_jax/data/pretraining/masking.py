"""Masked-LM predictions and sequence-pair truncation as batched TensorFlow ops (run inside tf.data).

Follows ``create_masked_lm_predictions`` and ``truncate_seq_pair`` of google-research/bert
create_pretraining_data.py, vectorised over a batch of examples:

* Candidates are all positions except [CLS] and [SEP]; they are visited in a random order.
* ``num_to_predict = min(max_predictions_per_seq, max(1, round(len(tokens) * masked_lm_prob)))`` where the length
  counts [CLS] and both [SEP]. The reference computes ``int(round(x))`` on a Python float; under Python 3 (which
  the reference supports through its ``__future__`` imports and which is how it runs today) ``round`` rounds an
  exact half to even (e.g. 30 tokens * 0.15 = 4.5 -> 4, 10 * 0.15 = 1.5 -> 2). We compute the product in float64
  (bitwise the same as Python's float) and use ``tf.round``, which also rounds half to even.
* Each chosen position independently becomes [MASK] with p=0.8, stays unchanged with p=0.1, or becomes a token
  drawn uniformly from the whole vocabulary [0, vocab_size) with p=0.1. Positions are reported sorted.
* Whole-word mode: a continuation piece joins the word of the previous *candidate* (the reference skips [CLS]/[SEP]
  before grouping, so a continuation piece right after the first [SEP] joins A's last word; reproduced). Words are
  visited in random order; a word that would overflow the budget is skipped and scanning continues.
* Pair truncation: while len(A)+len(B) > max_num_tokens, pop from the longer (tie: B), from the front or the back
  with p=0.5 each. Which side pops at each step depends only on the lengths, so the per-side pop counts are
  computed in closed form; the number of front pops of a side is then Binomial(pops, 0.5), exactly the law of
  independent fair front/back choices.

Randomness is counter-based Philox from TensorFlow's stateless RNG (``StatelessRandomUniformFullIntV2``, the
kernel behind ``tf.random.stateless_uniform``) with key = seed. Example ``index`` (its position in the global stream,
which also fixes its pass) owns a fixed range of Philox counters, ``[index * W/4, (index + 1) * W/4)`` for W words
per example, computed per example in XLA-compiled integer ops (``philox_words``, bit for bit the kernel's words), so
an example does not depend on which other examples share its batch or host, nor on their order.
Rare pairs needing more than 64 pops on one side draw their front counts with ``tf.random.stateless_binomial``
seeded by ``[seed, index]``.
"""
from __future__ import annotations

import tensorflow as tf

from ptm_jax.data.pretraining.source import SpecialIds
from ptm_jax.errors import ConfigError

MASK_STREAM, TRUNCATION_STREAM = 0, 1
MAX_INDEX = 1 << 40
_COIN_BITS = 64  # fair coins drawn per side for pair truncation; larger pop counts use a binomial draw


_PHILOX_M = (0xD2511F53, 0xCD9E8D57)  # Philox4x32-10 round multipliers and key increments (Salmon et al. 2011,
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)  # "Parallel random numbers: as easy as 1, 2, 3"; TensorFlow's philox_random.h)


def _philox_rounds(index: tf.Tensor, key: tf.Tensor, words: int, stream: int) -> tf.Tensor:
    """Philox4x32-10 of ``key`` (uint64 [2]: its low and high 32 bits) at the 128-bit counters
    (i * words / 4 + j, stream) for each i of ``index``, j < words / 4, as 64-bit integer ops."""
    u64 = tf.uint64
    mask32, shift = tf.constant(0xFFFFFFFF, u64), tf.constant(32, u64)
    blocks = tf.cast(tf.range(words // 4, dtype=tf.int64), u64)
    low = tf.cast(tf.reshape(index, [-1, 1]), u64) * (words // 4) + blocks[None, :]  # counter bits 0-63
    c0, c1 = low & mask32, tf.bitwise.right_shift(low, shift)
    c2 = tf.zeros_like(c0) + tf.constant(stream & 0xFFFFFFFF, u64)                 # counter bits 64-127
    c3 = tf.zeros_like(c0) + tf.constant((stream >> 32) & 0xFFFFFFFF, u64)
    k0, k1 = key[0], key[1]
    m0, m1 = tf.constant(_PHILOX_M[0], u64), tf.constant(_PHILOX_M[1], u64)
    for _ in range(10):
        p0, p1 = c0 * m0, c2 * m1  # 32 x 32 -> 64-bit products: their high and low halves
        c0, c1, c2, c3 = (tf.bitwise.right_shift(p1, shift) ^ c1 ^ k0, p1 & mask32,
                          tf.bitwise.right_shift(p0, shift) ^ c3 ^ k1, p0 & mask32)
        k0, k1 = (k0 + _PHILOX_W[0]) & mask32, (k1 + _PHILOX_W[1]) & mask32
    return tf.reshape(tf.cast(tf.stack([c0, c1, c2, c3], axis=-1), tf.uint32), [-1, words])


# XLA fuses the rounds into one loop over the counters: 1.6 ms of CPU for 512 rows of 512 + 4 words, where
# TensorFlow's kernel took 3.4 ms for one run of consecutive rows plus about 60 us for each further run
# (2-core AMD EPYC, AVX2). One program per (words, stream) and batch shape.
_philox_program = tf.function(_philox_rounds, jit_compile=True, reduce_retracing=False)


def philox_words(seed: int, index: tf.Tensor, words: int, stream: int) -> tf.Tensor:
    """[B, words] uint32: the words owned by examples ``index``, in any order: Philox4x32-10 of key ``seed`` at
    the counters (i * words / 4 + j, stream), j < words / 4, bit for bit the words that TensorFlow's Philox
    kernel (``StatelessRandomUniformFullIntV2``, alg 1) draws for a run of consecutive examples. A local batch
    may hold any rows of its global batches (a TPU host's several blocks, several batches of a process with
    few rows) and each example gets the words it would get alone."""
    if words % 4:
        raise ValueError(f"words per example must be a multiple of 4 (one Philox block), got {words}")
    key = tf.constant([seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF], tf.uint64)
    return _philox_program(tf.cast(index, tf.int64), key, words, stream)


def truncation_pops(len_a: tf.Tensor, len_b: tf.Tensor, max_num_tokens: int) -> tuple[tf.Tensor, tf.Tensor]:
    """Tokens the reference pops from A and from B (longer side first, tie -> B), in closed form.

    Until the lengths are equal only the longer side pops; after that pops alternate B, A, B, ... so B takes
    ceil(rest/2) and A floor(rest/2).
    """
    excess = tf.maximum(len_a + len_b - max_num_tokens, 0)
    gap = tf.abs(len_a - len_b)
    first = tf.minimum(excess, gap)
    rest = excess - first
    a_longer = len_a > len_b
    pops_a = tf.where(a_longer, first, 0) + rest // 2
    pops_b = tf.where(a_longer, 0, first) + (rest + 1) // 2
    return pops_a, pops_b


def _low_bits(n: tf.Tensor) -> tf.Tensor:
    """uint32 masks with the low ``n`` bits set, n in [0, 32]."""
    n = tf.cast(tf.clip_by_value(n, 0, 32), tf.uint64)
    return tf.cast(tf.bitwise.left_shift(tf.constant(1, tf.uint64), n) - 1, tf.uint32)


def _popcount(x: tf.Tensor) -> tf.Tensor:
    return tf.cast(tf.raw_ops.PopulationCount(x=x), tf.int32)


def truncation_fronts(seed: int, index: tf.Tensor, pops_a: tf.Tensor,
                      pops_b: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Front pops of A and B: for each side, how many of its ``pops`` fair front/back coins said "front"."""
    coins = philox_words(seed, index, 4, TRUNCATION_STREAM)
    pops_a, pops_b = tf.cast(pops_a, tf.int32), tf.cast(pops_b, tf.int32)

    def heads(lo: tf.Tensor, hi: tf.Tensor, n: tf.Tensor) -> tf.Tensor:
        return (_popcount(tf.bitwise.bitwise_and(lo, _low_bits(n)))
                + _popcount(tf.bitwise.bitwise_and(hi, _low_bits(n - 32))))

    front_a = heads(coins[:, 0], coins[:, 1], pops_a)
    front_b = heads(coins[:, 2], coins[:, 3], pops_b)
    many = tf.where((pops_a > _COIN_BITS) | (pops_b > _COIN_BITS))[:, 0]

    def draw(args):
        i, counts = args
        seed_pair = tf.stack([tf.constant(seed, tf.int64), i])
        return tf.random.stateless_binomial([2], seed=seed_pair, counts=counts,
                                            probs=tf.constant(0.5, tf.float64), output_dtype=tf.int32)

    counts = tf.cast(tf.stack([tf.gather(pops_a, many), tf.gather(pops_b, many)], axis=1), tf.float64)
    drawn = tf.map_fn(draw, (tf.gather(tf.cast(index, tf.int64), many), counts),
                      fn_output_signature=tf.TensorSpec([2], tf.int32))
    fronts = tf.tensor_scatter_nd_update(tf.stack([front_a, front_b], axis=1), many[:, None], drawn)
    return fronts[:, 0], fronts[:, 1]


def mask_uniforms(seed: int, index: tf.Tensor, length: int) -> tf.Tensor:
    """[B, 3, length] float64 in [0, 1): candidate-order keys (53 bits), 80/10/10 choice and random-token draws."""
    w = tf.cast(philox_words(seed, index, 4 * length, MASK_STREAM), tf.float64)
    key = (w[:, :length] * 2.0 ** 21 + tf.floor(w[:, length:2 * length] / 2.0 ** 11)) / 2.0 ** 53
    return tf.stack([key, w[:, 2 * length:3 * length] / 2.0 ** 32, w[:, 3 * length:] / 2.0 ** 32], axis=1)


def truncate_seq_pair(len_a: tf.Tensor, len_b: tf.Tensor, max_num_tokens: int, *, seed: int,
                      index: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """(start_a, kept_a, start_b, kept_b): the kept slices ``A[start_a:start_a+kept_a]`` and likewise for B.

    ``index`` are the examples' consecutive stream positions; same draws as the pipeline.
    """
    len_a = tf.cast(len_a, tf.int32)
    len_b = tf.cast(len_b, tf.int32)
    pops_a, pops_b = truncation_pops(len_a, len_b, max_num_tokens)
    front_a, front_b = truncation_fronts(seed, index, pops_a, pops_b)
    return front_a, len_a - pops_a, front_b, len_b - pops_b


def num_to_predict(seq_len: tf.Tensor, masked_lm_prob: float, max_predictions: int) -> tf.Tensor:
    """min(max_predictions, max(1, round_half_even(seq_len * masked_lm_prob))) as int32; seq_len counts specials."""
    raw = tf.round(tf.cast(seq_len, tf.float64) * tf.constant(masked_lm_prob, tf.float64))
    return tf.minimum(tf.constant(max_predictions, tf.int32), tf.maximum(1, tf.cast(raw, tf.int32)))


def _smallest(values: tf.Tensor, k: int) -> tf.Tensor:
    """Positions of the ``k`` smallest entries of each row, smallest first (ties: lower position first)."""
    return tf.math.top_k(-values, k=k, sorted=True).indices


def _select_tokens(candidates: tf.Tensor, keys: tf.Tensor, budget: tf.Tensor, max_predictions: int) -> tf.Tensor:
    """The first ``budget`` candidates in random-key order (budget <= max_predictions)."""
    first = _smallest(tf.where(candidates, keys, 2.0), max_predictions)          # [B, P]
    take = tf.range(max_predictions)[None, :] < budget[:, None]
    hit = tf.equal(first[:, :, None], tf.range(tf.shape(keys)[1])[None, None, :]) & take[:, :, None]
    return candidates & tf.reduce_any(hit, axis=1)


def _per_word(values: tf.Tensor, word: tf.Tensor, where: tf.Tensor, reduce) -> tf.Tensor:
    """[B, L] table indexed by word id: ``reduce`` of ``values`` over the positions of each word (where set)."""
    batch, length = tf.shape(values)[0], tf.shape(values)[1]
    segment = tf.where(where, word + tf.range(batch)[:, None] * length, batch * length)
    return tf.reshape(reduce(values, segment, batch * length + 1)[:-1], [batch, length])


def _select_whole_words(candidates: tf.Tensor, continuation: tf.Tensor, keys: tf.Tensor,
                        budget: tf.Tensor) -> tf.Tensor:
    """Greedy scan over words in random order: take a word iff it fits in what is left of the budget."""
    length = tf.shape(candidates)[1]
    pos = tf.range(length)[None, :]
    has_prev = tf.cumsum(tf.cast(candidates, tf.int32), axis=1, exclusive=True) > 0
    starts = candidates & ~(continuation & has_prev)
    word_id = tf.where(candidates, tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1, 0)
    word_len = _per_word(tf.cast(candidates, tf.int32), word_id, candidates, tf.math.unsorted_segment_sum)
    # Visit order: word starts sorted by their random key (non-starts sort last).
    order = tf.argsort(tf.where(starts, keys, 2.0), axis=1, stable=True)
    visit_valid = tf.gather(starts, order, batch_dims=1)
    visit_word = tf.gather(word_id, order, batch_dims=1)
    visit_len = tf.gather(word_len, visit_word, batch_dims=1)
    num_words = tf.reduce_max(tf.reduce_sum(tf.cast(starts, tf.int32), axis=1))

    def cond(t, count, taken):
        return (t < num_words) & tf.reduce_any(count < budget)

    def body(t, count, taken):
        fits = visit_valid[:, t] & (count + visit_len[:, t] <= budget)
        count += tf.where(fits, visit_len[:, t], 0)
        return t + 1, count, taken | (fits[:, None] & tf.equal(pos, t))

    _, _, taken = tf.while_loop(cond, body, (tf.constant(0), tf.zeros_like(budget),
                                             tf.zeros_like(candidates)))
    taken_word = _per_word(tf.cast(taken, tf.int32), visit_word, taken, tf.math.unsorted_segment_max)
    return candidates & (tf.gather(taken_word, word_id, batch_dims=1) > 0)


def mask_tokens(ids: tf.Tensor, seq_len: tf.Tensor, first_sep: tf.Tensor, uniforms: tf.Tensor,
                special: SpecialIds, *, masked_lm_prob: float, max_predictions: int,
                whole_word: bool = False, units: tf.Tensor | None = None,
                candidates: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
    """BERT masking of a batch laid out as ``[CLS] A [SEP] B [SEP] pad...``.

    ids [B, L] int32, seq_len [B] (tokens incl. specials), first_sep [B] (position of the first [SEP]),
    uniforms [B, 3, L] float64 from ``mask_uniforms``. Returns input_ids (masked), masked_lm_positions,
    masked_lm_ids, masked_lm_weights ([B, max_predictions]) and num_to_predict [B].

    ``units`` [B, L] bool (ERNIE knowledge masking, ``families/ernie``): True where a token continues the unit
    of the token before it; units are then selected whole like words (a unit never spans [CLS]/[SEP]).
    ``candidates`` [B, L] bool replaces the maskable positions of the pair layout (rows with more than two
    segments, e.g. dialogue turns: every position but the specials); ``first_sep`` is then unused.
    """
    length = ids.shape[1]
    pos = tf.range(length)[None, :]
    if candidates is None:
        candidates = (pos >= 1) & (pos < seq_len[:, None] - 1) & (pos != first_sep[:, None])
    budget = num_to_predict(seq_len, masked_lm_prob, max_predictions)
    keys, choice, pick = uniforms[:, 0], uniforms[:, 1], uniforms[:, 2]
    if units is not None:
        prev_candidate = tf.pad(candidates[:, :-1], [[0, 0], [1, 0]])
        selected = _select_whole_words(candidates, tf.cast(units, tf.bool) & prev_candidate, keys, budget)
    elif whole_word:
        if special.continuation is None:
            raise ConfigError("whole-word masking needs SpecialIds.continuation (word-continuation flags)")
        cont = tf.gather(tf.constant(special.continuation), ids)
        selected = _select_whole_words(candidates, cont, keys, budget)
    else:
        selected = _select_tokens(candidates, keys, budget, max_predictions)
    random_ids = tf.cast(tf.floor(pick * special.vocab_size), tf.int32)
    replaced = tf.where(choice < 0.8, tf.constant(special.mask, tf.int32),
                        tf.where(choice < 0.9, ids, tf.minimum(random_ids, special.vocab_size - 1)))
    masked_ids = tf.where(selected, replaced, ids)
    count = tf.reduce_sum(tf.cast(selected, tf.int32), axis=1)
    order = _smallest(tf.where(selected, pos, length + pos), max_predictions)
    valid = tf.range(max_predictions)[None, :] < count[:, None]
    positions = tf.where(valid, order, 0)
    return {
        "input_ids": masked_ids,
        "masked_lm_positions": positions,
        "masked_lm_ids": tf.where(valid, tf.gather(ids, order, batch_dims=1), 0),
        "masked_lm_weights": tf.cast(valid, tf.float32),
        "num_to_predict": budget,
    }
