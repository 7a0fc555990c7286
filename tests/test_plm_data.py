"""XLNet permutation-LM data: stream layout, span targets, factorization orders, determinism, host slicing."""
from __future__ import annotations

from itertools import islice

import numpy as np
import pytest

from ptm_jax.families.xlnet.config import XlnetDataConfig
from ptm_jax.data.corpus import read_documents
from ptm_jax.data.pretraining.source import ArraySource, SpecialIds
from ptm_jax.data.tokenizers import train_sentencepiece
from ptm_jax.errors import ConfigError, DataError
from ptm_jax.families.xlnet.permutation import part_budgets, sample_spans
from ptm_jax.families.xlnet.plm_data import PlmBatchBuilder, _pair_lengths, plm_dataset

PAD, CLS, SEP, MASK, V = 0, 1, 2, 3, 200
CFG = XlnetDataConfig(max_seq_length=64, max_predictions_per_seq=10, reuse_len=32, perm_size=16, bi_data=True)


def toy_corpus(seed: int = 0, docs: int = 50) -> tuple[ArraySource, SpecialIds]:
    """Random sentences of ids 4..V-1; about 30% of the vocabulary continues a word."""
    rng = np.random.default_rng(seed)
    source = ArraySource([[rng.integers(4, V, rng.integers(1, 30)) for _ in range(rng.integers(1, 12))]
                          for _ in range(docs)])
    cont = np.zeros(V, bool)
    cont[4:] = rng.random(V - 4) < 0.3
    return source, SpecialIds(PAD, CLS, SEP, MASK, V, continuation=cont)


@pytest.fixture(scope="module")
def toy():
    return toy_corpus()


@pytest.fixture(scope="module")
def toy_batches(toy):
    """Global batches 0..39 (320 samples, two passes' worth of rows with bi_data) and their builder."""
    source, special = toy
    builder = PlmBatchBuilder(source, special, CFG, seed=7, global_batch=8)
    return builder, [builder.local_batch(s, 0, 1) for s in range(40)]


def take(ds, n: int) -> list[dict[str, np.ndarray]]:
    return list(islice(ds.as_numpy_iterator(), n))


def stream(builder: PlmBatchBuilder, epoch: int, reverse: bool) -> tuple[np.ndarray, np.ndarray]:
    """The pass's token stream materialised (tokens, sentence-start flags), forward or reversed."""
    src = builder.source
    order = builder.document_order(epoch)
    tokens = np.concatenate([src.doc_tokens(int(d)) for d in order])
    starts = []
    for d in order:
        lengths = src.doc_sentence_lengths(int(d))
        flags = np.zeros(int(lengths.sum()), bool)
        flags[np.cumsum(lengths) - lengths] = True
        starts.append(flags)
    starts = np.concatenate(starts)
    if not reverse:
        return tokens, starts
    n = tokens.size
    return tokens[::-1].copy(), starts[(n - np.arange(n)) % n]


def reference_pair_lengths(la: int, lb: int, tot: int) -> tuple[int, int]:
    while la + lb > tot:
        if la > lb:
            la -= 1
        else:
            lb -= 1
    return la, lb


def test_pair_truncation_closed_form_matches_reference_loop():
    for tot in (2, 3, 29, 60, 61):
        for la in range(1, 2 * tot + 3):
            for lb in range(1, 2 * tot + 3):
                if la + lb >= tot:
                    assert _pair_lengths(la, lb, tot) == reference_pair_lengths(la, lb, tot), (la, lb, tot)
    # Capping either side at tot does not change the result (the pipeline never reads further).
    assert _pair_lengths(10, 29, 29) == _pair_lengths(10, 500, 29) == (10, 19)
    assert _pair_lengths(25, 29, 29) == _pair_lengths(25, 900, 29) == (15, 14)


def test_budget_split_follows_reference_half_and_half():
    assert part_budgets(512, 256, 85) == (43, 42)   # reference: num_predict - num_predict // 2 in the reuse part
    assert part_budgets(128, 64, 20) == (10, 10)
    assert part_budgets(128, 0, 20) == (0, 20)


def test_every_sample_has_exact_targets_layout_and_mapping(toy_batches):
    builder, batches = toy_batches
    length, reuse, p = 64, 32, 10
    n_samples = 0
    for f in batches:
        ids, seg = f["input_ids"], f["segment_ids"]
        n_samples += ids.shape[0]
        assert ids.shape == (8, length) and f["perm_mask"].shape == (8, length, length)
        assert (f["target_weights"] == 1).all()                       # exactly P targets, never padding
        assert (f["input_q"].sum(axis=1) == p).all()
        assert (f["input_q"][:, :reuse].sum(axis=1) == 5).all()       # ceil(10 * 32 / 64) in the reuse part
        for i in range(ids.shape[0]):
            first_sep = int((seg[i] == 0).sum()) - 1
            assert seg[i].tolist() == [0] * (first_sep + 1) + [1] * (length - 2 - first_sep) + [2]
            assert first_sep > reuse and first_sep < length - 3        # A and B hold >= 1 token each
            assert ids[i, first_sep] == SEP and ids[i, -2] == SEP and ids[i, -1] == CLS
            assert ((ids[i] == SEP).sum(), (ids[i] == CLS).sum()) == (2, 1)
        pos = f["target_positions"]
        assert (np.diff(pos, axis=1) > 0).all()
        assert np.array_equal(f["target_mapping"].argmax(-1), pos) and (f["target_mapping"].sum(-1) == 1).all()
        assert np.array_equal(np.take_along_axis(ids, pos, 1), f["target_ids"])
        assert np.array_equal(np.take_along_axis(f["input_q"], pos, 1), np.ones_like(pos, np.float32))
        assert not np.isin(f["target_ids"], [PAD, CLS, SEP, MASK]).any()
    assert n_samples >= 320


def reconstruct_order(pm: np.ndarray, q: np.ndarray, func: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Positions of targets/[SEP]/[CLS] in [lo, hi), earliest in the factorization order first.

    For an ordered i, the count of ordered j in the part with perm_mask[i, j] = 1 is the number of ordered
    positions at or after it (targets do not see themselves; specials do, so add one).
    """
    ordered = np.flatnonzero((q > 0) | func)
    ordered = ordered[(ordered >= lo) & (ordered < hi)]
    later = pm[np.ix_(ordered, ordered)].sum(axis=1) + func[ordered]
    assert sorted(later.tolist()) == list(range(1, ordered.size + 1))   # a strict total order
    return ordered[np.argsort(-later)]


def test_perm_mask_is_one_blockwise_factorization_order(toy_batches):
    _, batches = toy_batches
    length, reuse, perm = 64, 32, 16
    same_block_pairs = earlier = 0
    for f in batches[:30]:
        for i in range(8):
            pm, q, ids = f["perm_mask"][i], f["input_q"][i], f["input_ids"][i]
            func = (ids == SEP) | (ids == CLS)
            rank = np.full(length, -1)
            for lo, hi in ((0, reuse), (reuse, length)):
                order = reconstruct_order(pm, q, func, lo, hi)
                rank[order] = lo + np.arange(order.size)
                block = np.where(order < reuse, order // perm, 2 + (order - reuse) // perm)
                assert (np.diff(block) >= 0).all()                    # block b entirely before block b+1
                step_of = np.empty(length, int)
                step_of[order] = np.arange(order.size)
                tgt = order[q[order] > 0]
                lo_i, hi_i = np.nonzero((tgt[:, None] // perm == tgt[None, :] // perm) & (tgt[:, None] < tgt[None, :]))
                same_block_pairs += lo_i.size
                earlier += (step_of[tgt[lo_i]] < step_of[tgt[hi_i]]).sum()
            is_t = q > 0
            self_rank = np.where(is_t, rank, rank + 1)
            expected = (self_rank[:, None] <= rank[None, :]) & (is_t | func)[None, :]
            expected[:reuse, reuse:] = True                               # the reuse part never sees the rest
            assert np.array_equal(pm, expected.astype(np.float32))
            assert np.array_equal(np.diag(pm), q)                         # targets cannot see themselves
            plain = ~is_t & ~func
            assert (pm[:, plain][reuse:] == 0).all()                      # plain tokens: visible to every row
            assert (pm[:reuse, :reuse][:, plain[:reuse]] == 0).all()      # (the reuse part's, to reuse rows)
            assert (pm[np.ix_(plain, is_t | func)] == 1).all()           # and they see no target or special
    # Within a block the order is uniform: a lower position comes first half of the time.
    assert same_block_pairs > 2000
    assert abs(earlier / same_block_pairs - 0.5) < 0.03


def test_stream_layout_reuse_a_b_follow_the_text(toy_batches):
    builder, batches = toy_batches
    lay = builder.layout
    reuse, tot, n = lay.reuse_len, lay.pair_len, lay.num_tokens
    next_seen = cuts_seen = 0
    for step, f in enumerate(batches):
        epoch, s = divmod(step, lay.steps_per_pass)
        for row in range(8):
            reverse = row >= lay.streams
            assert f["is_reversed"][row] == int(reverse)
            tokens, starts = stream(builder, epoch, reverse)
            ids, seg = f["input_ids"][row], f["segment_ids"][row]
            la = int((seg == 0).sum()) - 1 - reuse
            lb = lay.seq_len - 3 - reuse - la
            o = (row % lay.streams) * n // lay.streams + s * lay.stride
            cyc = np.arange(o, o + reuse + la) % n
            assert np.array_equal(ids[:reuse + la], tokens[cyc])           # reuse + A: the text at the offset
            begin = o + reuse
            cut = starts[np.arange(begin + 1, begin + tot) % n]
            cuts_seen += cut.any()
            b = ids[reuse + la + 1:reuse + la + 1 + lb]
            if f["is_next"][row]:
                next_seen += 1
                # B continues the text from a sentence start inside (begin + la - 1, begin + tot).
                ok = [c for c in np.flatnonzero(cut) + begin + 1
                      if c >= begin + la and np.array_equal(tokens[np.arange(c, c + lb) % n], b)]
                assert ok
            else:                                                          # B: whole sentence start elsewhere
                hits = [c for c in np.flatnonzero(starts) if np.array_equal(tokens[np.arange(c, c + lb) % n], b)]
                assert hits
            if s + 1 < lay.steps_per_pass and step + 1 < len(batches):    # next step's reuse part follows on
                nxt = batches[step + 1]["input_ids"][row][:reuse]
                assert np.array_equal(nxt, tokens[np.arange(o + reuse, o + 2 * reuse) % n])
    total = 8 * len(batches)
    expected = 0.5 * cuts_seen / total
    assert abs(next_seen / total - expected) < 3 * np.sqrt(0.25 / total)


def test_spans_start_at_word_starts_and_cover_whole_words(toy_batches):
    builder, batches = toy_batches
    cfg, lay, special = builder.cfg, builder.layout, builder.special
    counts = np.zeros(cfg.max_span + 1)
    for step, f in enumerate(batches):
        u = builder.uniforms(step * 8, 8)
        for i in range(8):
            ids, rev = f["input_ids"][i], bool(f["is_reversed"][i])
            got = np.zeros(lay.seq_len, bool)
            for lo, hi, goal in ((0, 32, 5), (32, 64, 5)):
                part = ids[lo:hi][::-1] if rev else ids[lo:hi]
                cand = ~np.isin(part, [PAD, CLS, SEP, MASK])
                cont = special.continuation[part]
                mask, spans = sample_spans(cand, cont, goal, u[i, 4 + 128 + 2 * lo:4 + 128 + 2 * hi],
                                           u[i, 4 + 64 + lo:4 + 64 + hi], max_span=5, mask_alpha=6.0,
                                           mask_beta=1.0)
                got[lo:hi] = mask[::-1] if rev else mask
                assert mask.sum() == goal
                for b, e in spans:
                    assert cand[b] and not cont[b]                         # starts at a word-initial piece
                    assert cand[b:e].all()                                 # no special inside
                    assert e == part.size or not (cand[e] and cont[e])     # ends where a word ends
                    words = int((~cont[b:e]).sum())
                    assert 1 <= words <= cfg.max_span
                    counts[words] += 1
                for (b0, e0), (b1, _) in zip(spans, spans[1:]):
                    assert e0 < b1                                         # spans never touch
            assert np.array_equal(got, f["input_q"][i] > 0)               # the pipeline used exactly these
    assert counts.sum() > 500


def test_span_lengths_follow_inverse_n_law_on_long_text():
    rng = np.random.default_rng(3)
    counts = np.zeros(6)
    for seed in range(300):
        n = 400
        cont = rng.random(n) < 0.3
        cont[0] = False
        u = np.random.default_rng(seed).random(3 * n)
        mask, spans = sample_spans(np.ones(n, bool), cont, 60, u[:2 * n], u[2 * n:], max_span=5,
                                   mask_alpha=6.0, mask_beta=1.0)
        assert mask.sum() == 60
        for b, e in spans[:-2]:  # the last spans may be cut by the budget
            counts[int((~cont[b:e]).sum())] += 1
    freq = counts[1:] / counts.sum()
    law = (1 / np.arange(1, 6)) / (1 / np.arange(1, 6)).sum()
    assert counts.sum() > 3000
    np.testing.assert_allclose(freq, law, atol=0.025)


def test_same_seed_same_stream_other_seed_differs(toy):
    source, special = toy
    a = take(plm_dataset(source, special, CFG, seed=7, start_index=0, global_batch=8), 3)
    b = take(plm_dataset(source, special, CFG, seed=7, start_index=0, global_batch=8), 3)
    c = take(plm_dataset(source, special, CFG, seed=8, start_index=0, global_batch=8), 3)
    for x, y in zip(a, b):
        for k in x:
            assert np.array_equal(x[k], y[k]), k
    assert all(not np.array_equal(x["input_ids"], z["input_ids"]) for x, z in zip(a, c))
    assert all(not np.array_equal(x["perm_mask"], z["perm_mask"]) for x, z in zip(a, c))


def test_resume_equals_tail_and_two_processes_reassemble(toy, toy_batches):
    source, special = toy
    builder, batches = toy_batches
    full = take(plm_dataset(source, special, CFG, seed=7, start_index=0, global_batch=8), 45)
    tail = take(plm_dataset(source, special, CFG, seed=7, start_index=37 * 8, global_batch=8), 8)
    p0 = take(plm_dataset(source, special, CFG, seed=7, start_index=0, global_batch=8, process_index=0,
                          process_count=2), 45)
    p1 = take(plm_dataset(source, special, CFG, seed=7, start_index=0, global_batch=8, process_index=1,
                          process_count=2), 45)
    assert builder.layout.steps_per_pass == 41                        # the run crosses into pass 1
    for step in range(45):
        for k in full[step]:
            if step < len(batches):
                assert np.array_equal(full[step][k], batches[step][k]), k
            if step >= 37:
                assert np.array_equal(tail[step - 37][k], full[step][k]), k
            assert np.array_equal(np.concatenate([p0[step][k], p1[step][k]]), full[step][k]), k
    assert p0[0]["is_reversed"].tolist() == [0] * 4 and p1[0]["is_reversed"].tolist() == [1] * 4


def test_bi_data_half_reversed_and_no_repeat_stops_after_one_pass(toy, toy_batches):
    source, special = toy
    builder, batches = toy_batches
    for f in batches:
        assert f["is_reversed"].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    fwd, _ = stream(builder, 0, False)
    n = fwd.size
    f = batches[3]
    # Reversed row r reads the reversed stream from floor(r N / 4) + 3 * 32: the forward text right to left.
    for r in range(4):
        o = r * n // 4 + 3 * 32
        fwd_pos = (n - 1 - np.arange(o, o + 32)) % n
        assert np.array_equal(f["input_ids"][4 + r][:32], fwd[fwd_pos])
    once = take(plm_dataset(source, special, CFG, seed=7, start_index=0, global_batch=8, repeat=False), 100)
    assert len(once) == builder.layout.steps_per_pass == 41
    plain = XlnetDataConfig(max_seq_length=64, max_predictions_per_seq=10)
    f = take(plm_dataset(source, special, plain, seed=7, start_index=0, global_batch=8), 1)[0]
    assert f["is_reversed"].tolist() == [0] * 8 and (f["input_q"].sum(1) == 10).all()
    assert f["segment_ids"][:, 0].tolist() == [0] * 8                 # no reuse part: A starts the sample


def test_bad_settings_and_ids_raise_clear_errors(toy):
    source, special = toy
    with pytest.raises(ConfigError, match="reuse_len=61 must be in"):
        plm_dataset(source, special, XlnetDataConfig(max_seq_length=64, reuse_len=61), seed=1, start_index=0,
                    global_batch=8)
    with pytest.raises(ConfigError, match="even global batch"):
        plm_dataset(source, special, CFG, seed=1, start_index=0, global_batch=7)
    with pytest.raises(ConfigError, match="max_predictions_per_seq=60"):
        plm_dataset(source, special, XlnetDataConfig(max_seq_length=64, max_predictions_per_seq=60, reuse_len=32),
                    seed=1, start_index=0, global_batch=8)
    with pytest.raises(ConfigError, match="multiple of the global batch"):
        plm_dataset(source, special, CFG, seed=1, start_index=4, global_batch=8)
    small = SpecialIds(PAD, CLS, SEP, MASK, 100)
    with pytest.raises(DataError, match="outside the vocabulary"):
        plm_dataset(source, small, CFG, seed=1, start_index=0, global_batch=8)


def test_gutenberg_sentencepiece_samples(shared_data, tmp_path):
    docs = list(read_documents(shared_data / "corpus/gutenberg/11-0.txt", doc_max_sentences=40))
    sentences = [s for d in docs for s in d]
    sp = train_sentencepiece(iter(sentences), 1000, tmp_path / "sp", input_sentence_size=5000)
    source = ArraySource([[np.asarray(x, np.int32) for x in sp.encode_batch(d) if x] for d in docs])
    special = SpecialIds(sp.pad_id, sp.cls_id, sp.sep_id, sp.mask_id, sp.vocab_size,
                         continuation=sp.continuation_mask())
    cfg = XlnetDataConfig(max_seq_length=128, max_predictions_per_seq=20, reuse_len=64, perm_size=32, bi_data=True)
    assert source.num_docs > 20 and source.num_tokens > 30_000
    batches = take(plm_dataset(source, special, cfg, seed=5, start_index=0, global_batch=16), 16)
    cont = special.continuation
    run_starts = word_initial = 0
    for f in batches:
        assert (f["target_weights"].sum(1) == 20).all()
        assert not np.isin(f["target_ids"], [sp.pad_id, sp.cls_id, sp.sep_id, sp.mask_id]).any()
        for i in np.flatnonzero(f["is_reversed"] == 0):
            q = f["input_q"][i] > 0
            starts = np.flatnonzero(q & ~np.concatenate([[False], q[:-1]]))
            run_starts += starts.size
            word_initial += (~cont[f["input_ids"][i][starts]]).sum()
        text = sp.decode(f["input_ids"][0][:64])
        assert len(text) > 100 and text.isprintable()
    # Runs of targets start on word-initial pieces, except the few single-token shortfall fills.
    assert run_starts > 500 and word_initial / run_starts > 0.9


def test_corpus_shorter_than_a_sample_wraps_around():
    special = SpecialIds(PAD, CLS, SEP, MASK, 50)
    source = ArraySource([[[10, 11, 12], [13, 14]], [[20, 21, 22, 23, 24, 25, 26]], [[30]]])
    cfg = XlnetDataConfig(max_seq_length=32, max_predictions_per_seq=6, reuse_len=8, bi_data=True)
    builder = PlmBatchBuilder(source, special, cfg, seed=1, global_batch=4)
    assert (builder.layout.num_tokens, builder.layout.steps_per_pass) == (13, 1)
    for step in range(6):
        f = builder.local_batch(step, 0, 1)
        assert (f["input_q"].sum(1) == 6).all() and (f["target_weights"] == 1).all()
        for row in range(4):
            tokens, _ = stream(builder, step, row >= 2)
            la = int((f["segment_ids"][row] == 0).sum()) - 9
            o = (row % 2) * 13 // 2
            assert np.array_equal(f["input_ids"][row][:8 + la], tokens[np.arange(o, o + 8 + la) % 13])
            assert f["input_ids"][row][8 + la] == SEP and f["input_ids"][row][-2:].tolist() == [SEP, CLS]
