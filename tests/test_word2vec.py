"""word2vec as a family package (ptm_jax/families/word2vec): word2vec.c's sampling rules on real counts
(subsampling keep rates, the dynamic window, unigram^0.75 negatives, the Huffman tree), CBOW's gradient, a
small skip-gram on tiny-shakespeare whose known neighbours come out, the examples independent of the process
count, and a stop mid-epoch + resume ending bit-equal to the uninterrupted run.

The corpus: tiny-shakespeare (../shared/data), lower-cased whitespace words with count >= 5 (3,995 ids)."""
import json
import math
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ptm_jax.config import DataConfig, MeshConfig, RunConfig, TokenizerConfig, TrainConfig
from ptm_jax.data.cache import build_or_load_cache
from ptm_jax.data.pretraining.causal_lm import PackedStream
from ptm_jax.data.pretraining.source import ArraySource
from ptm_jax.data.word_vocab import build_word_vocab
from ptm_jax.families.word2vec import FAMILY, Word2VecConfig, Word2VecDataConfig, sampling
from ptm_jax.families.word2vec.data import (Tables, example_rows, kept_mask, pack_pairs, packed_rows, pair_slots,
                                            report_dropped, word2vec_dataset)
from ptm_jax.families.word2vec.model import gather_rows, mean_with_sum_gradient
from ptm_jax.parallel.mesh import make_mesh
from ptm_jax.train.loop import fit

WINDOW, NEG = 5, 5


@pytest.fixture(scope="module")
def corpus(shared_data, tmp_path_factory):
    path = shared_data / "corpus/tinyshakespeare/input.txt"
    out = tmp_path_factory.mktemp("w2v_corpus")
    vocab = build_word_vocab(path.read_text(encoding="utf-8").splitlines(), out, min_count=5, lower_case=True)
    cache = build_or_load_cache(DataConfig(corpus=str(path), format="lines"), vocab, out / "cache")
    return types.SimpleNamespace(tokenizer=vocab, train=cache, eval=None)


def specials(vocab):
    return [vocab.pad_id, vocab.unk_id, vocab.eos_id]


def run_config(vocab, objective="skipgram", *, steps, batch, hs=False, negative=NEG, dim=32, lr=0.025):
    return RunConfig(objective=objective, model=Word2VecConfig(vocab_size=vocab.vocab_size, dim=dim),
                     data=Word2VecDataConfig(window=WINDOW, sample=1e-3, negative=negative, hs=hs, seed=1),
                     tokenizer=TokenizerConfig(),
                     train=TrainConfig(batch_size=batch, steps=steps, optimizer="sgd", learning_rate=lr,
                                       lr_decay="bert", warmup_steps=0, min_lr_ratio=1e-4, weight_decay=0.0,
                                       clip_norm=0.0, log_every=steps // 2, eval_every=10 ** 6,
                                       checkpoint_every=10 ** 6, progress_bar=False))


def test_subsampling_keeps_each_word_at_word2vec_c_rate(corpus):
    vocab = corpus.tokenizer
    counts = sampling.word_counts(vocab.counts, specials(vocab))
    tables = Tables.build(vocab.counts, specials(vocab), sample=1e-3, negative=NEG, hs=False)
    t = counts.sum()
    for w in ("the", "and", "to", "king", "love"):  # 'the' ~ 5.4k of 200k words: kept ~ 0.22 of the time
        i = vocab.token_to_id(w)
        c = counts[i]
        want = min(1.0, (math.sqrt(c / (1e-3 * t)) + 1) * 1e-3 * t / c)
        assert tables.keep[i] == pytest.approx(want, rel=1e-12)
        n = 200_000  # occurrences of the word at 200k stream positions
        got = kept_mask(tables, np.full(n, i), np.arange(10 ** 6, 10 ** 6 + n), seed=3).mean()
        assert abs(got - want) < 4 * math.sqrt(want * (1 - want) / n) + 1e-9, (w, got, want)
    assert tables.keep[specials(vocab)].max() == 0.0 and tables.keep[vocab.token_to_id("the")] < 0.3
    # in real examples, no dropped occurrence is ever a center or a context
    stream = PackedStream(corpus.train, vocab.eos_id, seed=1, shuffle=True)
    rows = example_rows(stream, tables, 5000, 4000, window=WINDOW, negative=NEG, cbow=False, seed=1, reach=40,
                        pad_id=vocab.pad_id)
    toks = stream.span(5000 - 40, 9040)[0]
    keep = kept_mask(tables, toks, np.arange(5000 - 40, 9040), seed=1)
    kept_words = set(np.flatnonzero(keep[40:4040]))
    assert set(np.flatnonzero(rows["center_weight"])) <= kept_words
    assert rows["context"][rows["context_weight"] == 0].max() == vocab.pad_id
    assert not np.isin(rows["context"][rows["context_weight"] > 0], specials(vocab)).any()


def test_dynamic_window_uses_window_minus_b_words_each_side_b_uniform(corpus):
    """One long document without subsampling: every center far from its ends has window - b contexts on
    each side, b uniform in [0, window): effective windows 1..5 each with frequency 1/5."""
    vocab = corpus.tokenizer
    words = np.concatenate([corpus.train.doc_tokens(d) for d in range(200)])
    words = words[~np.isin(words, specials(vocab))]
    source = ArraySource([[words]])
    tables = Tables.build(vocab.counts, specials(vocab), sample=0.0, negative=NEG, hs=False)
    stream = PackedStream(source, vocab.eos_id, seed=1, shuffle=False)
    n = words.size - 100
    rows = example_rows(stream, tables, 50, n, window=WINDOW, negative=NEG, cbow=False, seed=9, reach=40,
                        pad_id=vocab.pad_id)
    w = rows["context_weight"]
    left, right = w[:, :WINDOW].sum(1), w[:, WINDOW:].sum(1)
    np.testing.assert_array_equal(left, right)
    freq = np.bincount(left.astype(int), minlength=WINDOW + 1)[1:] / n
    assert np.abs(freq - 1 / WINDOW).max() < 4 * math.sqrt(0.2 * 0.8 / n), freq
    # the used slots are the nearest ones: slot window-1-k (left) and window+k (right) for k < window - b
    for e in range(1, WINDOW + 1):
        sel = left == e
        assert w[sel][:, WINDOW - e:WINDOW + e].min() == 1 and w[sel].sum() == 2 * e * sel.sum()
    np.testing.assert_array_equal(rows["context"][:, WINDOW - 1], np.roll(words, 1)[50:50 + n])


def test_negatives_follow_unigram_to_the_three_quarters(corpus):
    vocab = corpus.tokenizer
    tables = Tables.build(vocab.counts, specials(vocab), sample=1e-3, negative=NEG, hs=False)
    stream = PackedStream(corpus.train, vocab.eos_id, seed=1, shuffle=True)
    rows = example_rows(stream, tables, 0, 20_000, window=WINDOW, negative=NEG, cbow=False, seed=2, reach=40,
                        pad_id=vocab.pad_id, shared=False)
    neg = rows["negatives"].ravel()                   # every slot draws (one draw per pair): 1M draws
    c = sampling.word_counts(vocab.counts, specials(vocab)) ** 0.75
    p = c / c.sum()
    freq = np.bincount(neg, minlength=p.size) / neg.size
    assert np.abs(freq - p).max() < 5 * math.sqrt(p.max() / neg.size), np.abs(freq - p).max()
    assert freq[specials(vocab)].sum() == 0
    chi2 = (((freq[3:53] - p[3:53]) ** 2) / p[3:53] * neg.size).sum()
    assert chi2 < 100, chi2                           # 50 commonest words, 49 degrees of freedom: p < 1e-4
    target = rows["center"][:, None, None]
    live = rows["negative_weight"] > 0
    assert not (live & (rows["negatives"] == target)).any()          # a negative equal to the target is dropped
    assert ((rows["negatives"] == target) & (rows["context_weight"][:, :, None] > 0)).any()
    shared = example_rows(stream, tables, 0, 20_000, window=WINDOW, negative=NEG, cbow=False, seed=2, reach=40,
                          pad_id=vocab.pad_id)                   # one draw per center, shared by its pairs
    assert shared["negatives"].shape == (20_000, NEG)
    np.testing.assert_array_equal(shared["negative_weight"] > 0, (shared["negatives"] != shared["center"][:, None])
                                  & (shared["center_weight"][:, None] > 0))


def test_huffman_codes_are_prefix_free_and_near_the_entropy(corpus):
    counts = sampling.word_counts(corpus.tokenizer.counts, specials(corpus.tokenizer))
    points, codes, lengths = sampling.huffman(counts)
    words = np.flatnonzero(counts > 0)
    assert lengths[counts == 0].max() == 0 and lengths[words].min() >= 1
    strings = sorted("".join(map(str, codes[w, :lengths[w]])) for w in words)
    assert all(not b.startswith(a) for a, b in zip(strings, strings[1:]))   # sorted: a prefix would be next
    assert len(set(strings)) == words.size
    assert sum(2.0 ** -lengths[w] for w in words) == pytest.approx(1.0)      # a full binary tree (Kraft)
    p = counts[words] / counts.sum()
    entropy = -(p * np.log2(p)).sum()
    mean_len = (p * lengths[words]).sum()
    assert entropy <= mean_len < entropy + 1, (entropy, mean_len)
    assert points[words].max() == words.size - 2                             # the root, first on every path
    assert np.all(points[words, 0] == words.size - 2)
    assert lengths[corpus.tokenizer.token_to_id("the")] <= 6 < lengths[words].max()


def test_cbow_mean_gives_each_context_vector_the_whole_error():
    v = jnp.asarray(np.random.default_rng(0).normal(size=(2, 4, 3)), jnp.float32)
    w = jnp.asarray([[1, 1, 0, 1], [0, 1, 0, 0]], jnp.float32)
    u = jnp.asarray([0.5, -1.0, 2.0])
    out = mean_with_sum_gradient(v, w)
    np.testing.assert_allclose(out, (v * w[..., None]).sum(1) / w.sum(1, keepdims=True), rtol=1e-6)
    g = jax.grad(lambda x: jnp.sum(mean_with_sum_gradient(x, w) @ u))(v)
    np.testing.assert_allclose(g, w[..., None] * u, rtol=1e-6)     # not u / 3 for the 3-word context


def test_counter_init_is_uniform_uncorrelated_and_the_same_on_any_mesh(corpus):
    """word2vec.c's syn0 range from counter_init.py: a 20,000 x 100 draw has the uniform's moments, a flat
    256-bin histogram (chi-squared, 255 degrees of freedom) and no correlation between neighbouring rows or
    columns (each within 4 standard errors); a key changes the table; and the input table of a word2vec model
    initialised on a (2,2,2) mesh equals the one-device table bit for bit."""
    from ptm_jax.families.word2vec.counter_init import counter_uniform
    from ptm_jax.train.loop import compile_objective

    x = np.asarray(counter_uniform(jax.random.key(3), (20000, 100), -0.5, 0.5), np.float64)
    assert -0.5 <= x.min() and x.max() < 0.5
    assert abs(x.mean()) < 4 * math.sqrt(1 / 12 / x.size) and abs(x.var() - 1 / 12) < 0.001
    hist = np.histogram(x, bins=256, range=(-0.5, 0.5))[0]
    expected = x.size / 256
    assert ((hist - expected) ** 2 / expected).sum() < 255 + 4 * math.sqrt(2 * 255)
    se = 1 / math.sqrt(x.size)
    for a, b in ((x[:, :-1], x[:, 1:]), (x[:-1], x[1:]), (x[:, :-2], x[:, 2:])):
        assert abs((a * b).mean() / x.var()) < 4 * se
    other = np.asarray(counter_uniform(jax.random.key(4), (20000, 100), -0.5, 0.5), np.float64)
    assert np.mean(other == x) < 1e-3

    cfg = run_config(corpus.tokenizer, steps=2, batch=512)
    obj = FAMILY.pretraining.objectives["skipgram"](cfg, corpus)
    tables = []
    for mesh in (make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1]), make_mesh(MeshConfig(2, 2, 2))):
        params = compile_objective(obj, cfg.train, mesh).init_fn(jax.random.key(5)).params
        tables.append(np.asarray(jax.device_get(params["params"]["word2vec"]["input"])))
    bound = 0.5 / cfg.model.dim
    assert tables[0].shape == (corpus.tokenizer.vocab_size, cfg.model.dim)
    assert -bound <= tables[0].min() < -0.99 * bound and 0.99 * bound < tables[0].max() < bound
    np.testing.assert_array_equal(tables[0], tables[1])


def test_examples_are_the_same_for_any_process_count_and_start_with_every_pair_packed(corpus, caplog):
    vocab = corpus.tokenizer
    tables = Tables.build(vocab.counts, specials(vocab), sample=1e-3, negative=NEG, hs=True)
    slots = pair_slots(tables, WINDOW)
    assert slots == math.ceil(1.3 * tables.kept * (WINDOW + 1)) < 2 * WINDOW
    args = dict(eos_id=vocab.eos_id, pad_id=vocab.pad_id, window=WINDOW, negative=NEG, cbow=True, reach=40,
                seed=4, global_batch=64, block=16, slots=slots)
    one = word2vec_dataset(corpus.train, tables, start_index=0, **args).as_numpy_iterator()
    next(one)
    b1 = next(one)
    halves = [next(word2vec_dataset(corpus.train, tables, start_index=64, process_index=p, process_count=2,
                                    **args).as_numpy_iterator()) for p in range(2)]
    for k in b1:
        np.testing.assert_array_equal(np.concatenate([h[k] for h in halves]), b1[k], err_msg=k)
    assert b1["example_id"].tolist() == list(range(64, 128)) and b1["center_weight"].sum() > 10
    assert b1["negatives"].shape == (64, NEG) and b1["path"].shape[0] == 64
    # the packed pairs are exactly the per-center slots' real pairs, in stream order, each naming its center
    stream = PackedStream(corpus.train, vocab.eos_id, seed=4, shuffle=True)
    rows = example_rows(stream, tables, 64, 64, window=WINDOW, negative=NEG, cbow=True, seed=4, reach=40,
                        pad_id=vocab.pad_id)
    want = [(int(r), int(j), int(rows["context"][r, j])) for r, j in zip(*np.nonzero(rows["context_weight"]))]

    def pairs(b, block, n):
        live = b["pair_weight"].reshape(-1) > 0
        blk = np.arange(live.size) // (block * n)
        return list(zip((blk * block + b["pair_row"].reshape(-1))[live].tolist(),
                        b["pair_slot"].reshape(-1)[live].tolist(), b["pair_input"].reshape(-1)[live].tolist()))

    assert pairs(b1, 16, slots) == want and b1["dropped"].sum() == 0 and len(want) > 100
    # blocks too small for their pairs keep their first ones, count the rest where they belong, and say so
    small = pack_pairs(dict(rows), 16, 2, vocab.pad_id)
    per_block = [[p for p in want if p[0] // 16 == k] for k in range(4)]
    assert pairs(small, 16, 2) == [p for ps in per_block for p in ps[:32]]
    assert small["dropped"].sum() == sum(max(0, len(ps) - 32) for ps in per_block) > 0
    for k, ps in enumerate(per_block):
        cut = [p[0] for p in ps[32:]]
        np.testing.assert_array_equal(small["dropped"][16 * k:16 * (k + 1)],
                                      np.bincount(np.asarray(cut, int) - 16 * k, minlength=16))
    small["example_id"] = rows["example_id"]
    with caplog.at_level("WARNING", logger="ptm_jax.families.word2vec.data"):
        report_dropped(small, 7, "(context, center) pairs", "data.pair_slots (now 2)")
    assert f"batch 7: {int(small['dropped'].sum())} (context, center) pairs did not fit" in caplog.text
    assert "raise data.pair_slots (now 2)" in caplog.text
    # the C++ builder the dataset uses gives numpy's arrays bit for bit: hs, per-pair negatives, overflow
    from ptm_jax.families.word2vec import native

    lib, why = native.library("examples_cpu.cc")   # without it, native=True falls back to numpy: numpy vs numpy
    if lib is None:
        pytest.fail(f"the C++ example builder (examples_cpu.cc) did not load: {why}; this check compares it with "
                    "numpy, so it needs a C++ compiler (g++, or $CXX)")
    for negative, cbow, shared, n in ((NEG, True, True, slots), (NEG, False, False, 2), (0, False, True, slots)):
        t = Tables.build(vocab.counts, specials(vocab), sample=1e-3, negative=negative, hs=True)
        kw = dict(window=WINDOW, negative=negative, cbow=cbow, seed=4, reach=40, pad_id=vocab.pad_id, shared=shared,
                  block=16, slots=n)
        a, b = (packed_rows(stream, t, 1000, 256, native=native, **kw) for native in (False, True))
        assert sorted(a) == sorted(b) and (b["dropped"].sum() > 0) == (n == 2)
        for k in a:
            assert a[k].dtype == b[k].dtype, k
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_the_builders_arrays_reach_tf_data_without_a_copy(corpus):
    """The C++ builder's arrays are 64-byte aligned (``data.aligned_empty``), so ``tf.numpy_function`` hands them
    to TensorFlow as they are: every feature of real batches read back from ``batch_dataset`` lies at the address
    the builder wrote it to. A 16-byte-aligned array (numpy's own) is copied."""
    from ptm_jax.families.word2vec.data import aligned_empty, batch_dataset, feature_dtype

    vocab = corpus.tokenizer
    stream = PackedStream(corpus.train, vocab.eos_id, seed=4, shuffle=True)
    tables = Tables.build(vocab.counts, specials(vocab), sample=1e-3, negative=NEG, hs=True)
    built = {}

    def make(i):
        out = packed_rows(stream, tables, 256 * i, 256, window=WINDOW, negative=NEG, cbow=False, seed=4, reach=40,
                          pad_id=vocab.pad_id, shared=True, block=16, slots=pair_slots(tables, WINDOW))
        out["unaligned"] = np.empty(1001, np.float32)[1:]                  # 4 bytes past numpy's alignment
        built[i] = out
        return out

    shapes = {k: v.shape for k, v in make(0).items()}
    seen = list(batch_dataset(make, shapes, feature_dtype, 0).take(3).as_numpy_iterator())
    for i, batch in enumerate(seen):
        for k in shapes:
            np.testing.assert_array_equal(batch[k], built[i][k], err_msg=k)
            shared = batch[k].ctypes.data == built[i][k].ctypes.data
            assert shared == (k != "unaligned"), (i, k)
            assert built[i][k].ctypes.data % (1 if k == "unaligned" else 64) == 0, k
    assert [aligned_empty((3, 5), np.int32).ctypes.data % 64 for _ in range(4)] == [0] * 4


def test_a_row_beyond_the_duplicate_cap_gets_its_summed_step_scaled_to_the_cap():
    table = jnp.asarray(np.arange(12.0).reshape(4, 3), jnp.float32)
    ids = jnp.asarray([[1, 1, 1], [2, 1, 3]])                       # row 1 four times, rows 2 and 3 once
    g = jnp.asarray(np.random.default_rng(1).normal(size=(2, 3, 3)), jnp.float32)

    def grad(cap):
        np.testing.assert_array_equal(gather_rows(table, ids, cap), table[ids])
        return np.asarray(jax.grad(lambda t: jnp.sum(gather_rows(t, ids, cap) * g))(table))

    plain = grad(0)
    np.testing.assert_allclose(plain[1], g[0].sum(0) + g[1, 1], rtol=1e-6)
    capped = grad(2)
    np.testing.assert_allclose(capped[1], plain[1] * 2 / 4, rtol=1e-6)
    np.testing.assert_allclose(capped[[0, 2, 3]], plain[[0, 2, 3]], rtol=1e-6)     # at most 2 times: exact
    np.testing.assert_allclose(grad(4), plain, rtol=1e-6)


@pytest.fixture(scope="module")
def skipgram_run(corpus, tmp_path_factory):
    """Two epochs of tiny-shakespeare (about 210k running words each) in 410 steps of 1024 words, dim 32."""
    cfg = run_config(corpus.tokenizer, steps=410, batch=1024)
    obj = FAMILY.pretraining.objectives["skipgram"](cfg, corpus)
    stage = tmp_path_factory.mktemp("w2v_sg")
    return obj, fit(obj, cfg.train, make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1]), stage)


def nearest(vocab, vectors, word, k=8):
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    sims = unit @ unit[vocab.token_to_id(word)]
    return [vocab.id_to_token(i) for i in np.argsort(-sims)[1:k + 1]]


def test_skipgram_on_tiny_shakespeare_finds_known_neighbours(corpus, skipgram_run):
    obj, result = skipgram_run
    vocab = corpus.tokenizer
    rows = [json.loads(x) for x in (result.stage_dir / "metrics.jsonl").read_text().splitlines()
            if json.loads(x).get("split") == "train"]
    losses = [r["w2v_loss"] for r in rows]
    for r in rows:   # the logged loss is the mean per pair; the sum the step differentiates is loss_sum
        assert r["loss"] == r["w2v_loss"] and r["loss_sum"] == pytest.approx(r["loss"] * r["w2v_pairs"], rel=1e-5)
        assert r["w2v_pairs"] > 100
    assert losses[-1] < losses[0] < 6 * math.log(2) + 0.01, losses   # 6 terms of log 2 each at the start
    vectors = FAMILY.inspection.word_vectors(jax.device_get(result.state.params), obj.cfg.model)
    assert vectors.shape == (vocab.vocab_size, 32) and vectors.dtype == np.float32
    thou = nearest(vocab, vectors, "thou")                      # Early Modern English second person
    assert len(set(thou) & {"hast", "art", "dost", "thy", "wilt", "shalt", "thee", "canst"}) >= 3, thou
    king = nearest(vocab, vectors, "king", k=10)
    assert len(set(king) & {"richard", "edward", "henry", "iii:", "iv:", "vi:", "ii:"}) >= 2, king


def test_trained_vectors_exported_in_word2vec_formats_load_in_gensim(corpus, skipgram_run, tmp_path):
    from gensim.models import KeyedVectors

    from ptm_jax.evaluate.word_vectors import WordVectors
    from ptm_jax.export.vector_files import write_vectors

    obj, result = skipgram_run
    wv = WordVectors.from_vocab(FAMILY.inspection.word_vectors(jax.device_get(result.state.params), obj.cfg.model),
                                corpus.tokenizer)
    assert wv.words[:3] == ["the", "and", "to"] and len(wv) == corpus.tokenizer.vocab_size - 3
    for fmt, binary in (("text_vectors", False), ("binary_vectors", True)):
        path = write_vectors(tmp_path / fmt, wv.words, wv.vectors, fmt)
        kv = KeyedVectors.load_word2vec_format(str(path), binary=binary)
        assert kv.index_to_key == wv.words
        np.testing.assert_array_equal(kv.vectors, wv.vectors)
        a, b = wv.vectors[wv.words.index("thou")], wv.vectors[wv.words.index("art")]
        assert kv.similarity("thou", "art") == pytest.approx(a @ b / np.linalg.norm(a) / np.linalg.norm(b),
                                                             abs=1e-5)


def test_stop_mid_epoch_and_resume_gives_the_uninterrupted_vectors(corpus, tmp_path):
    vocab = corpus.tokenizer
    cfg = run_config(vocab, "cbow", steps=6, batch=256, hs=True, lr=0.05)
    mesh = make_mesh(MeshConfig(2, 2, 2))
    ref = fit(FAMILY.pretraining.objectives["cbow"](cfg, corpus), cfg.train, mesh, tmp_path / "ref")
    first = fit(FAMILY.pretraining.objectives["cbow"](cfg, corpus), cfg.train, mesh, tmp_path / "run", stop_after=3)
    assert first.step == 3
    resumed = fit(FAMILY.pretraining.objectives["cbow"](cfg, corpus), cfg.train, mesh, tmp_path / "run")
    assert resumed.step == 6
    for a, b in zip(jax.tree.leaves(resumed.state.params), jax.tree.leaves(ref.state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    init = FAMILY.pretraining.objectives["cbow"](cfg, corpus).init(jax.random.key(0), {
        k: v for k, v in FAMILY.pretraining.objectives["cbow"](cfg, corpus).example_batch(2).items()})
    tables = init["params"]["word2vec"]
    assert float(jnp.abs(tables["input"].value).max()) <= 0.5 / 32
    assert float(jnp.abs(tables["output"].value).max()) == 0.0 == float(jnp.abs(tables["hs_output"].value).max())
    assert tables["input"].names == ("vocab", "embed")


@pytest.mark.parametrize("override, field", [("data.negative=0", "data.negative=0 and data.hs=false"),
                                             ("data.window=0", "data.window=0"),
                                             ("model.duplicate_cap=-1", "model.duplicate_cap=-1")])
def test_bad_word2vec_settings_are_config_errors_naming_the_field(override, field):
    from ptm_jax.config_loading import load_config
    from ptm_jax.errors import ConfigError

    assert load_config("word2vec_sg", []).data.window == 5
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config("word2vec_sg", [override])


def test_sampling_tables_are_built_once_as_an_artifact_read_back_and_met_by_every_process(corpus, tmp_path):
    from ptm_jax.families.word2vec.artifacts import ARTIFACT, TABLES_FILE, build_sampling_tables

    vocab = corpus.tokenizer
    cfg = run_config(vocab, "cbow", steps=2, batch=64, hs=True)
    built = build_sampling_tables(cfg, corpus, tmp_path)
    files = list(tmp_path.glob(f"t-*/{TABLES_FILE}"))
    assert len(files) == 1 and ARTIFACT in FAMILY.pretraining.artifacts
    stamp = files[0].stat().st_mtime_ns
    again = build_sampling_tables(cfg, corpus, tmp_path)                 # read, not rebuilt
    met = []  # a process that arrives after process 0 finished still meets it at the barrier (else: a hang)
    build_sampling_tables(cfg, corpus, tmp_path, process_index=1, barrier=met.append)
    assert met == ["word2vec_sampling_tables"]
    assert files[0].stat().st_mtime_ns == stamp and list(tmp_path.glob("t-*")) == [files[0].parent]
    fresh = Tables.build(vocab.counts, specials(vocab), sample=1e-3, negative=NEG, hs=True)
    for k in ("keep", "cdf", "points", "codes", "lengths"):
        np.testing.assert_array_equal(getattr(again, k), getattr(fresh, k), err_msg=k)
        np.testing.assert_array_equal(getattr(built, k), getattr(fresh, k), err_msg=k)
    assert again.depth == fresh.depth > 10 and again.keep[vocab.token_to_id("the")] < 0.2
    with_artifact = types.SimpleNamespace(**vars(corpus), artifacts={ARTIFACT: again})
    assert FAMILY.pretraining.objectives["cbow"](cfg, with_artifact).tables is again
    other = run_config(vocab, "cbow", steps=2, batch=64, hs=False)         # other settings: another key
    assert build_sampling_tables(other, corpus, tmp_path).points is None
    assert len(list(tmp_path.glob(f"t-*/{TABLES_FILE}"))) == 2


def test_exported_vectors_initialise_word2vec_and_nnlm_tables_with_coverage(corpus, skipgram_run, tmp_path,
                                                                          caplog):
    import dataclasses
    import logging

    from ptm_jax.config_loading import load_config
    from ptm_jax.errors import ConfigError, DataError
    from ptm_jax.evaluate.word_vectors import WordVectors
    from ptm_jax.export.vector_files import write_vectors
    from ptm_jax.families.registry import get

    obj, result = skipgram_run
    vocab = corpus.tokenizer
    wv = WordVectors.from_vocab(FAMILY.inspection.word_vectors(jax.device_get(result.state.params), obj.cfg.model),
                                vocab)
    half = len(wv) // 2                                           # the file holds the commonest half of the words
    paths = {fmt: write_vectors(tmp_path / fmt, wv.words[:half], wv.vectors[:half], fmt)
             for fmt in ("text_vectors", "binary_vectors")}
    ids = [vocab.token_to_id(w) for w in wv.words[:half]]
    rest = [vocab.token_to_id(w) for w in wv.words[half:]]
    cfg = run_config(vocab, steps=2, batch=64)
    for fmt, path in paths.items():
        c = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, init_vectors=str(path)))
        with caplog.at_level(logging.INFO, logger="ptm_jax.export.vector_files"):
            w2v = FAMILY.pretraining.objectives["skipgram"](c, corpus)
        assert f"{half} of the {len(wv)} vocabulary words found (50.0%)" in caplog.text
        init = jax.jit(w2v.init)(jax.random.key(3), w2v.example_batch(2))       # one compile, not one per op
        table = np.asarray(init["params"]["word2vec"]["input"].value)
        np.testing.assert_array_equal(table[ids], wv.vectors[:half], err_msg=fmt)
        assert 0 < np.abs(table[rest]).max() <= 0.5 / 32                 # word2vec.c's init where not found
    nn_cfg = load_config("nnlm_tiny", [f"model.vocab_size={vocab.vocab_size}", "model.embed_dim=32",
                                       f"model.init_vectors={paths['text_vectors']}"])
    nnlm = get("nnlm").pretraining.objectives["nnlm"](nn_cfg, corpus)
    c_table = np.asarray(jax.jit(nnlm.init)(jax.random.key(3), nnlm.example_batch(2))["params"]["nnlm"]["embedding"]
                         .value)
    np.testing.assert_array_equal(c_table[ids], wv.vectors[:half])
    assert 0 < np.abs(c_table[rest]).max() < 0.05
    small = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, dim=16,
                                                               init_vectors=str(paths["text_vectors"])))
    with pytest.raises(ConfigError, match="model.init_vectors=.*32 dimensions but the model's embedding table has 16"):
        FAMILY.pretraining.objectives["skipgram"](small, corpus)
    lines = paths["text_vectors"].read_text().splitlines()
    lines[5] = " ".join(lines[5].split()[:-1])                               # a ragged row on line 6
    bad = tmp_path / "ragged.txt"
    bad.write_text("\n".join(lines) + "\n")
    ragged = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, init_vectors=str(bad)))
    with pytest.raises(DataError, match=r"ragged\.txt:6"):
        FAMILY.pretraining.objectives["skipgram"](ragged, corpus)
    missing = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, init_vectors=str(tmp_path / "no.txt")))
    with pytest.raises(ConfigError, match="model.init_vectors=.*no such vector file"):
        FAMILY.pretraining.objectives["skipgram"](missing, corpus)


@pytest.mark.parametrize("objective, shared, slots", [("skipgram", False, 0), ("cbow", True, 0), ("skipgram", True, 2)])
def test_sparse_row_updates_and_the_fused_cpu_kernel_equal_the_dense_gradient_step(corpus, objective, shared, slots):
    """Two SGD steps at a large rate (every table moves; duplicate cap 4 binds) by three implementations of the
    same batch semantics: autodiff through the tables + optax (dense), the XLA row gradients + scatter-add
    (``model.kernel='xla'``), and the fused C++ kernel (``model.kernel='cpu'``, ``cpu_kernel.py``); with 2 pair
    slots a row the blocks overflow (centers that train with some or none of their pairs)."""
    import dataclasses

    from ptm_jax.parallel.feed import to_global
    from ptm_jax.train.loop import compile_objective
    from ptm_jax.train.metrics import reduce_terms

    cfg = run_config(corpus.tokenizer, objective, steps=10, batch=128, hs=True, lr=0.5)
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, shared_negatives=shared, pack_rows=32,
                                                            pair_slots=slots),
                              model=dataclasses.replace(cfg.model, duplicate_cap=4))
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    out = {}
    sides = (("dense", False, "xla"),) if not slots else ()        # the overflow case: XLA against the kernel
    for name, sparse, kernel in sides + (("xla", True, "xla"), ("kernel", True, "cpu")):
        c = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, sparse_update=sparse, kernel=kernel))
        obj = FAMILY.pretraining.objectives[objective](c, corpus)
        assert obj.sparse_rows is sparse and obj.block == 32
        compiled = compile_objective(obj, c.train, mesh)
        state = compiled.init_fn(jax.random.key(0))
        init = jax.device_get(state.params)["params"]["word2vec"]
        it = obj.train_batches(0, 128, 0, 1)
        for _ in range(2):
            state, m = compiled.train_step(state, to_global(next(it), mesh, compiled.batch_keys), jax.random.key(0))
        out[name] = jax.device_get(state.params)["params"]["word2vec"], jax.device_get(m), int(state.step)
    de, de_m, de_step = out["dense" if not slots else "xla"]
    assert (float(np.asarray(de_m["w2v_dropped_pairs"]).ravel()[0]) > 0) == (slots == 2)
    for name in ("xla", "kernel") if not slots else ("kernel",):
        sp, sp_m, sp_step = out[name]
        sp_r, de_r = reduce_terms(sp_m), reduce_terms(de_m)
        assert sp_step == de_step == 2
        for k in ("loss", "loss_sum"):
            assert sp_r[k] == pytest.approx(de_r[k], rel=1e-5), k
        # the logged loss is the mean per pair (skip-gram) or per center (CBOW), the summed loss beside it
        count = float(np.asarray(sp_m["loss"][1]))
        assert count > 50 and (objective == "cbow" or count == sp_r["w2v_pairs"])   # CBOW: live centers
        assert sp_r["loss"] == sp_r["w2v_loss"] == pytest.approx(sp_r["loss_sum"] / count, rel=1e-6)
        if name == "kernel":
            for k in ("grad_norm", "grad_norm/input", "grad_norm/output", "grad_norm/hs_output", "w2v_pairs"):
                assert float(np.asarray(sp_m[k]).ravel()[0]) == pytest.approx(
                    float(np.asarray(out["xla"][1][k]).ravel()[0]), rel=1e-5), k
        for k in ("input", "output", "hs_output"):
            assert np.abs(de[k] - init[k]).max() > 1e-3, k                     # the steps moved every table
            np.testing.assert_allclose(sp[k], de[k], atol=1e-6, err_msg=f"{name} {k}")
    wd = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, weight_decay=0.01))
    assert not FAMILY.pretraining.objectives[objective](wd, corpus).sparse_rows               # decay: the dense path


def test_a_changed_header_beside_a_native_source_builds_a_new_library(tmp_path, monkeypatch):
    """``native.build`` keys its cache on the headers beside a source too (``rows_cpu.cc`` includes
    ``rows_math.h``): editing only the header must not load the stale library."""
    import ctypes

    from ptm_jax.families.word2vec import native

    monkeypatch.setenv("PTM_KERNEL_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "src"
    src.mkdir()
    (src / "probe.cc").write_text('#include "probe.h"\nextern "C" int ptm_probe() { return kValue; }\n')
    if not native.compilers():
        pytest.skip("no C++ compiler on this machine")
    compiler = native.compilers()[0]
    built = []
    for value in (3, 7):
        (src / "probe.h").write_text(f"#pragma once\nconstexpr int kValue = {value};\n")
        path = native.build(src / "probe.cc", compiler)
        built.append((path, ctypes.CDLL(str(path)).ptm_probe()))
    assert built[0][0] != built[1][0] and [v for _, v in built] == [3, 7]
    assert native.build(src / "probe.cc", compiler) == built[1][0]          # unchanged: the cached library


def test_the_fused_kernel_runs_only_where_it_applies_and_says_why_not(corpus, monkeypatch, caplog):
    from ptm_jax.errors import ConfigError
    from ptm_jax.families.word2vec import cpu_kernel

    assert cpu_kernel.available() and not cpu_kernel.applies("xla")
    assert cpu_kernel.applies("auto") and cpu_kernel.applies("cpu")                 # no mesh: one device
    with jax.sharding.use_abstract_mesh(make_mesh(MeshConfig(2, 2, 2)).abstract_mesh):
        assert not cpu_kernel.applies("auto")                                        # sharded tables: XLA
        with pytest.raises(ConfigError, match="model.kernel='cpu' needs the CPU backend and a one-device mesh"):
            cpu_kernel.applies("cpu")
    monkeypatch.setattr(cpu_kernel, "_load", lambda: (False, "no C++ compiler found (set $CXX, or install g++)"))
    with caplog.at_level("WARNING", logger="ptm_jax.families.word2vec.cpu_kernel"):
        assert not cpu_kernel.applies("auto")
    assert "the XLA path runs instead: no C++ compiler found" in caplog.text
    with pytest.raises(ConfigError, match="model.kernel='cpu': no C\\+\\+ compiler found"):
        cpu_kernel.applies("cpu")
    from ptm_jax.config_loading import load_config

    with pytest.raises(ConfigError, match="model.kernel='gpu' must be 'auto', 'xla' or 'cpu'"):
        load_config("word2vec_sg", ["model.kernel=gpu"])
