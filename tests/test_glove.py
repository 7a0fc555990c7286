"""GloVe as a family package (ptm_jax/families/glove; Pennington et al. 2014; stanfordnlp/GloVe cooccur.c and
glove.c): the co-occurrence counts of a hand-checkable text are cooccur.c's formula; the pass sharded over two
"processes" (threads meeting at a real barrier) writes the same bytes as one process; f(x) and the loss equal a
numpy reference; a tiny GloVe trained through ``train.loop.fit`` on tiny-shakespeare finds known neighbours;
stop + resume on the (2,2,2) mesh ends with the uninterrupted run's vectors; bad input gets clear errors."""
import threading
import types

import jax
import numpy as np
import pytest

from ptm_jax.config import DataConfig, MeshConfig, RunConfig, TrainConfig
from ptm_jax.data.cache import build_or_load_cache
from ptm_jax.data.pretraining.source import ArraySource, SubsetSource
from ptm_jax.data.word_vocab import build_word_vocab
from ptm_jax.errors import ConfigError, DataError
from ptm_jax.train.metrics import reduce_terms
from ptm_jax.families import registry
from ptm_jax.families.glove import FAMILY, GloveConfig, GloveDataConfig, hooks
from ptm_jax.families.glove import cooccur
from ptm_jax.families.glove.data import TripleOrder
from ptm_jax.families.glove.objective import glove_costs, weighting
from ptm_jax.parallel.mesh import make_mesh
from ptm_jax.train.loop import fit

VOCAB, DIM, WINDOW, BATCH, EPOCHS = 1000, 24, 5, 4096, 6


def brute_force(docs, window, symmetric=True):
    """cooccur.c's loop written out: in-vocabulary words only (ids >= 3), 1/d for d = 1..window, per document."""
    X = {}
    for doc in docs:
        words = [t for t in doc if t >= 3]
        for j, w2 in enumerate(words):
            for k in range(max(0, j - window), j):
                w1 = words[k]
                X[(w1, w2)] = X.get((w1, w2), 0.0) + 1.0 / (j - k)
                if symmetric:
                    X[(w2, w1)] = X.get((w2, w1), 0.0) + 1.0 / (j - k)
    return X


@pytest.mark.parametrize("symmetric", [True, False])
def test_cooccurrence_counts_of_a_tiny_text_equal_cooccur_c_formula(symmetric):
    # ids 0-2 are specials (dropped before positions are counted, as cooccur.c drops out-of-vocabulary words)
    docs = [[[3, 4, 1, 5], [3, 6]], [[4, 4, 2, 7, 3]], [[5]]]
    src = ArraySource(docs)
    m = cooccur.count_documents(src, np.arange(3), 8, 3, unit=6, symmetric=symmetric)
    got = cooccur.to_triples(m, 6)
    want = brute_force([np.concatenate(d) for d in docs], 3, symmetric)
    assert {(int(r), int(c)): v for r, c, v in zip(got.rows, got.cols, got.values)} == pytest.approx(want)
    # by hand: document 0 is the stream 3 4 5 3 6 (the <unk> 1 dropped): 3 is two before 5 (1/2), 5 one before
    # 3 (1/1), 3 three before 3 (1/3); symmetric counts add the mirror image
    assert want[(3, 5)] == pytest.approx(1.5 if symmetric else 0.5)
    assert want[(5, 3)] == pytest.approx(1.5 if symmetric else 1.0)
    assert want[(3, 3)] == pytest.approx(2 / 3 if symmetric else 1 / 3)
    assert (7, 5) not in want and (5, 7) not in want  # documents never share a window
    keys = got.rows.astype(np.int64) * 8 + got.cols
    assert np.all(np.diff(keys) > 0)  # sorted by (row, col), no duplicates
    assert got.counts.dtype == np.int64 and got.unit == 6  # exact: 1/d is 6/d units of 1/6


@pytest.fixture(scope="module")
def corpus(shared_data, tmp_path_factory):
    path = shared_data / "corpus/tinyshakespeare/input.txt"
    out = tmp_path_factory.mktemp("glove_corpus")
    vocab = build_word_vocab(path.read_text(encoding="utf-8").splitlines(), out, max_vocab=VOCAB, lower_case=True)
    data = GloveDataConfig(corpus=str(path), format="lines", window=WINDOW, seed=3)
    cache = build_or_load_cache(data, vocab, out / "cache")
    c = types.SimpleNamespace(tokenizer=vocab, cache=cache, train=SubsetSource(cache, np.arange(cache.num_docs)),
                              eval=None, data=data, out=out)
    cfg = types.SimpleNamespace(data=data, model=GloveConfig(vocab_size=vocab.vocab_size, dim=DIM))
    c.artifacts = {"cooccurrence": cooccur.build_cooccurrence(cfg, c, out / "artifacts" / "cooccurrence")}
    return c


def test_sharded_pass_writes_the_one_process_bytes(corpus, tmp_path):
    one = (next((corpus.out / "artifacts" / "cooccurrence").glob("x-*")) / cooccur.MATRIX_FILE).read_bytes()
    cfg = types.SimpleNamespace(data=corpus.data, model=GloveConfig(vocab_size=corpus.tokenizer.vocab_size))
    meet = threading.Barrier(2)
    results = {}

    def process(p):
        results[p] = cooccur.build_cooccurrence(cfg, corpus, tmp_path, process_index=p, process_count=2,
                                                barrier=lambda name: meet.wait(timeout=120))

    threads = [threading.Thread(target=process, args=(p,)) for p in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    folder = next(tmp_path.glob("x-*"))
    assert (folder / cooccur.MATRIX_FILE).read_bytes() == one
    assert sorted(f.name for f in folder.iterdir()) == ["COMPLETE", cooccur.MATRIX_FILE]  # partials removed
    for p in (0, 1):
        np.testing.assert_array_equal(results[p].counts, corpus.artifacts["cooccurrence"].counts)
    # each half alone is a different matrix, the two add up to the whole
    halves = [cooccur.count_documents(corpus.train, cooccur.shard_docs(corpus.train.num_docs, p, 2),
                                      cfg.model.vocab_size, WINDOW, unit=corpus.data.weight_unit) for p in (0, 1)]
    assert halves[0].nnz > 0 and halves[1].nnz > 0 and halves[0].nnz != halves[1].nnz
    merged = cooccur.merge([cooccur.to_triples(h, corpus.data.weight_unit) for h in halves])
    assert merged.to_bytes() == corpus.artifacts["cooccurrence"].to_bytes()
    # a second call reuses the folder (it would fail on a missing barrier partner if it counted again)
    again = cooccur.build_cooccurrence(cfg, corpus, tmp_path, process_index=0, process_count=2,
                                       barrier=lambda name: pytest.fail("a complete artifact must not be rebuilt"))
    assert again.to_bytes() == one


def test_weighting_and_loss_equal_a_numpy_reference():
    x = np.array([0.5, 3.0, 99.0, 100.0, 250.0], np.float32)
    f = np.minimum(1.0, (x.astype(np.float64) / 100.0) ** 0.75)
    np.testing.assert_allclose(np.asarray(weighting(x, 100.0, 0.75)), f, rtol=1e-6)
    assert f[3] == 1.0 and f[4] == 1.0 and f[0] == pytest.approx(0.005 ** 0.75)
    cfg = RunConfig(objective="glove", model=GloveConfig(vocab_size=9, dim=4, x_max=100.0),
                    data=GloveDataConfig(), train=TrainConfig(optimizer="adagrad"))
    cooc = cooccur.Cooccurrence(np.array([3, 4], np.int32), np.array([4, 3], np.int32), np.array([2, 2]), 1, 9)
    obj = FAMILY.pretraining.objectives["glove"](cfg, types.SimpleNamespace(artifacts={"cooccurrence": cooc}))
    batch = {"x": x, "row": np.array([3, 4, 5, 8, 3], np.int32), "col": np.array([4, 3, 3, 6, 8], np.int32)}
    params = jax.tree.map(np.asarray, obj.init(jax.random.key(1), obj.example_batch(5)))
    params = jax.tree.map(lambda v: getattr(v, "value", v), params, is_leaf=lambda v: hasattr(v, "value"))
    t = params["params"]["glove"]
    assert t["word"].shape == (9, 4) and np.abs(t["word"]).max() <= 0.5 / 4  # glove.c: uniform [-0.5, 0.5] / d
    r, c = batch["row"], batch["col"]
    pred = (t["word"][r] * t["context"][c]).sum(1) + t["word_bias"][r] + t["context_bias"][c]
    want = 0.5 * f * (pred - np.log(x.astype(np.float64))) ** 2
    loss, terms = obj.loss(params, batch, None, obj.normalizers(batch), train=True)
    assert float(loss) == pytest.approx(want.sum(), rel=1e-5)
    assert float(terms["glove_loss"][0]) / float(terms["glove_loss"][1]) == pytest.approx(want.mean(), rel=1e-5)
    # logged: "loss" is the mean per entry (glove.c's cost), the summed loss that is differentiated is "loss_sum"
    assert reduce_terms(terms)["loss"] == pytest.approx(want.mean(), rel=1e-5)
    assert reduce_terms(terms)["loss_sum"] == pytest.approx(want.sum(), rel=1e-5)
    np.testing.assert_allclose(np.asarray(glove_costs(pred, x, 100.0, 0.75)), want, rtol=1e-5)
    np.testing.assert_allclose(hooks.word_vectors(params["params"]), t["word"] + t["context"])  # W + W~


def test_entry_order_is_a_fresh_permutation_per_epoch_and_splits_over_processes(corpus):
    cooc = corpus.artifacts["cooccurrence"]
    order = TripleOrder(cooc, seed=3)
    n = cooc.nnz
    e0 = order.entries(0, n)
    assert sorted(e0.tolist()) == list(range(n)) and not np.array_equal(e0, np.arange(n))
    np.testing.assert_array_equal(order.entries(n, n)[:5], TripleOrder(cooc, 3).permutation(1)[:5])
    straddle = order.entries(n - 7, 10)  # a batch across the epoch boundary
    np.testing.assert_array_equal(straddle, np.concatenate([e0[-7:], order.permutation(1)[:3]]))
    from ptm_jax.families.glove.data import glove_dataset

    G = 64
    whole = next(glove_dataset(TripleOrder(cooc, 3), start_index=3 * G, global_batch=G).as_numpy_iterator())
    parts = [next(glove_dataset(TripleOrder(cooc, 3), start_index=3 * G, global_batch=G, process_index=p,
                                process_count=2).as_numpy_iterator()) for p in (0, 1)]
    for k in ("x", "row", "col"):
        np.testing.assert_array_equal(np.concatenate([p[k] for p in parts]), whole[k])
    i = order.entries(3 * G, G)
    np.testing.assert_array_equal(whole["row"], cooc.rows[i])
    np.testing.assert_allclose(whole["x"], cooc.values[i].astype(np.float32))


def run_config(corpus, steps, **train) -> RunConfig:
    t = dict(batch_size=BATCH, steps=steps, optimizer="adagrad", learning_rate=1.0, adagrad_initial_accumulator=400.0,
             lr_decay="constant", warmup_steps=0, weight_decay=0.0, clip_norm=0.0, log_every=steps, eval_every=0,
             checkpoint_every=10 ** 6, keep_checkpoints=2, progress_bar=False)
    t.update(train)
    return RunConfig(objective="glove", model=GloveConfig(vocab_size=corpus.tokenizer.vocab_size, dim=DIM,
                                                          x_max=10.0),
                     data=corpus.data, train=TrainConfig(**t))


def test_tiny_glove_trains_on_real_text_and_finds_known_neighbours(corpus, tmp_path):
    steps = int(EPOCHS * corpus.artifacts["cooccurrence"].nnz / BATCH)
    cfg = run_config(corpus, steps)
    obj = FAMILY.pretraining.objectives["glove"](cfg, corpus)
    result = fit(obj, cfg.train, make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1]), tmp_path)
    assert result.step == steps and result.train_metrics["glove_loss"] < 0.06
    from ptm_jax.evaluate.word_vectors import WordVectors

    wv = WordVectors.from_vocab(hooks.word_vectors(jax.device_get(result.state.params)["params"]), corpus.tokenizer)
    unit = wv.vectors / np.linalg.norm(wv.vectors, axis=1, keepdims=True)
    index = {w: i for i, w in enumerate(wv.words)}

    def top(word, k=6):
        sims = unit @ unit[index[word]]
        sims[index[word]] = -2
        return [wv.words[i] for i in np.argsort(-sims)[:k]]

    # Early Modern English second-person verb forms sit together; kings by name; he ~ she
    assert len(set(top("thou")) & {"hast", "art", "shalt", "wilt", "dost", "didst", "hadst"}) >= 2, top("thou")
    assert len(set(top("king")) & {"richard", "edward", "henry", "duke", "queen"}) >= 2, top("king")
    assert "she" in top("he"), top("he")


def test_stop_and_resume_on_the_2_2_2_mesh_gives_the_uninterrupted_vectors(corpus, tmp_path):
    cfg = run_config(corpus, 12, batch_size=1024, checkpoint_every=100)
    mesh = make_mesh(MeshConfig(2, 2, 2))
    ref = fit(FAMILY.pretraining.objectives["glove"](cfg, corpus), cfg.train, mesh, tmp_path / "ref")
    first = fit(FAMILY.pretraining.objectives["glove"](cfg, corpus), cfg.train, mesh, tmp_path / "cut", stop_after=5)
    assert first.step == 5
    resumed = fit(FAMILY.pretraining.objectives["glove"](cfg, corpus), cfg.train, mesh, tmp_path / "cut")
    assert resumed.step == 12
    a = hooks.word_vectors(jax.device_get(resumed.state.params)["params"])
    b = hooks.word_vectors(jax.device_get(ref.state.params)["params"])
    np.testing.assert_array_equal(a, b)
    table = ref.state.params["params"]["glove"]["word"]
    assert table.sharding.spec[0] == "tensor"  # the vocabulary axis is sharded through the rules table


def test_registered_family_and_clear_errors(corpus, tmp_path):
    assert registry.family_of_objective("glove") is FAMILY and "word_vectors" in FAMILY.capabilities
    assert FAMILY.pretraining.data_config is GloveDataConfig and issubclass(GloveDataConfig, DataConfig)
    with pytest.raises(DataError, match="min_count=1000000"):
        build_word_vocab(["to be or not to be"], tmp_path, min_count=1_000_000)
    # words in the vocabulary but never two within the window of each other in one document
    src = ArraySource([[[3]], [[4]], [[1, 5]]])
    lonely = types.SimpleNamespace(train=SubsetSource(src, np.arange(3)), cache=types.SimpleNamespace(meta={}))
    cfg = types.SimpleNamespace(data=GloveDataConfig(corpus="three-words.txt"), model=GloveConfig(vocab_size=8))
    with pytest.raises(DataError, match=r"three-words.txt: no two vocabulary words .* data.window=15"):
        cooccur.build_cooccurrence(cfg, lonely, tmp_path / "lonely")
    # two "processes": both raise the same error (process 0 used to raise alone, leaving 1 at the barrier)
    meet, errors = threading.Barrier(2, timeout=60), {}

    def process(p):
        try:
            cooccur.build_cooccurrence(cfg, lonely, tmp_path / "lonely2", process_index=p, process_count=2,
                                       barrier=lambda name: meet.wait())
        except DataError as e:
            errors[p] = str(e)

    threads = [threading.Thread(target=process, args=(p,)) for p in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(errors) == [0, 1] and errors[0] == errors[1] and "no two vocabulary words" in errors[1]
    with pytest.raises(ConfigError, match="data.window=0"):
        GloveDataConfig(window=0).validate()
    with pytest.raises(ConfigError, match="model.x_max=0"):
        GloveConfig(x_max=0).validate()
    with pytest.raises(ConfigError, match="model.vocab_size=99"):
        FAMILY.pretraining.objectives["glove"](
            RunConfig(objective="glove", model=GloveConfig(vocab_size=99), data=corpus.data), corpus)
