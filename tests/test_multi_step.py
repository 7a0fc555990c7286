"""``train.steps_per_call`` (ptm_jax/train/multi_step.py): k steps in one compiled call give the parameters of k
single steps bit for bit (on a (2,2,2) mesh, through a shorter last call, and in the fused CPU kernel); records
land at the end of the call that reaches their step; a stop and resume ends with the uninterrupted run's
vectors; the call's non-finite streak is the longest in it; word2vec and fastText build a call's batches in one
go (the same arrays), other families' are stacked. Mostly word2vec on tiny-shakespeare (the corpus of
tests/test_word2vec.py)."""
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ptm_jax.config import MeshConfig, RunConfig, TokenizerConfig, TrainConfig
from ptm_jax.config_loading import load_config
from ptm_jax.errors import ConfigError
from ptm_jax.families.word2vec import FAMILY, Word2VecConfig, Word2VecDataConfig
from ptm_jax.parallel.mesh import make_mesh
from ptm_jax.train.loop import fit
from ptm_jax.train.multi_step import active_mask, make_multi_step
from test_word2vec import corpus  # noqa: F401  (the fixture: tiny-shakespeare's words, count >= 5)

STEPS, BATCH = 10, 256


def config(vocab, k: int, objective: str = "skipgram", updates: str = "batch") -> RunConfig:
    return RunConfig(objective=objective, model=Word2VecConfig(vocab_size=vocab.vocab_size, dim=32, updates=updates),
                     data=Word2VecDataConfig(window=5, sample=1e-3, negative=5, seed=1), tokenizer=TokenizerConfig(),
                     train=TrainConfig(batch_size=BATCH, steps=STEPS, optimizer="sgd", learning_rate=0.025,
                                       lr_decay="bert", warmup_steps=0, min_lr_ratio=1e-4, weight_decay=0.0,
                                       clip_norm=0.0, log_every=5, eval_every=0, checkpoint_every=10 ** 6,
                                       progress_bar=False, steps_per_call=k))


def records(stage_dir) -> dict[int, dict]:
    rows = [json.loads(x) for x in (stage_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in rows if r.get("split") == "train"}


def test_four_steps_a_call_give_the_single_step_parameters_and_records_on_a_mesh(corpus, tmp_path):
    mesh = make_mesh(MeshConfig(2, 2, 2))
    runs = {}
    for k in (1, 4):
        cfg = config(corpus.tokenizer, k)
        runs[k] = fit(FAMILY.pretraining.objectives["skipgram"](cfg, corpus), cfg.train, mesh, tmp_path / f"k{k}")
        assert runs[k].step == STEPS
    for a, b in zip(jax.tree.leaves(runs[1].state.params), jax.tree.leaves(runs[4].state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # the same step, the same adds: bit-equal
    one, four = records(tmp_path / "k1"), records(tmp_path / "k4")
    assert sorted(one) == [5, 10]
    assert sorted(four) == [8, 10]  # calls end at 4, 8, 10: step 5's record comes at the end of the call to 8
    assert four[10]["w2v_loss"] == one[10]["w2v_loss"] and four[10]["learning_rate"] == one[10]["learning_rate"]


def test_four_steps_a_call_of_the_fused_cpu_kernel_give_the_single_step_vectors_bit_equal(corpus, tmp_path):
    """The sequential updates run in the fused CPU kernel (an XLA FFI call), on one device: inside the call's scan
    it applies the same updates in the same order."""
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    params = {}
    for k in (1, 4):
        cfg = config(corpus.tokenizer, k, "cbow", "sequential")
        params[k] = fit(FAMILY.pretraining.objectives["cbow"](cfg, corpus), cfg.train, mesh,
                        tmp_path / f"k{k}").state.params
    for a, b in zip(jax.tree.leaves(params[1]), jax.tree.leaves(params[4])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_stop_and_resume_at_four_steps_a_call_ends_with_the_uninterrupted_vectors(corpus, tmp_path):
    mesh = make_mesh(MeshConfig(2, 2, 2))
    cfg = config(corpus.tokenizer, 4)
    ref = fit(FAMILY.pretraining.objectives["skipgram"](cfg, corpus), cfg.train, mesh, tmp_path / "ref")
    first = fit(FAMILY.pretraining.objectives["skipgram"](cfg, corpus), cfg.train, mesh, tmp_path / "run", stop_after=4)
    assert first.step == 4
    resumed = fit(FAMILY.pretraining.objectives["skipgram"](cfg, corpus), cfg.train, mesh, tmp_path / "run")
    assert resumed.step == STEPS
    for a, b in zip(jax.tree.leaves(resumed.state.params), jax.tree.leaves(ref.state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_call_runs_only_its_active_steps_and_reports_its_longest_nonfinite_streak():
    def step(state, batch, rng):  # a pure step: adds the batch; a negative batch is a "non-finite" step
        bad = batch["x"][0] < 0
        streak = jnp.where(bad, state["streak"] + 1, 0)
        return {"sum": state["sum"] + batch["x"].sum(), "streak": streak}, {"nonfinite_streak": streak,
                                                                            "loss": batch["x"].sum()}

    multi = jax.jit(make_multi_step(step))
    state = {"sum": jnp.zeros(()), "streak": jnp.zeros((), jnp.int32)}
    x = jnp.array([[-1.0], [-2.0], [3.0], [4.0]])
    out, metrics = multi(state, {"x": x}, jax.random.key(0), jnp.asarray(active_mask(4, 4)))
    assert float(out["sum"]) == 4.0 and int(metrics["nonfinite_streak"]) == 2 and float(metrics["loss"]) == 4.0
    out, metrics = multi(state, {"x": x}, jax.random.key(0), jnp.asarray(active_mask(2, 4)))
    assert float(out["sum"]) == -3.0 and int(out["streak"]) == 2 and float(metrics["loss"]) == -2.0


def test_word2vec_builds_a_group_in_one_call_equal_to_its_batches_stacked_for_one_and_two_processes(corpus):
    cfg = config(corpus.tokenizer, 4)
    cfg.data.pack_rows = 64  # blocks of 64 rows: two processes hold 2 blocks of each 256-row batch
    obj = FAMILY.pretraining.objectives["skipgram"](cfg, corpus)
    for pc in (1, 2):
        for pi in range(pc):
            singles = obj.train_batches(3 * BATCH, BATCH, pi, pc)
            group = next(obj.train_groups(3 * BATCH, BATCH, 4, pi, pc))
            stacked = [next(singles) for _ in range(4)]
            for name, arr in group.items():
                assert arr.shape == (4, BATCH // pc) + stacked[0][name].shape[1:]
                np.testing.assert_array_equal(arr, np.stack([b[name] for b in stacked]), err_msg=name)


FAST_TEXT = ["data.format=lines", "data.eval_documents=0", "tokenizer.min_count=5", "tokenizer.vocab_size=4000",
             "model.vocab_size=4000", "model.dim=16", "model.bucket=5000", "train.batch_size=512"]


@pytest.mark.parametrize("preset, overrides", [("fasttext_tiny", FAST_TEXT), ("nnlm_tiny", ["train.eval_every=3"])],
                         ids=["fasttext_groups", "nnlm_stacked_with_adam_and_evaluation"])
def test_ptm_pretrain_at_three_steps_a_call_ends_with_the_single_step_parameters(preset, overrides, shared_data,
                                                                                 tmp_path):
    """The main job's command, 7 steps at 3 a call (calls of 3, 3, 1). fastText builds its groups in one go
    (``train_groups``); the NNLM has none, so the loop stacks its batches (``stacked_batches``); it trains with
    Adam and evaluates (``eval_every`` 3: after the calls ending at 3 and 6, and at 7). Each run is a ``ptm``
    process compiled with XLA CPU's default fusion emitters (a user's CPU run): the tests' elemental emitter
    (tests/xla_env.py) rounds the loop's body and the single step differently in the last bits."""
    import os
    import subprocess
    import sys

    from ptm_jax.export.params import load_params
    from xla_env import xla_flags

    text = shared_data / "corpus/tinyshakespeare/input.txt"
    repo = Path(__file__).resolve().parent.parent
    env = dict(os.environ, XLA_FLAGS=xla_flags(8, fusion_emitters=True), PYTHONPATH=str(repo))
    params = {}
    for k in (1, 3):
        out = tmp_path / f"k{k}"
        corpus = [f"data.corpus={str(text)!r}"] if preset == "fasttext_tiny" else []
        done = subprocess.run([sys.executable, "-m", "ptm_jax.cli", "pretrain", "-c", preset,
                               f"output_dir={str(out)!r}", *corpus, *overrides, "train.steps=7", "train.log_every=2",
                               "train.checkpoint_every=1000", f"train.steps_per_call={k}"],
                              env=env, cwd=repo, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        params[k] = load_params(out)[0]
    for a, b in zip(jax.tree.leaves(params[1]), jax.tree.leaves(params[3])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_steps_per_call_below_one_is_a_config_error_naming_the_field():
    with pytest.raises(ConfigError, match="train.steps_per_call must be >= 1, got 0"):
        load_config("bert_tiny", ["train.steps_per_call=0"])


def test_the_gpu_benchmark_trains_word2vec_where_tensorflow_is_not_installed(shared_data, tmp_path):
    """The lent GPU hosts have no TensorFlow: ``benchmarks/word2vec_gpu.py`` builds the batches with
    ``word2vec_batches`` and runs ``fit``'s calls, k=4 a call from whole-group builds, on Gutenberg."""
    import os
    import subprocess
    import sys

    from test_bench import BLOCK_TENSORFLOW
    from xla_env import xla_flags

    repo = Path(__file__).resolve().parent.parent
    script = BLOCK_TENSORFLOW.replace("from ptm_jax.cli import main\n", "sys.path.insert(0, 'benchmarks')\n"
                                      "from word2vec_gpu import main\n")
    out = tmp_path / "gpu.json"
    proc = subprocess.run([sys.executable, "-c", script, "--runs", "skipgram:4096:k=4:group", "--epochs", "0.029",
                           "--kernel", "xla", "--threads", "2", "--work", str(tmp_path / "work"), "--json", str(out)],
                          capture_output=True, text=True, cwd=repo, timeout=600,
                          env=dict(os.environ, XLA_FLAGS=xla_flags(1), PYTHONPATH=str(repo)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    (r,) = json.loads(out.read_text())
    assert "error" not in r, r.get("error")
    assert r["steps"] == 15 and r["steps_per_call"] == 4  # 0.029 x 2,066,805 stream tokens / 4096: calls of 4, 4, 4, 3
    assert min(r["words_per_sec_streamed"], r["words_per_sec_fed"], r["words_per_sec_step_only"]) > 0
    assert r["max_abs_diff_runs"] == 0.0 and 0.28 < r["coverage"] < 0.29


def test_three_steps_a_call_on_two_and_four_processes_equal_one_process_at_one_step_a_call(tmp_path):
    """``ptm pretrain -c word2vec_tiny`` (embedded corpus, evaluation and checkpoints every 3 steps) on 2
    processes x 4 devices and on 4 x 2 with an interleaved mesh (each process feeds two row blocks of every
    batch: ``local_batches`` joins its groups along the rows' axis), 3 steps a call (3, 3, 1), against one
    process at one step a call: the same evaluations at the same steps and the same vectors (gloo sums in
    another order: rtol 1e-5, as tests/test_multihost_run.py)."""
    from test_multihost_run import ENV, LAYOUTS, run

    from ptm_jax.export.params import load_params

    common = ["pretrain", "-c", "word2vec_tiny", "train.steps=7", "train.log_every=1", "train.eval_every=3",
              "train.checkpoint_every=3", "data.pack_rows=8"]
    outs = {}
    for n, k in ((1, 1), (2, 3), (4, 3)):
        outs[n] = tmp_path / f"p{n}"
        run(n, [*common, *LAYOUTS[n], f"train.steps_per_call={k}", f"output_dir={outs[n]}"], dict(ENV), tmp_path)
    ref = records(outs[1] / "pretrain")
    evals = {n: [json.loads(x) for x in (outs[n] / "pretrain/metrics.jsonl").read_text().splitlines()]
             for n in outs}
    evals = {n: {r["step"]: r["w2v_loss"] for r in rows if r["split"] == "eval"} for n, rows in evals.items()}
    assert sorted(evals[1]) == [3, 6, 7] and sorted(ref) == list(range(1, 8))
    params = {n: load_params(out)[0] for n, out in outs.items()}
    for n in (2, 4):
        assert sorted(evals[n]) == [3, 6, 7]
        np.testing.assert_allclose([evals[n][s] for s in (3, 6, 7)], [evals[1][s] for s in (3, 6, 7)], rtol=1e-5)
        assert sorted(p.name for p in (outs[n] / "pretrain/checkpoints").iterdir() if p.name.isdigit()) == \
            ["3", "6", "7"]
        for a, b in zip(jax.tree.leaves(params[1]), jax.tree.leaves(params[n])):
            np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-7)
