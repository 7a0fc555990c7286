"""NSP instance planning (google-research/bert create_instances_from_document) on tiny-shakespeare."""
from __future__ import annotations

from itertools import islice

import numpy as np
import pytest

from ptm_jax.families.bert.config import BertDataConfig
from ptm_jax.data.pretraining import nsp
from ptm_jax.data.pretraining.source import ArraySource, SubsetSource, split_train_eval
from ptm_jax.errors import ConfigError, DataError


def shakespeare_source(path) -> ArraySource:
    """Sentences = lines, documents = blank-line-separated blocks, ids = lower-cased words in order of appearance."""
    vocab: dict[str, int] = {}
    docs, cur = [], []
    for line in path.read_text(encoding="utf-8").split("\n"):
        words = line.lower().split()
        if not words:
            if cur:
                docs.append(cur)
                cur = []
            continue
        cur.append(np.array([vocab.setdefault(w, len(vocab) + 5) for w in words], np.int32))
    if cur:
        docs.append(cur)
    return ArraySource(docs)


@pytest.fixture(scope="module")
def source(shared_data) -> ArraySource:
    return shakespeare_source(shared_data / "corpus/tinyshakespeare/input.txt")


def test_source_shape_of_tiny_shakespeare(source):
    assert source.num_docs == 7222
    assert source.num_tokens == 202_651
    assert source.doc_tokens(0).size == source.doc_sentence_lengths(0).sum()


def test_instances_tile_each_document_and_random_b_comes_from_another_document(source):
    cfg = BertDataConfig(max_seq_length=64)
    plan = nsp.plan_epoch(source, cfg, seed=3, epoch=1)
    np.testing.assert_array_equal(plan["index"], np.arange(len(plan)))
    assert set(np.unique(plan["doc"]).tolist()) == set(range(source.num_docs))
    # A ranges plus actual-next B ranges cover every sentence of every document exactly once, in order.
    by_doc = sorted(zip(plan["doc"].tolist(), plan["a_first"].tolist(), plan["a_last"].tolist(),
                        plan["is_random_next"].tolist(), plan["b_first"].tolist(), plan["b_last"].tolist()))
    covered = {d: 0 for d in range(source.num_docs)}
    for d, a0, a1, rnd, b0, b1 in by_doc:
        assert a0 == covered[d] and a1 > a0
        covered[d] = a1 if rnd else b1
        if not rnd:
            assert b0 == a1 and b1 > b0
    assert all(covered[d] == len(source.doc_sentence_lengths(d)) for d in covered)
    rnd = plan[plan["is_random_next"] == 1]
    assert np.all(rnd["b_doc"] != rnd["doc"])
    b_sizes = np.array([len(source.doc_sentence_lengths(d)) for d in rnd["b_doc"]])
    assert np.all((rnd["b_first"] >= 0) & (rnd["b_last"] > rnd["b_first"]) & (rnd["b_last"] <= b_sizes))


def test_nsp_random_next_is_half_of_multi_sentence_chunks_and_all_single_sentence_chunks(source):
    cfg = BertDataConfig(max_seq_length=64)
    plan = np.concatenate([nsp.plan_epoch(source, cfg, seed=5, epoch=e) for e in range(3)])
    multi = plan[plan["chunk_sentences"] >= 2]
    single = plan[plan["chunk_sentences"] == 1]
    assert len(multi) > 20_000 and len(single) > 5_000
    assert abs(multi["is_random_next"].mean() - 0.5) < 0.01
    assert single["is_random_next"].sum() == len(single)


def test_short_target_lengths_drawn_with_short_seq_prob(source):
    cfg = BertDataConfig(max_seq_length=128, short_seq_prob=0.1)
    m = 125
    targets = []
    for e in range(4):
        plan = nsp.plan_epoch(source, cfg, seed=11, epoch=e)
        _, first = np.unique(plan["doc"], return_index=True)  # target is drawn once per document per pass
        targets.append(plan["target_length"][first])
    targets = np.concatenate(targets)
    assert len(targets) == 4 * source.num_docs
    assert targets.min() == 2 and targets.max() == m
    # randint(2, m) itself returns m with probability 1/(m-1), so "short" is slightly rarer than 0.1.
    assert abs((targets < m).mean() - 0.1 * (m - 2) / (m - 1)) < 0.01


def test_chunks_stop_at_target_length_and_random_b_fills_the_rest(source):
    cfg = BertDataConfig(max_seq_length=48, short_seq_prob=0.3)
    plan = nsp.plan_epoch(source, cfg, seed=2, epoch=0)
    checked = 0
    for rec in plan[:4000]:
        lengths = source.doc_sentence_lengths(rec["doc"])
        chunk = lengths[rec["a_first"]:rec["a_first"] + rec["chunk_sentences"]]
        target = rec["target_length"]
        ends_doc = rec["a_first"] + rec["chunk_sentences"] == len(lengths)
        assert chunk.sum() >= target or ends_doc
        assert chunk[:-1].sum() < target
        if rec["is_random_next"]:
            b = source.doc_sentence_lengths(rec["b_doc"])[rec["b_first"]:rec["b_last"]]
            target_b = target - lengths[rec["a_first"]:rec["a_last"]].sum()
            b_ends_doc = rec["b_last"] == len(source.doc_sentence_lengths(rec["b_doc"]))
            assert b.sum() >= target_b or b_ends_doc
            assert len(b) == 1 or b[:-1].sum() < target_b
        checked += 1
    assert checked == 4000


def test_randint_is_inclusive_on_both_ends():
    u = nsp._Uniforms(np.random.default_rng(0))
    draws = np.array([u.randint(1, 3) for _ in range(30_000)])
    assert set(draws.tolist()) == {1, 2, 3}
    np.testing.assert_allclose(np.bincount(draws)[1:] / len(draws), [1 / 3] * 3, atol=0.01)


def test_iter_plan_fast_forward_equals_tail_and_passes_are_concatenated(source):
    cfg = BertDataConfig(max_seq_length=128)
    e0 = nsp.plan_epoch(source, cfg, seed=9, epoch=0, shuffle_block=1000)
    e1 = nsp.plan_epoch(source, cfg, seed=9, epoch=1, first_index=len(e0), shuffle_block=1000)
    full = np.concatenate(list(nsp.iter_plan(source, cfg, 9, epochs=2, shuffle_block=1000)))
    np.testing.assert_array_equal(full, np.concatenate([e0, e1]))
    np.testing.assert_array_equal(full["index"], np.arange(len(e0) + len(e1)))
    start = len(e0) + 1234
    tail = np.concatenate(list(nsp.iter_plan(source, cfg, 9, start, epochs=2, shuffle_block=1000)))
    np.testing.assert_array_equal(tail, full[start:])
    # Passes re-plan with new randomness; seeds give different streams.
    assert not np.array_equal(e0[["doc", "a_first", "a_last"]][:500], e1[["doc", "a_first", "a_last"]][:500])
    other = next(nsp.iter_plan(source, cfg, 10, shuffle_block=1000))
    assert (other["doc"] != full["doc"][:1000]).mean() > 0.9
    # Within a block instances are shuffled: consecutive examples rarely share a document.
    assert (np.diff(full["doc"][:1000]) == 0).mean() < 0.01
    endless = nsp.iter_plan(source, cfg, 9, shuffle_block=1000)
    stream = np.concatenate(list(islice(endless, 30)))
    np.testing.assert_array_equal(stream["index"], np.arange(len(stream)))
    assert stream["epoch"].max() >= 2 and np.all(np.diff(stream["epoch"]) >= 0)
    np.testing.assert_array_equal(stream[:len(full)], full)


def test_subset_and_split_renumber_documents_and_bad_input_raises(source):
    train, held = split_train_eval(source, 4)
    assert (train.num_docs, held.num_docs) == (7218, 4)
    np.testing.assert_array_equal(held.doc_tokens(3, 1, 2), source.doc_tokens(7221, 1, 2))
    plan = nsp.plan_epoch(held, BertDataConfig(), seed=1, epoch=0)
    assert set(plan["doc"].tolist()) == {0, 1, 2, 3} and set(plan["b_doc"].tolist()) <= {0, 1, 2, 3}
    with pytest.raises(DataError, match="document 1 has no sentences"):
        ArraySource([[np.array([5])], []])
    with pytest.raises(DataError, match="document 0, sentence 1"):
        ArraySource([[np.array([5]), np.array([], np.int32)]])
    with pytest.raises(DataError, match=r"\[0, 7222\)"):
        SubsetSource(source, [7222])
    with pytest.raises(ConfigError, match="seed"):
        nsp.plan_epoch(source, BertDataConfig(), seed=-1, epoch=0)
