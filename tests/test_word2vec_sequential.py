"""word2vec's sequential updates (``model.updates='sequential'``, ``families/word2vec/sequential.h``, and in parts,
``sequential_parts.h``): each kernel step against word2vec.c's pair-by-pair loop in numpy
(``tests/sequential_reference.py``), the configuration errors, and resuming mid-epoch."""
import jax
import numpy as np
import pytest

from ptm_jax.config import MeshConfig
from ptm_jax.families.word2vec import FAMILY
from ptm_jax.parallel.mesh import make_mesh
from ptm_jax.train.loop import fit
from ptm_jax.train.metrics import reduce_terms
from sequential_reference import in_parts, word2vec_sequential
from test_word2vec import corpus, run_config  # noqa: F401  (the fixture: tiny-shakespeare's words, count >= 5)


@pytest.mark.parametrize("objective, shared", [("skipgram", True), ("skipgram", False), ("cbow", True)])
def test_sequential_updates_apply_each_pair_in_stream_order_as_word2vec_c(corpus, objective, shared):
    """``model.updates='sequential'``: each of three steps of the kernel (negatives and the Huffman path, a large
    rate so that every table moves) equals word2vec.c's pair-by-pair loop over the same batch in numpy, from the
    tables the kernel started the step with; the loss is the sum of the pairs' losses; a rerun is bit-equal."""
    import dataclasses

    from ptm_jax.parallel.feed import to_global
    from ptm_jax.train.loop import compile_objective

    cfg = run_config(corpus.tokenizer, objective, steps=10, batch=128, hs=True, lr=0.5)
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, shared_negatives=shared, pack_rows=32),
                              model=dataclasses.replace(cfg.model, updates="sequential"))
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    runs = []
    for _ in range(2):
        obj = FAMILY.pretraining.objectives[objective](cfg, corpus)
        compiled = compile_objective(obj, cfg.train, mesh)
        state = compiled.init_fn(jax.random.key(0))
        init = jax.device_get(state.params)["params"]["word2vec"]
        it = obj.train_batches(0, 128, 0, 1)
        for step in range(3):
            before = jax.device_get(state.params)["params"]["word2vec"]
            host = next(it)
            state, m = compiled.train_step(state, to_global(host, mesh, compiled.batch_keys), jax.random.key(0))
            after = jax.device_get(state.params)["params"]["word2vec"]
            if runs:
                continue
            want, loss = word2vec_sequential(host, before, float(m["learning_rate"]), objective == "cbow", 32)
            assert reduce_terms(m)["loss_sum"] == pytest.approx(loss, rel=1e-5), step   # the summed terms
            assert float(m["nonfinite_total"]) == 0
            for k in ("input", "output", "hs_output"):
                np.testing.assert_allclose(after[k], want[k], rtol=0, atol=3e-5, err_msg=f"step {step} {k}")
        for k in ("input", "output", "hs_output"):
            assert np.abs(after[k] - init[k]).max() > 1e-3, k                 # the steps moved every table
        runs.append(after)
    for k in runs[0]:
        np.testing.assert_array_equal(runs[0][k], runs[1][k])


@pytest.mark.parametrize("objective", ["skipgram", "cbow"])
def test_sequential_parts_run_word2vec_c_order_per_part_from_the_batch_start_and_sum_their_moves(corpus, objective):
    """``model.sequential_parts=2`` (negatives and the Huffman path): a kernel step on a real batch of whole
    blocks equals word2vec.c's loop in numpy over each half of the blocks from the step's starting tables, with the
    second half's moves added to the first's result; the loss is the halves' sum; a rerun is bit-equal."""
    import dataclasses

    from ptm_jax.parallel.feed import to_global
    from ptm_jax.train.loop import compile_objective

    cfg = run_config(corpus.tokenizer, objective, steps=10, batch=256, hs=True, lr=0.5)
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, pack_rows=32),
                              model=dataclasses.replace(cfg.model, updates="sequential", sequential_parts=2))
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    obj = FAMILY.pretraining.objectives[objective](cfg, corpus)
    compiled = compile_objective(obj, cfg.train, mesh)
    host = next(obj.train_batches(0, 256, 0, 1))
    assert len(host["center"]) // 32 >= 2
    runs = []
    for _ in range(2):
        state = compiled.init_fn(jax.random.key(0))
        before = jax.device_get(state.params)["params"]["word2vec"]
        state, m = compiled.train_step(state, to_global(host, mesh, compiled.batch_keys), jax.random.key(0))
        runs.append(jax.device_get(state.params)["params"]["word2vec"])
    lr, cbow = float(m["learning_rate"]), objective == "cbow"
    want, loss = in_parts(word2vec_sequential, host, before, lr, cbow, 32, 2)
    whole, _ = word2vec_sequential(host, before, lr, cbow, 32)
    assert max(np.abs(want[k] - whole[k]).max() for k in want) > 1e-3     # two parts are not one order
    assert reduce_terms(m)["loss_sum"] == pytest.approx(loss, rel=1e-5)
    for k in ("input", "output", "hs_output"):
        assert np.abs(runs[0][k] - before[k]).max() > 1e-3, k
        np.testing.assert_allclose(runs[0][k], want[k], rtol=0, atol=3e-5, err_msg=k)
        np.testing.assert_array_equal(runs[0][k], runs[1][k])


def test_sequential_updates_need_the_fused_kernel_and_say_so(corpus):
    """``model.updates='sequential'`` where its kernel cannot run is a ConfigError naming the field and the fix: with
    ``model.kernel='xla'``, a value it does not know, on an 8-device mesh, and off the sparse SGD step (clipping)."""
    import dataclasses

    from ptm_jax.config_loading import load_config
    from ptm_jax.errors import ConfigError

    cfg = run_config(corpus.tokenizer, "skipgram", steps=4, batch=64)
    seq = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, updates="sequential"))

    with pytest.raises(ConfigError, match="model.updates='sequential' runs in the fused CPU kernel only"):
        load_config("word2vec_sg", ["model.updates=sequential", "model.kernel=xla"])
    with pytest.raises(ConfigError, match="model.updates='every' must be 'batch' or 'sequential'"):
        load_config("word2vec_sg", ["model.updates=every"])
    with pytest.raises(ConfigError, match="model.sequential_parts=2 splits the sequential updates; set "
                                          "model.updates='sequential' or model.sequential_parts=1"):
        load_config("word2vec_sg", ["model.sequential_parts=2"])
    with pytest.raises(ConfigError, match="model.sequential_parts=0 must be an integer from 1 to 64"):
        load_config("fasttext_sg", ["model.updates=sequential", "model.sequential_parts=0"])
    with jax.sharding.use_abstract_mesh(make_mesh(MeshConfig(2, 2, 2)).abstract_mesh):
        obj = FAMILY.pretraining.objectives["skipgram"](seq, corpus)
        with pytest.raises(ConfigError, match="model.updates='sequential' needs the CPU backend and a one-device "
                                              "mesh .*8 devices.*set model.updates='batch'"):
            obj.fused_rows(obj.init(jax.random.key(0), obj.example_batch(64)), obj.example_batch(64), {}, 0.1)
    dense = dataclasses.replace(seq, train=dataclasses.replace(seq.train, clip_norm=1.0))
    with pytest.raises(ConfigError, match="model.updates='sequential' runs in the sparse SGD step's kernel, which "
                                          "needs .*or set model.updates='batch'"):
        FAMILY.pretraining.objectives["skipgram"](dense, corpus)


@pytest.mark.parametrize("parts", [1, 2])
def test_sequential_updates_stop_mid_epoch_and_resume_to_the_uninterrupted_vectors(corpus, tmp_path, parts):
    """``model.updates='sequential'`` (in one part, and in two side by side) through ``fit`` on one CPU device: a
    run stopped at step 3 of 6 and resumed from its checkpoint ends bit-equal to the uninterrupted run, and differs
    from the batched updates' run."""
    import dataclasses

    cfg = run_config(corpus.tokenizer, "skipgram", steps=6, batch=256, hs=True, lr=0.05)
    seq = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, updates="sequential",
                                                             sequential_parts=parts))
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    ref = fit(FAMILY.pretraining.objectives["skipgram"](seq, corpus), seq.train, mesh, tmp_path / "ref")
    first = fit(FAMILY.pretraining.objectives["skipgram"](seq, corpus), seq.train, mesh, tmp_path / "run", stop_after=3)
    resumed = fit(FAMILY.pretraining.objectives["skipgram"](seq, corpus), seq.train, mesh, tmp_path / "run")
    assert (first.step, resumed.step) == (3, 6)
    for a, b in zip(jax.tree.leaves(resumed.state.params), jax.tree.leaves(ref.state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    batched = fit(FAMILY.pretraining.objectives["skipgram"](cfg, corpus), cfg.train, mesh, tmp_path / "batched")
    diff = np.abs(np.asarray(batched.state.params["params"]["word2vec"]["input"])
                  - np.asarray(ref.state.params["params"]["word2vec"]["input"])).max()
    assert diff > 1e-4
