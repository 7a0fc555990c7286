"""Bengio et al. 2003's NNLM as a family package (ptm_jax/families/nnlm): the scores are b + W x + U tanh(d + H x)
on the concatenated features of the n-1 predecessors; the rows tile the token stream independently of the
process count and the start; it trains through ``ptm_jax.train.loop.fit`` unchanged on a (2,2,2) mesh of the 8
virtual devices (the loss falls below the unigram baseline), resumes exactly after a stop, gives one device's
losses on the mesh; it is registered with its parameter groups (no decay on biases) and an exact FLOPs formula.

The corpus: WikiText-2's tokenized validation split (../shared/data), its 997 commonest words."""
import dataclasses
import json
import math
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from step_losses import step_losses

from ptm_jax.config import DataConfig, MeshConfig, RunConfig, TrainConfig
from ptm_jax.config_loading import load_config
from ptm_jax.data.cache import build_or_load_cache
from ptm_jax.data.pretraining.source import SubsetSource
from ptm_jax.data.word_vocab import build_word_vocab
from ptm_jax.errors import ConfigError
from ptm_jax.families import registry
from ptm_jax.data.pretraining.causal_lm import PackedStream
from ptm_jax.families.nnlm import FAMILY, NnlmConfig, hooks
from ptm_jax.families.nnlm.data import nnlm_dataset
from ptm_jax.families.nnlm.model import NnlmLanguageModel
from ptm_jax.families.nnlm.objective import NnlmObjective
from ptm_jax.parallel.mesh import make_mesh
from ptm_jax.train import param_groups as pg
from ptm_jax.train.loop import fit

VOCAB, L, ORDER, BATCH, STEPS = 1000, 16, 4, 32, 40
EVAL_DOCS = 60


@pytest.fixture(scope="module")
def corpus(shared_data, tmp_path_factory):
    path = shared_data / "corpus/wikitext-2-tokenized/valid.txt"
    out = tmp_path_factory.mktemp("nnlm_corpus")
    vocab = build_word_vocab(path.read_text(encoding="utf-8").splitlines(), out, max_vocab=VOCAB)
    cache = build_or_load_cache(DataConfig(corpus=str(path), format="lines"), vocab, out / "cache")
    n = cache.num_docs
    return types.SimpleNamespace(tokenizer=vocab, cache=cache, train=SubsetSource(cache, np.arange(n - EVAL_DOCS)),
                                 eval=SubsetSource(cache, np.arange(n - EVAL_DOCS, n)))


def run_config(**train) -> RunConfig:
    tcfg = dict(batch_size=BATCH, steps=STEPS, learning_rate=1e-2, lr_decay="constant", warmup_steps=0,
                optimizer="adam", weight_decay=1e-5, clip_norm=0.0, log_every=10, eval_every=STEPS, eval_batches=4,
                checkpoint_every=100, keep_checkpoints=2, progress_bar=False)
    tcfg.update(train)
    return RunConfig(model=NnlmConfig(vocab_size=VOCAB, order=ORDER, embed_dim=16, hidden_dim=32),
                     data=DataConfig(max_seq_length=L, seed=3), train=TrainConfig(**tcfg))


def objective(corpus, cfg=None) -> NnlmObjective:
    return FAMILY.pretraining.objectives["nnlm"](cfg or run_config(), corpus)


@pytest.mark.parametrize("hidden, direct", [(8, True), (8, False), (0, True)])
def test_scores_are_b_plus_Wx_plus_U_tanh_d_plus_Hx_of_the_predecessors(hidden, direct):
    cfg = NnlmConfig(vocab_size=11, order=3, embed_dim=4, hidden_dim=hidden, direct=direct, init_std=0.5)
    model = NnlmLanguageModel(cfg)
    rows = np.random.default_rng(0).integers(0, 11, (2, 7)).astype(np.int32)  # L = 5 predictions, c = 2
    params = jax.tree.map(np.asarray, nn_unbox(model.init(jax.random.key(0), rows)))["params"]
    C = params["nnlm"]["embedding"]
    y = np.asarray(model.apply({"params": params}, rows))
    assert y.shape == (2, 5, 11)
    for b in range(2):
        for i in range(5):
            t = i + 2
            x = np.concatenate([C[rows[b, t - 1]], C[rows[b, t - 2]]])  # (C(w_{t-1}), C(w_{t-2}))
            want = np.zeros(11)
            head = params["lm_head"]
            if hidden:
                h = np.tanh(params["nnlm"]["hidden"]["bias"] + x @ params["nnlm"]["hidden"]["kernel"])
                want += head["output"]["bias"] + h @ head["output"]["kernel"]
            if direct:
                want += x @ head["direct"]["kernel"] + (head["direct"]["bias"] if not hidden else 0.0)
            np.testing.assert_allclose(y[b, i], want, rtol=1e-5, atol=1e-6)


def nn_unbox(tree):
    import flax.linen as nn

    return nn.meta.unbox(tree)


def test_rows_tile_the_stream_independently_of_process_count_and_start(corpus):
    c, G = ORDER - 1, 8
    args = dict(seed=3, global_batch=G, shuffle=True)
    one = nnlm_dataset(corpus.train, 2, 0, L, c, start_index=0, **args).as_numpy_iterator()
    b0, b1 = next(one), next(one)
    halves = [next(nnlm_dataset(corpus.train, 2, 0, L, c, start_index=G, process_index=p, process_count=2,
                                **args).as_numpy_iterator()) for p in range(2)]
    for k in b1:
        np.testing.assert_array_equal(np.concatenate([h[k] for h in halves]), b1[k], err_msg=k)
    rows = np.concatenate([b0["window_ids"], b1["window_ids"]])
    np.testing.assert_array_equal(rows[1:, :c], rows[:-1, L:])  # row k+1 continues row k: no gap, no overlap
    np.testing.assert_array_equal(b0["target_ids"], b0["window_ids"][:, c:])
    assert b0["example_id"].tolist() == list(range(G)) and b0["target_weights"].min() == 1.0
    # one held-out pass: every position from c on is predicted exactly once, with the stream's token
    stream = PackedStream(corpus.eval, 2, seed=3, shuffle=False)
    batches = list(nnlm_dataset(corpus.eval, 2, 0, L, c, seed=3, start_index=0, global_batch=G, repeat=False,
                                shuffle=False).as_numpy_iterator())
    w = np.concatenate([b["target_weights"] for b in batches]).ravel()
    t = np.concatenate([b["target_ids"] for b in batches]).ravel()
    assert w.sum() == stream.pass_tokens - c and np.all(w[:stream.pass_tokens - c] == 1)
    np.testing.assert_array_equal(t[w > 0], stream.span(c, stream.pass_tokens)[0])


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory):
    """An uninterrupted run on the (2,2,2) mesh."""
    stage = tmp_path_factory.mktemp("nnlm_ref")
    obj = objective(corpus)
    result = fit(obj, obj.cfg.train, make_mesh(MeshConfig(2, 2, 2)), stage,
                 param_groups=FAMILY.layout.param_groups(obj.cfg.model, "pretrain"))
    return obj, result


def test_fit_on_the_2_2_2_mesh_lowers_the_train_and_held_out_loss(reference):
    obj, result = reference
    assert result.step == STEPS
    losses = {}
    for line in (result.stage_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("split") == "train":
            losses[rec["step"]] = rec["lm_loss"]
    assert sorted(losses) == [10, 20, 30, 40]
    assert losses[10] < math.log(VOCAB) and losses[40] < losses[10] - 1.0, losses  # ln 1000 = 6.91 at the start
    report = obj.summarize(result.eval_metrics)
    assert report["lm_loss"] < math.log(VOCAB) - 2.5
    assert report["perplexity"] == pytest.approx(math.exp(report["lm_loss"]))


def test_perplexity_hook_scores_every_word_and_eos_once_as_one_window_per_position(corpus, reference, tmp_path):
    """`ptm perplexity`'s NNLM hook against a naive reference that scores each position from its own window of
    n-1 predecessors (the stream starts with n-1 <eos>, every line ends with one)."""
    obj, result = reference
    params = jax.device_get(result.state.params)["params"]
    lines = (tmp_path / "heldout.txt")
    text = ["the game began in", "", "  it was not a success  ", "unknownwordzz and the"]
    lines.write_text("\n".join(text) + "\n", encoding="utf-8")
    got = FAMILY.inspection.perplexity(params, obj.cfg.model, corpus.tokenizer, lines, seq_len=4, batch_size=2)
    tok, c = corpus.tokenizer, obj.cfg.model.context
    ids = [tok.eos_id] * c
    for t in text:
        if t.strip():
            ids += tok.encode_batch([t])[0] + [tok.eos_id]
    model = NnlmLanguageModel(obj.cfg.model)
    windows = np.stack([ids[i - c: i + 1] for i in range(c, len(ids))])
    logp = jax.nn.log_softmax(model.apply({"params": params}, jnp.asarray(windows))[:, 0], axis=-1)
    nll = -float(np.sum(np.take_along_axis(np.asarray(logp), np.asarray(ids[c:])[:, None], axis=1)))
    assert got["tokens"] == len(ids) - c == 15 and got["words"] == 12
    assert got["nll_per_token"] == pytest.approx(nll / 15, rel=1e-5)
    assert got["word_perplexity"] == pytest.approx(math.exp(nll / 12), rel=1e-5)
    with pytest.raises(ConfigError, match="--stride=2: an NNLM sees only its 3 predecessors"):
        FAMILY.inspection.perplexity(params, obj.cfg.model, corpus.tokenizer, lines, seq_len=4, stride=2)


def test_stop_and_resume_gives_the_uninterrupted_parameters(corpus, reference, tmp_path):
    obj, ref = reference
    mesh = make_mesh(MeshConfig(2, 2, 2))
    rules = FAMILY.layout.param_groups(obj.cfg.model, "pretrain")
    first = fit(obj, obj.cfg.train, mesh, tmp_path, stop_after=STEPS // 2 - 1, param_groups=rules)
    assert first.step == STEPS // 2 - 1
    resumed = fit(objective(corpus), obj.cfg.train, mesh, tmp_path, param_groups=rules)
    assert resumed.step == STEPS
    for a, b in zip(jax.tree.leaves(resumed.state.params), jax.tree.leaves(ref.state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_one_device_and_the_2_2_2_mesh_give_the_same_losses(corpus):
    obj = objective(corpus)

    def losses(mesh):
        return step_losses(obj, obj.cfg.train, mesh, 3, FAMILY.layout.param_groups(obj.cfg.model, "pretrain"))[0]

    ref = losses(make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1]))
    assert ref[0, 0] == pytest.approx(math.log(VOCAB), abs=0.05) and ref[2, 0] < ref[0, 0]
    np.testing.assert_allclose(losses(make_mesh(MeshConfig(2, 2, 2))), ref, rtol=1e-5)


def test_registered_family_hooks_decay_mask_flops_and_bench_batch(corpus):
    assert registry.family_of_objective("nnlm") is FAMILY and FAMILY.capabilities == {"perplexity", "word_vectors"}
    cfg = run_config()
    obj = objective(corpus, cfg)
    example = obj.example_batch(4)
    params = nn_unbox(jax.eval_shape(obj.init, jax.random.key(0), example))
    assert registry.family_of_params(params["params"]) is FAMILY
    decay = pg.multipliers(FAMILY.layout.param_groups(cfg.model, "pretrain"), params, "weight_decay")
    flat = {"/".join(pg.path_keys(p)): float(v) for p, v in jax.tree_util.tree_leaves_with_path(decay)}
    assert flat == {"params/nnlm/embedding": 1.0, "params/nnlm/hidden/kernel": 1.0, "params/nnlm/hidden/bias": 0.0,
                    "params/lm_head/output/kernel": 1.0, "params/lm_head/output/bias": 0.0,
                    "params/lm_head/direct/kernel": 1.0}
    assert {FAMILY.layout.layer_of(p.split("/")) for p in flat} == {"embeddings", "hidden", "output", "direct"}
    # the analytic forward FLOPs are XLA's matmul count of the forward pass over one global batch
    from ptm_jax.bench.flops import hlo_matmul_flops

    full = obj.example_batch(BATCH)
    concrete = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), params)
    hlo = jax.jit(obj.model.apply).lower(concrete, jnp.asarray(full["window_ids"])).compile().as_text()
    assert hlo_matmul_flops(hlo) == FAMILY.bench.flops(cfg).forward_total
    batch = FAMILY.bench.synthetic_batch(example, cfg, np.random.default_rng(0))
    assert batch["window_ids"].shape == example["window_ids"].shape and batch["window_ids"].min() >= 3
    assert batch["target_weights"].sum() == 4 * L


@pytest.mark.parametrize("preset", ["nnlm_tiny", "nnlm_small"])
def test_presets_load_into_the_family_sections(preset):
    """configs/nnlm_*.toml through load_config: the [model] section is an NnlmConfig (picked by the objective's
    family), [data] the shared DataConfig, the tokenizer the word vocabulary sized like the model."""
    cfg = load_config(preset)
    assert cfg.objective in FAMILY.pretraining.objectives
    assert type(cfg.model) is NnlmConfig and type(cfg.data) is DataConfig
    assert cfg.model.vocab_size == cfg.tokenizer.vocab_size and cfg.tokenizer.kind == "word"
    assert (cfg.model.order, cfg.model.embed_dim, cfg.model.hidden_dim) == {"nnlm_tiny": (4, 16, 32),
                                                                             "nnlm_small": (5, 60, 100)}[preset]


def test_ptm_pretrain_nnlm_tiny_from_the_command_line(tmp_path):
    """`ptm pretrain -c nnlm_tiny` in a subprocess: the word vocabulary is trained on the embedded corpus, the
    objective's family declares its specials (<pad>, <eos>), and 6 steps write a summary with a held-out loss."""
    import subprocess
    import sys

    from conftest import REPO

    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "ptm_jax.cli", "pretrain", "-c", "nnlm_tiny", f"output_dir={out}",
                           "train.steps=6", "train.eval_every=6", "train.checkpoint_every=6", "train.log_every=3"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "pretrain" / "summary.json").read_text())
    assert summary["step"] == 6 and not summary["preempted"]
    vocab = summary["corpus"]["vocab_size"]
    assert 1000 < vocab <= 2000  # tokenizer.vocab_size=2000 caps the trained word vocabulary
    lines = (out / "tokenizer" / "vocab.tsv").read_text(encoding="utf-8").splitlines()
    assert [line.split("\t")[0] for line in lines[:3]] == ["<pad>", "<unk>", "<eos>"] and len(lines) == vocab
    loss = summary["eval"]["lm_loss"]
    assert math.isfinite(loss) and 0 < loss < math.log(vocab) + 1.0
    assert summary["eval"]["perplexity"] == pytest.approx(math.exp(loss), rel=1e-6)
    from ptm_jax.cli import main

    text = tmp_path / "heldout.txt"
    text.write_text("It was the best of times , it was the worst of times .\n", encoding="utf-8")
    assert main(["perplexity", str(out), str(text), "--seq-len", "8", "--json", str(tmp_path / "ppl.json")]) == 0
    ppl = json.loads((tmp_path / "ppl.json").read_text())
    assert ppl["tokens"] == 15 and ppl["words"] == 14 and 1 < ppl["token_perplexity"] < 4 * vocab
