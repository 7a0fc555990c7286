"""The MLM+NSP tf.data pipeline end to end on tiny-shakespeare (rates, layout, determinism, host slicing)."""
from __future__ import annotations

from itertools import islice

import numpy as np
import pytest
import tensorflow as tf

from ptm_jax.families.bert.config import BertDataConfig
from ptm_jax.data.pretraining import masking, nsp
from ptm_jax.data.pretraining.source import ArraySource, SpecialIds, SubsetSource
from ptm_jax.errors import ConfigError, DataError
from ptm_jax.families.bert.mlm_nsp_data import mlm_nsp_dataset

PAD, CLS, SEP, MASK = 0, 1, 2, 3


def piece_source(path):
    """Lines = sentences, blank-line blocks = documents; a word is cut into a 4-char head and 3-char '##' pieces."""
    vocab: dict[str, int] = {"[PAD]": PAD, "[CLS]": CLS, "[SEP]": SEP, "[MASK]": MASK}
    docs, cur = [], []
    for line in path.read_text(encoding="utf-8").split("\n"):
        words = line.lower().split()
        if not words:
            if cur:
                docs.append(cur)
                cur = []
            continue
        pieces = [p for w in words for p in [w[:4]] + ["##" + w[i:i + 3] for i in range(4, len(w), 3)]]
        cur.append(np.array([vocab.setdefault(p, len(vocab)) for p in pieces], np.int32))
    if cur:
        docs.append(cur)
    continuation = np.array([k.startswith("##") for k in vocab])
    return ArraySource(docs), SpecialIds(PAD, CLS, SEP, MASK, len(vocab), continuation=continuation)


@pytest.fixture(scope="module")
def corpus(shared_data):
    return piece_source(shared_data / "corpus/tinyshakespeare/input.txt")


def take(ds: tf.data.Dataset, n: int) -> list[dict[str, np.ndarray]]:
    return list(islice(ds.as_numpy_iterator(), n))


def cat(batches: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def test_corpus_size(corpus):
    source, special = corpus
    assert (source.num_docs, source.num_tokens, special.vocab_size) == (7222, 309_797, 8603)


def test_masking_rates_are_15_percent_and_80_10_10(corpus):
    source, special = corpus
    cfg = BertDataConfig(max_seq_length=128, max_predictions_per_seq=80)
    f = cat(take(mlm_nsp_dataset(source, special, cfg, seed=1, start_index=0, global_batch=256), 30))
    tokens = f["input_mask"].sum()
    masked = f["masked_lm_weights"].sum()
    assert tokens > 300_000
    assert abs(masked / tokens - 0.15) < 0.005
    valid = f["masked_lm_weights"] > 0
    at_pos = np.take_along_axis(f["input_ids"], f["masked_lm_positions"], axis=1)[valid]
    labels = f["masked_lm_ids"][valid]
    is_mask = at_pos == MASK
    kept = (at_pos == labels) & ~is_mask
    rand = ~is_mask & ~kept
    # A random draw equals the original with probability 1/V (V = 8603): negligible at this tolerance.
    assert abs(is_mask.mean() - 0.8) < 0.01
    assert abs(kept.mean() - 0.1) < 0.01
    assert abs(rand.mean() - 0.1) < 0.01
    # Random ids are uniform over [0, V): distinct values match the birthday expectation, mean is V/2.
    v, k = special.vocab_size, rand.sum()
    assert abs(len(np.unique(at_pos[rand])) / (v * (1 - np.exp(-k / v))) - 1) < 0.02
    assert abs(at_pos[rand].mean() / (v / 2) - 1) < 0.02


def test_prediction_cap_and_budget_formula_for_every_example(corpus):
    source, special = corpus
    # At length 256 the uncapped budget reaches round(256 * 0.15) = 38, so the cap of 20 binds.
    cfg = BertDataConfig(max_seq_length=256, max_predictions_per_seq=20)
    f = cat(take(mlm_nsp_dataset(source, special, cfg, seed=2, start_index=0, global_batch=128), 8))
    n = f["input_mask"].sum(1)
    count = f["masked_lm_weights"].sum(1)
    assert count.max() == 20 and (n > 4).all() and (np.round(n * 0.15) > 20).sum() > 30
    np.testing.assert_array_equal(count, [min(20, max(1, int(round(k * 0.15)))) for k in n.tolist()])


def test_layout_truncation_and_segments_match_the_plan(corpus):
    source, special = corpus
    cfg = BertDataConfig(max_seq_length=64, max_predictions_per_seq=10)
    f = cat(take(mlm_nsp_dataset(source, special, cfg, seed=4, start_index=256, global_batch=128), 2))
    plan = next(nsp.iter_plan(source, cfg, 4, 256))[:256]
    np.testing.assert_array_equal(f["example_id"], plan["index"])
    np.testing.assert_array_equal(f["next_sentence_labels"], plan["is_random_next"])
    a = [source.doc_tokens(r["doc"], r["a_first"], r["a_last"]) for r in plan]
    b = [source.doc_tokens(r["b_doc"], r["b_first"], r["b_last"]) for r in plan]
    start_a, kept_a, start_b, kept_b = [t.numpy() for t in tf.function(masking.truncate_seq_pair)(
        np.array([len(x) for x in a]), np.array([len(x) for x in b]), 61, seed=4, index=plan["index"])]
    original = f["input_ids"].copy()
    rows = np.arange(256)[:, None]
    original[rows, f["masked_lm_positions"]] = np.where(f["masked_lm_weights"] > 0, f["masked_lm_ids"],
                                                        original[rows, f["masked_lm_positions"]])
    truncated = 0
    for i in range(256):
        ta = a[i][start_a[i]:start_a[i] + kept_a[i]]
        tb = b[i][start_b[i]:start_b[i] + kept_b[i]]
        expected = np.concatenate([[CLS], ta, [SEP], tb, [SEP]])
        n = len(expected)
        assert n <= 64
        np.testing.assert_array_equal(original[i, :n], expected)
        assert (original[i, n:] == PAD).all() and f["input_mask"][i].tolist() == [1] * n + [0] * (64 - n)
        assert f["segment_ids"][i].tolist() == [0] * (len(ta) + 2) + [1] * (len(tb) + 1) + [0] * (64 - n)
        truncated += len(a[i]) + len(b[i]) > 61
    assert truncated > 20


def test_same_seed_is_bitwise_equal_and_other_seed_differs(corpus):
    source, special = corpus
    cfg = BertDataConfig()
    first = cat(take(mlm_nsp_dataset(source, special, cfg, seed=7, start_index=0, global_batch=64), 3))
    again = cat(take(mlm_nsp_dataset(source, special, cfg, seed=7, start_index=0, global_batch=64), 3))
    other = cat(take(mlm_nsp_dataset(source, special, cfg, seed=8, start_index=0, global_batch=64), 3))
    for k in first:
        np.testing.assert_array_equal(first[k], again[k])
    assert (first["input_ids"] != other["input_ids"]).any(axis=1).mean() > 0.95
    np.testing.assert_array_equal(first["example_id"], other["example_id"])


def test_resume_and_process_slices_reproduce_single_process_batches(corpus):
    full, special = corpus
    source = SubsetSource(full, np.arange(40))  # short passes, so the batches below straddle pass boundaries
    cfg = BertDataConfig(max_seq_length=64, max_predictions_per_seq=10, whole_word_masking=True)
    g = 32
    assert [len(nsp.plan_epoch(source, cfg, seed=3, epoch=e)) for e in (0, 1)] == [88, 70]  # 6 batches: 2+ passes
    single = take(mlm_nsp_dataset(source, special, cfg, seed=3, start_index=0, global_batch=g), 6)
    resumed = take(mlm_nsp_dataset(source, special, cfg, seed=3, start_index=4 * g, global_batch=g), 2)
    for k in single[0]:
        np.testing.assert_array_equal(np.concatenate([single[4][k], single[5][k]]),
                                      np.concatenate([resumed[0][k], resumed[1][k]]))
    for procs in (2, 4):
        parts = [take(mlm_nsp_dataset(source, special, cfg, seed=3, start_index=0, global_batch=g,
                                      process_index=p, process_count=procs), 6) for p in range(procs)]
        for step in range(6):
            for k in single[step]:
                union = np.concatenate([parts[p][step][k] for p in range(procs)])
                np.testing.assert_array_equal(union, single[step][k])
            assert parts[0][step]["input_ids"].shape == (g // procs, 64)


def test_one_pass_without_repeat_ends_on_whole_global_batches(corpus):
    source, special = corpus
    cfg = BertDataConfig(max_seq_length=128)
    epoch_size = len(nsp.plan_epoch(source, cfg, seed=5, epoch=0))
    ids = np.concatenate([b["example_id"] for b in mlm_nsp_dataset(
        source, special, cfg, seed=5, start_index=0, global_batch=1000, process_index=1, process_count=2,
        repeat=False).as_numpy_iterator()])
    full = epoch_size // 1000
    assert epoch_size % 1000 != 0
    np.testing.assert_array_equal(ids, (np.arange(full)[:, None] * 1000 + np.arange(500, 1000)).ravel())


def test_whole_word_masking_masks_every_piece_of_a_chosen_word(corpus):
    source, special = corpus
    cfg = BertDataConfig(max_seq_length=128, max_predictions_per_seq=20, whole_word_masking=True)
    f = cat(take(mlm_nsp_dataset(source, special, cfg, seed=6, start_index=0, global_batch=128), 4))
    cont = special.continuation
    original = f["input_ids"].copy()
    rows = np.arange(len(original))[:, None]
    original[rows, f["masked_lm_positions"]] = np.where(f["masked_lm_weights"] > 0, f["masked_lm_ids"],
                                                        original[rows, f["masked_lm_positions"]])
    multi_piece_words = 0
    for i in range(len(original)):
        n = f["input_mask"][i].sum()
        chosen = set(f["masked_lm_positions"][i, f["masked_lm_weights"][i] > 0].tolist())
        budget = min(20, max(1, int(round(n * 0.15))))
        assert len(chosen) <= budget and len(chosen) >= budget - 4
        cand = [j for j in range(1, n - 1) if original[i, j] != SEP]
        words: list[list[int]] = []
        for j in cand:
            if words and cont[original[i, j]]:
                words[-1].append(j)
            else:
                words.append([j])
        for w in words:
            hit = [j in chosen for j in w]
            assert all(hit) or not any(hit)
            multi_piece_words += all(hit) and len(w) > 1
    assert multi_piece_words > 300


def test_bad_arguments_raise_clear_errors(corpus):
    source, special = corpus
    with pytest.raises(ConfigError, match="multiple of the global batch"):
        mlm_nsp_dataset(source, special, BertDataConfig(), seed=1, start_index=10, global_batch=64)
    with pytest.raises(ConfigError, match="process count"):
        mlm_nsp_dataset(source, special, BertDataConfig(), seed=1, start_index=0, global_batch=6, process_count=4)
    small = SpecialIds(PAD, CLS, SEP, MASK, 100)
    with pytest.raises(DataError, match=r"token id 8602, outside the vocabulary \[0, 100\)"):
        mlm_nsp_dataset(source, small, BertDataConfig(), seed=1, start_index=0, global_batch=8)
    with pytest.raises(ConfigError, match="whole_word_masking"):
        mlm_nsp_dataset(source, SpecialIds(PAD, CLS, SEP, MASK, 9000), BertDataConfig(whole_word_masking=True), seed=1,
                        start_index=0, global_batch=8)
