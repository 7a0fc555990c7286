"""Batched BERT masking and pair truncation (google-research/bert create_pretraining_data.py semantics)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from ptm_jax.data.pretraining import masking
from ptm_jax.data.pretraining.source import SpecialIds

PAD, CLS, SEP, MASK = 0, 1, 2, 3


def reference_pops(la: int, lb: int, max_num_tokens: int) -> tuple[int, int]:
    """Pops per side of the reference truncate_seq_pair loop (longer side, tie -> B), on lengths only."""
    pa = pb = 0
    while la + lb > max_num_tokens:
        if la > lb:
            la, pa = la - 1, pa + 1
        else:
            lb, pb = lb - 1, pb + 1
    return pa, pb


def test_truncation_pops_match_reference_loop_on_all_small_pairs():
    la, lb = np.meshgrid(np.arange(1, 70), np.arange(1, 70), indexing="ij")
    la, lb = la.ravel().astype(np.int32), lb.ravel().astype(np.int32)
    for m in (5, 29, 61, 125):
        pa, pb = masking.truncation_pops(tf.constant(la), tf.constant(lb), m)
        expected = np.array([reference_pops(a, b, m) for a, b in zip(la.tolist(), lb.tolist())])
        np.testing.assert_array_equal(pa.numpy(), expected[:, 0])
        np.testing.assert_array_equal(pb.numpy(), expected[:, 1])
        assert np.all(la - pa.numpy() + lb - pb.numpy() <= m)


def test_truncation_truncates_longer_side_first_with_exact_counts():
    pa, pb = masking.truncation_pops(tf.constant([100, 60, 10, 40, 3]), tf.constant([10, 50, 100, 40, 2]), 50)
    # 100/10 -> A loses 60; 60/50 -> A loses 10 to tie, then B,A,B,... share 50: A 35, B 25; tie 40/40 -> B first.
    assert pa.numpy().tolist() == [60, 35, 0, 15, 0]
    assert pb.numpy().tolist() == [0, 25, 60, 15, 0]


def test_truncate_seq_pair_front_back_split_is_half_and_kept_slices_are_inside():
    n = 4000
    rng = np.random.default_rng(0)
    la = rng.integers(1, 160, n).astype(np.int32)
    lb = rng.integers(1, 160, n).astype(np.int32)
    truncate = tf.function(lambda la, lb, index: masking.truncate_seq_pair(la, lb, 125, seed=7, index=index))
    start_a, kept_a, start_b, kept_b = [t.numpy() for t in truncate(la, lb, tf.range(n, dtype=tf.int64))]
    assert np.all(kept_a + kept_b <= 125) and np.all(kept_a >= 1) and np.all(kept_b >= 1)
    pops_a, pops_b = la - kept_a, lb - kept_b
    assert pops_a.sum() + pops_b.sum() > 150_000
    many = (pops_a > 64) | (pops_b > 64)  # these rows take the binomial path, the others count coin bits
    assert 500 < many.sum() < 3000
    for rows in (many, ~many):
        front = start_a[rows].sum() + start_b[rows].sum()
        assert abs(front / (pops_a[rows].sum() + pops_b[rows].sum()) - 0.5) < 0.01
    assert np.all((start_a >= 0) & (start_a + kept_a <= la) & (start_b >= 0) & (start_b + kept_b <= lb))
    # Each example's draws depend on its index only: a batch starting later reproduces the same rows.
    tail = truncate(la[1500:], lb[1500:], tf.range(1500, n, dtype=tf.int64))
    np.testing.assert_array_equal(tail[0].numpy(), start_a[1500:])
    np.testing.assert_array_equal(tail[2].numpy(), start_b[1500:])
    other = truncate(la, lb, tf.range(n, 2 * n, dtype=tf.int64))[0].numpy()
    assert (other != start_a)[pops_a >= 4].mean() > 0.6


def test_mask_uniforms_are_uniform_and_keyed_by_index():
    u = masking.mask_uniforms(3, tf.range(100, 356, dtype=tf.int64), 128).numpy()
    assert u.shape == (256, 3, 128) and u.min() >= 0 and u.max() < 1
    np.testing.assert_allclose(u.mean(axis=(0, 2)), 0.5, atol=0.005)
    np.testing.assert_allclose((u < 0.8).mean(axis=(0, 2)), 0.8, atol=0.005)
    np.testing.assert_array_equal(masking.mask_uniforms(3, tf.range(200, 210, dtype=tf.int64), 128).numpy(),
                                  u[100:110])
    # any order (a TPU host's rows): each example keeps its own draws
    scattered = np.array([300, 101, 102, 250, 355, 100])
    np.testing.assert_array_equal(masking.mask_uniforms(3, tf.constant(scattered), 128).numpy(), u[scattered - 100])


def test_philox_words_are_tensorflows_philox_kernel_words_bit_for_bit():
    # the reference: TensorFlow's stateless Philox kernel drawing one run of consecutive examples from counter
    # (first * words / 4, stream); seeds above 2^32 and indices near the stream's limit (2^40) included
    for seed in (0, 12345, (1 << 40) + 77):
        for words, stream in ((4, masking.TRUNCATION_STREAM), (512, masking.MASK_STREAM)):
            first, n = (1 << 40) - 9, 6
            want = tf.raw_ops.StatelessRandomUniformFullIntV2(
                shape=[n, words], key=tf.constant([seed], tf.uint64), alg=1, dtype=tf.uint32,
                counter=tf.constant([first * (words // 4), stream], tf.uint64)).numpy()
            got = masking.philox_words(seed, tf.constant(np.arange(first, first + n)), words, stream).numpy()
            assert got.dtype == np.uint32 and got.shape == (n, words)
            np.testing.assert_array_equal(got, want)
            reordered = masking.philox_words(seed, tf.constant(np.arange(first, first + n)[::-1].copy()), words,
                                             stream).numpy()
            np.testing.assert_array_equal(reordered, want[::-1])


def test_num_to_predict_uses_python3_round_half_even_and_cap():
    n = np.arange(5, 513)
    got = masking.num_to_predict(tf.constant(n, tf.int32), 0.15, 76).numpy()
    expected = [min(76, max(1, int(round(k * 0.15)))) for k in n.tolist()]
    np.testing.assert_array_equal(got, expected)
    assert got[n == 10][0] == 2 and got[n == 30][0] == 4 and got[n == 50][0] == 8 and got[n == 5][0] == 1
    assert masking.num_to_predict(tf.constant([128]), 0.15, 20).numpy()[0] == 19
    assert masking.num_to_predict(tf.constant([512]), 0.15, 20).numpy()[0] == 20


def _layout(rng: np.random.Generator, batch: int, length: int, vocab: int):
    """Random [CLS] A [SEP] B [SEP] pad batches: ids, seq_len, first_sep."""
    seq_len = rng.integers(5, length + 1, batch)
    first_sep = np.array([rng.integers(2, s - 2) for s in seq_len])
    ids = rng.integers(4, vocab, (batch, length)).astype(np.int32)
    pos = np.arange(length)[None]
    ids[pos >= seq_len[:, None]] = PAD
    ids[:, 0] = CLS
    ids[pos == first_sep[:, None]] = SEP
    ids[pos == seq_len[:, None] - 1] = SEP
    return ids, seq_len.astype(np.int32), first_sep.astype(np.int32)


def test_mask_tokens_takes_exactly_budget_candidates_sorted_with_original_labels():
    rng = np.random.default_rng(1)
    ids, seq_len, first_sep = _layout(rng, 300, 64, 50_000)
    special = SpecialIds(PAD, CLS, SEP, MASK, 50_000)
    u = rng.random((300, 3, 64))
    out = {k: v.numpy() for k, v in masking.mask_tokens(
        tf.constant(ids), tf.constant(seq_len), tf.constant(first_sep), tf.constant(u), special,
        masked_lm_prob=0.15, max_predictions=8).items()}
    budget = np.minimum(8, np.maximum(1, np.round(seq_len * 0.15))).astype(int)
    w = out["masked_lm_weights"]
    np.testing.assert_array_equal(w.sum(1), budget)
    for i in range(300):
        p = out["masked_lm_positions"][i, :budget[i]]
        assert np.all(np.diff(p) > 0) and np.all(out["masked_lm_positions"][i, budget[i]:] == 0)
        assert not np.isin(p, [0, first_sep[i], seq_len[i] - 1]).any() and np.all(p < seq_len[i])
        np.testing.assert_array_equal(out["masked_lm_ids"][i, :budget[i]], ids[i, p])
        # The chosen positions are the `budget` smallest keys among candidates.
        cand = np.setdiff1d(np.arange(1, seq_len[i] - 1), [first_sep[i]])
        np.testing.assert_array_equal(np.sort(cand[np.argsort(u[i, 0, cand], kind="stable")[:budget[i]]]), p)
        untouched = np.setdiff1d(np.arange(64), p)
        np.testing.assert_array_equal(out["input_ids"][i, untouched], ids[i, untouched])
        choice = u[i, 1, p]
        np.testing.assert_array_equal(out["input_ids"][i, p][choice < 0.8], MASK)
        np.testing.assert_array_equal(out["input_ids"][i, p][(choice >= 0.8) & (choice < 0.9)],
                                      ids[i, p][(choice >= 0.8) & (choice < 0.9)])
        np.testing.assert_array_equal(out["input_ids"][i, p][choice >= 0.9],
                                      np.floor(u[i, 2, p][choice >= 0.9] * 50_000).astype(int))


def reference_whole_words(ids, seq_len, first_sep, cont, keys, budget):
    """The reference's greedy whole-word choice for one example, with its shuffle replaced by sorting on keys."""
    words: list[list[int]] = []
    for i in range(seq_len):
        if i == 0 or i == first_sep or i == seq_len - 1:
            continue
        if words and cont[ids[i]]:
            words[-1].append(i)
        else:
            words.append([i])
    words.sort(key=lambda w: keys[w[0]])
    chosen: list[int] = []
    for w in words:
        if len(chosen) >= budget:
            break
        if len(chosen) + len(w) > budget:
            continue
        chosen.extend(w)
    return sorted(chosen)


@pytest.mark.parametrize("max_predictions", [5, 20])
def test_whole_word_selection_equals_reference_greedy_and_masks_whole_words(max_predictions):
    rng = np.random.default_rng(2)
    vocab = 1000
    cont = rng.random(vocab) < 0.4
    cont[:4] = False
    special = SpecialIds(PAD, CLS, SEP, MASK, vocab, continuation=cont)
    ids, seq_len, first_sep = _layout(rng, 200, 96, vocab)
    u = rng.random((200, 3, 96))
    out = masking.mask_tokens(tf.constant(ids), tf.constant(seq_len), tf.constant(first_sep), tf.constant(u),
                              special, masked_lm_prob=0.15, max_predictions=max_predictions, whole_word=True)
    positions, weights = out["masked_lm_positions"].numpy(), out["masked_lm_weights"].numpy()
    budget = out["num_to_predict"].numpy()
    skipped_short = 0
    for i in range(200):
        got = positions[i, :int(weights[i].sum())].tolist()
        expected = reference_whole_words(ids[i], seq_len[i], first_sep[i], cont, u[i, 0], budget[i])
        assert got == expected
        assert len(got) <= budget[i]
        skipped_short += len(got) < budget[i]
    assert skipped_short > 0  # some examples could not fill the budget exactly (a long word was skipped)
