"""ULMFiT / AWD-LSTM: fastai parity, weight-import errors, variable-BPTT batches, the LM
trained through the loop with its carried state, the classifier stage's parameter groups and slanted
triangular rates, and the pipeline's refusal to build a classifier without a finished LM.

fastai is not in pyproject.toml: its own requirements (torchvision, spacy) would let pip replace the pinned torch.
The README's test command installs it from requirements/fastai.lock with ``--no-deps`` into ``.venv/fastai``
(tests/reference_libs.py); the three fastai tests skip, saying so, only where that folder is missing."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference_libs

from ptm_jax.errors import CheckpointError, ConfigError
from ptm_jax.families.ulmfit import hooks
from ptm_jax.families.ulmfit.config import UlmfitConfig
from ptm_jax.data.pretraining.contiguous_rows import LmBatches, bucket_lengths
from ptm_jax.families.ulmfit.model import AwdLstmLanguageModel
from ptm_jax.families.ulmfit.objective import carry_to_tuple
from ptm_jax.families.ulmfit.weights import as_variables, import_state_dict, load_fastai
from ptm_jax.train import param_groups as pg

FASTAI_LM = dict(emb_sz=8, n_hid=12, n_layers=3, pad_token=1, bidir=False, output_p=0.1, hidden_p=0.15,
                 input_p=0.25, embed_p=0.02, weight_p=0.2, tie_weights=True, out_bias=True)


@pytest.fixture(scope="module")
def fastai_lm(tmp_path_factory):
    """A fastai AWD-LSTM language model (vocabulary 50) with random decoder bias, saved as a .pth state dict."""
    torch = pytest.importorskip("torch")
    if not reference_libs.use("fastai"):
        pytest.skip(reference_libs.missing("fastai"))
    awd = pytest.importorskip("fastai.text.models.awdlstm")
    core = pytest.importorskip("fastai.text.models.core")
    torch.manual_seed(0)
    model = core.get_language_model(awd.AWD_LSTM, 50, config=dict(FASTAI_LM))
    with torch.no_grad():
        model[1].decoder.bias.uniform_(-0.5, 0.5)
    path = tmp_path_factory.mktemp("fastai") / "lm.pth"
    torch.save(model.state_dict(), path)
    return model, path


def test_fastai_awd_lstm_forward_parity_with_carried_state(fastai_lm):
    """Our LM on fastai's imported weights gives fastai's logits for two consecutive chunks (the second read from
    the state the first left: fastai keeps it in ``self.hidden``), eval mode."""
    import torch

    model, path = fastai_lm
    params, cfg = load_fastai(path)
    assert (cfg.vocab_size, cfg.embed_dim, cfg.hidden_dim, cfg.num_layers, cfg.tie_weights) == (50, 8, 12, 3, True)
    ids = np.random.default_rng(0).integers(0, 50, (3, 14)).astype(np.int64)
    model.eval()
    model.reset()
    with torch.no_grad():
        ref = [model(torch.from_numpy(ids[:, :9]))[0].numpy(), model(torch.from_numpy(ids[:, 9:]))[0].numpy()]
    ours = AwdLstmLanguageModel(cfg)
    variables = as_variables(params)
    logits1, _, _, carry = ours.apply(variables, jnp.asarray(ids[:, :9], jnp.int32), None, None, True)
    logits2, _, _, _ = ours.apply(variables, jnp.asarray(ids[:, 9:], jnp.int32), None, carry, True)
    np.testing.assert_allclose(np.asarray(logits1), ref[0], atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(logits2), ref[1], atol=2e-5, rtol=1e-4)
    fresh, _, _, _ = ours.apply(variables, jnp.asarray(ids[:, 9:], jnp.int32), None, None, True)
    assert np.abs(np.asarray(fresh) - ref[1]).max() > 1e-3  # the carried state matters


def test_fastai_text_classifier_eval_parity_batchnorm_head_and_chunked_encoder(tmp_path):
    """fastai's get_text_classifier (SentenceEncoder over bptt chunks with the state carried, masked concat pooling,
    PoolingLinearClassifier: BatchNorm1d, dropout, bias-free Linear, ReLU, ...) with random weights and random
    BatchNorm running statistics, imported: our classifier gives its logits in eval mode."""
    torch = pytest.importorskip("torch", reason="needs torch")
    if not reference_libs.use("fastai"):
        pytest.skip(reference_libs.missing("fastai"))
    awd = pytest.importorskip("fastai.text.models.awdlstm")
    core = pytest.importorskip("fastai.text.models.core")
    from ptm_jax.families.ulmfit.model import AwdLstmClassifier

    torch.manual_seed(1)
    config = dict(FASTAI_LM, output_p=0.4, hidden_p=0.3, input_p=0.4, embed_p=0.05, weight_p=0.5)
    config.pop("tie_weights"), config.pop("out_bias")
    model = core.get_text_classifier(awd.AWD_LSTM, 50, 3, seq_len=6, config=config, max_len=64)
    with torch.no_grad():
        for block in model[1].layers:
            bn = block[0]
            bn.weight.uniform_(0.5, 1.5), bn.bias.uniform_(-0.3, 0.3)
            bn.running_mean.uniform_(-0.2, 0.2), bn.running_var.uniform_(0.01, 0.5)
    path = tmp_path / "clas.pth"
    torch.save(model.state_dict(), path)
    params, cfg = load_fastai(path)
    assert cfg.head_hidden == 50 and params["classifier"]["output"]["kernel"].shape == (50, 3)
    ids = np.random.default_rng(0).integers(2, 50, (4, 15)).astype(np.int64)  # 3 chunks of bptt 6, no padding
    model.eval()
    with torch.no_grad():
        ref = model(torch.from_numpy(ids))[0].numpy()
    ours = jax.jit(lambda v, i: AwdLstmClassifier(cfg, 3).apply(v, i, jnp.ones(i.shape, jnp.int32), True))(
        as_variables(params), jnp.asarray(ids, jnp.int32))
    np.testing.assert_allclose(np.asarray(ours), ref, atol=2e-5, rtol=1e-4)


def test_fastai_state_dict_missing_or_misshapen_tensor_is_a_checkpoint_error(fastai_lm, tmp_path):
    model, path = fastai_lm
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    cfg = UlmfitConfig(vocab_size=50, embed_dim=8, hidden_dim=12, num_layers=3)
    layer = import_state_dict(state, cfg)["ulmfit"]["layers_1"]
    assert layer["recurrent_kernel"].shape == (12, 48)
    np.testing.assert_array_equal(layer["bias"], state["0.rnns.1.module.bias_ih_l0"])  # PyTorch's two biases stay
    np.testing.assert_array_equal(layer["recurrent_bias"], state["0.rnns.1.module.bias_hh_l0"])  # two parameters
    missing = {k: v for k, v in state.items() if k != "0.rnns.1.weight_hh_l0_raw"}
    with pytest.raises(CheckpointError, match=r"missing tensor 'rnns\.1\.weight_hh_l0_raw'"):
        import_state_dict(missing, cfg, "lm.pth")
    bad = dict(state, **{"0.rnns.2.module.bias_ih_l0": np.zeros(31, np.float32)})
    with pytest.raises(CheckpointError, match=r"'rnns\.2\.module\.bias_ih_l0' has shape \(31,\), expected \(32,\)"):
        import_state_dict(bad, cfg, "lm.pth")
    with pytest.raises(CheckpointError, match="no such fastai weights file"):
        load_fastai(tmp_path / "absent.pth")
    with pytest.raises(CheckpointError, match="more LSTM layers than model.num_layers=2"):
        import_state_dict(state, UlmfitConfig(vocab_size=50, embed_dim=8, hidden_dim=12, num_layers=2), "lm.pth")


class _Stream:
    """The token stream interface of ``PackedStream`` over 0, 1, 2, ... (token = its stream position)."""

    pass_tokens = 1000

    def span(self, lo, hi):
        return (np.arange(lo, hi) % 50_000,)


def test_variable_bptt_batches_are_contiguous_bucketed_and_resumable():
    b = LmBatches(_Stream(), 4, bptt=20, variable=True, p=0.95, std=3.0, bucket=8, max_len=29, seed=3, pad_id=0)
    it = b.iterate(0, 0, 1)
    batches = [next(it) for _ in range(30)]
    lengths = b.pass_lengths(0)
    assert lengths.sum() == b.R - 1 == 249  # one pass uses every row's region exactly
    widths = {x["input_ids"].shape[1] for x in batches}
    assert widths <= set(bucket_lengths(20, 3.0, 0.95, 8, 29)) and len(widths) <= 4
    # row r of batch j+1 continues where batch j stopped; targets are the next tokens
    for j in range(len(lengths) - 1):
        n = int(lengths[j])
        last = batches[j]["input_ids"][:, n - 1]
        assert np.array_equal(batches[j + 1]["input_ids"][:, 0], last + 1)
        assert np.array_equal(batches[j]["target_ids"][:, :n], batches[j]["input_ids"][:, :n] + 1)
        assert batches[j]["target_weights"].sum() == 4 * n
    resets = [int(x["reset"][0]) for x in batches]
    assert resets[0] == 1 and resets[len(lengths)] == 1 and sum(resets) == 30 // len(lengths) + 1
    assert batches[len(lengths)]["input_ids"][0, 0] == 1000  # pass 1 starts at its own first token
    again = next(b.iterate(17, 1, 2))  # resumed at batch 17, process 1 of 2: rows 2-3
    assert np.array_equal(again["input_ids"], batches[17]["input_ids"][2:])


def test_a_far_start_finds_its_pass_from_the_draws_alone_and_equals_walking_every_pass():
    def batches():
        return LmBatches(_Stream(), 4, bptt=20, variable=True, p=0.95, std=3.0, bucket=8, max_len=29, seed=3,
                         pad_id=0)

    far = batches().locate(300_000)  # a fresh process resuming at global batch 300,000 (about 20,000 passes)
    walk, epoch, index = batches(), 0, 300_000
    while index >= len(walk.pass_lengths(epoch)):  # the reference: pass by pass, every pass's lengths
        assert walk.pass_lengths(epoch).sum() == walk.R - 1
        index -= len(walk.pass_lengths(epoch))
        epoch += 1
    assert far == (epoch, index) and epoch > 15_000
    b = batches()
    assert b.locate(300_000) == far and b.locate(40) == batches().locate(40)  # the order of calls does not matter
    lengths = np.concatenate([b.pass_lengths(e) for e in range(300)])
    inner = np.concatenate([b.pass_lengths(e)[:-1] for e in range(300)])  # the last batch of a pass is cut
    assert inner.min() >= 5 and inner.max() <= 29 and 0.85 < (inner > 14).mean() < 0.99  # p = 0.95 of ~bptt
    assert lengths.sum() == 300 * (b.R - 1)
    fixed = LmBatches(_Stream(), 4, bptt=20, variable=False, p=0.95, std=3.0, bucket=8, max_len=29, seed=3,
                      pad_id=0)
    assert list(fixed.pass_lengths(0)) == [20] * 12 + [9] and fixed.locate(27) == (2, 1)


def test_classifier_parameter_groups_discriminative_rates_gradual_unfreezing_and_slanted_triangular():
    cfg = UlmfitConfig(vocab_size=20, embed_dim=4, hidden_dim=6, num_layers=3, unfreeze_every=10)
    rules = hooks.param_groups(cfg, "finetune")
    tree = {"params": {"ulmfit": {"embedding": np.ones((20, 4)), "layers_0": {"kernel": np.ones((4, 24))},
                                  "layers_1": {"kernel": np.ones((6, 24))}, "layers_2": {"kernel": np.ones((6, 16))}},
                       "classifier": {"output": {"kernel": np.ones((50, 2)), "bias": np.ones(2)}}}}
    pg.check_rules_match(rules, tree)

    def per_group(field_of):
        m = field_of(tree)["params"]
        return [float(m["ulmfit"]["embedding"])] + [float(m["ulmfit"][f"layers_{i}"]["kernel"]) for i in range(3)] \
            + [float(m["classifier"]["output"]["kernel"])]

    top = [2.6 ** -k for k in (4, 3, 2, 1, 0)]
    assert per_group(lambda t: pg.multipliers(rules, t, "lr")) == pytest.approx(top)  # lr / 2.6 per group down
    # gradual unfreezing: the head trains from step 0, one more group from the top every 10 steps
    assert per_group(lambda t: pg.start_steps(rules, t)) == [40, 30, 20, 10, 0]
    stats = {"params": {"classifier": {"bn_0": {"running_mean": np.zeros(3), "scale": np.ones(3)}}}}
    assert pg.frozen_labels(rules, stats)["params"]["classifier"]["bn_0"] == {"running_mean": "frozen",
                                                                              "scale": "trainable"}
    off = hooks.param_groups(UlmfitConfig(discriminative_factor=1.0, gradual_unfreezing=False), "finetune")
    assert [r.pattern for r in off] == [hooks.NO_DECAY_ON_BIASES, r"(^|/)running_(mean|var)$"]  # no group rule
    with pytest.raises(ConfigError, match="discriminative_lrs has 3 values but the classifier has 5 layer groups"):
        UlmfitConfig(discriminative_lrs=[1.0, 0.5, 0.25]).validate()
    from ptm_jax.train.optim import slanted_triangular

    s = slanted_triangular(0.01, 100, 10, 32.0)
    assert [float(s(t)) for t in (0, 5, 10, 55, 100)] == pytest.approx(
        [0.01 / 32, 0.01 * (1 + 0.5 * 31) / 32, 0.01, 0.01 * (1 + 0.5 * 31) / 32, 0.01 / 32], rel=1e-5)


def test_awd_lstm_lm_trains_through_the_loop_carrying_its_state(tmp_path, shared_data):
    """Six steps of the tiny preset on tiny-shakespeare words through the loop (8 devices): finite losses, the
    carried LSTM state is the last batch's (nonzero); the classifier stage refuses an unfinished LM."""
    import types

    from corpus_util import word_source

    from ptm_jax import config_loading as config_lib
    from ptm_jax.families.ulmfit import FAMILY
    from ptm_jax.families.ulmfit.pipeline import _require_finished
    from ptm_jax.parallel.mesh import make_mesh
    from ptm_jax.train.loop import fit

    cfg = config_lib.load_config("ulmfit_tiny", [f"output_dir={tmp_path}", "train.steps=6", "train.eval_every=0",
                                                 "train.checkpoint_every=6", "train.log_every=1",
                                                 "train.learning_rate=0.01", "model.vocab_size=256"])
    source, special = word_source(shared_data / "corpus/tinyshakespeare/input.txt", 256)
    corpus = types.SimpleNamespace(train=source, eval=None, special=special,
                                   tokenizer=types.SimpleNamespace(pad_id=special.pad, eos_id=special.sep))
    objective = FAMILY.pretraining.objectives["awd_lstm_lm"](cfg, corpus)
    result = fit(objective, cfg.train, make_mesh(cfg.mesh), tmp_path / "pretrain")
    assert result.step == 6 and 3.0 < result.train_metrics["lm_loss"] < 5.6  # ln 256 = 5.55 at the start
    carry = carry_to_tuple(jax.device_get(result.state.carry))
    assert len(carry) == 3 and carry[2].h.shape == (8, 16) and np.abs(carry[2].h).max() > 1e-3
    widths = {objective.batches(8).batch(i, slice(0, 8))["input_ids"].shape[1] for i in range(6)}
    assert widths == {40}  # the tiny preset's one bucket: one compiled step
    with pytest.raises(ConfigError, match="the target-task LM .stage 2. is not finished"):
        _require_finished(tmp_path / "lm_finetune" / "pretrain", 10, "the target-task LM (stage 2)")
    _require_finished(tmp_path / "pretrain", 6, "the general-domain LM (stage 1)")


def _halves_task(n: int, rng: np.random.Generator, words: list[str]):
    """Sentences of 6-12 words; label 1 when most of them come from the second half of ``words``."""
    from ptm_jax.data.tasks.glue import Example

    out = []
    half = len(words) // 2
    for i in range(n):
        label = int(rng.integers(2))
        k = int(rng.integers(6, 13))
        own = rng.integers(0, half, k) + label * half
        other = rng.integers(0, half, k) + (1 - label) * half
        pick = np.where(rng.random(k) < 0.8, own, other)
        out.append(Example(str(i), " ".join(words[j] for j in pick), None, label, i + 1))
    return out


def test_classifier_head_learns_over_a_frozen_trunk_at_ulmfits_rate_and_keeps_running_statistics(tmp_path):
    """Gradual unfreezing's first epoch trains the head alone, at ULMFiT's rate 0.01 (Adam, clip 0.4, STLR), over a
    trunk whose pooled outputs are a few hundredths in size. Before fastai's batch norms were added to the head,
    its ReLU biases moved faster than those inputs and every ReLU died in that epoch: SST-2 stayed at the majority
    class (docs/benchmarks.md, "ULMFiT"). With them the head learns a task the pooled features carry (which half
    of the vocabulary a sentence's words come from) in 60 steps; the train step sets the batch norms' running
    statistics as PyTorch's BatchNorm1d does (momentum 0.1, unbiased variance) and leaves the trunk as it was."""
    import dataclasses

    from ptm_jax.config import FinetuneConfig, TrainConfig
    from ptm_jax.data.tasks.glue import GLUE_TASKS
    from ptm_jax.data.word_vocab import build_word_vocab
    from ptm_jax.families.ulmfit.classification import UlmfitClassifierObjective
    from ptm_jax.families.ulmfit.model import AwdLstm, AwdLstmClassifier, concat_pool
    from ptm_jax.train.optim import make_optimizer
    from ptm_jax.train.state import TrainState
    from ptm_jax.train.step import make_train_step

    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(40)]
    train, dev = _halves_task(640, rng, words), _halves_task(256, rng, words)
    tok = build_word_vocab([e.text_a for e in train], tmp_path)
    cfg = UlmfitConfig(vocab_size=tok.vocab_size, embed_dim=32, hidden_dim=32, num_layers=2, output_p=0.2,
                       hidden_p=0.15, input_p=0.2, embed_p=0.025, weight_p=0.25, unfreeze_every=10 ** 6)
    objective = UlmfitClassifierObjective(cfg, GLUE_TASKS["sst2"], train, dev, tok,
                                          FinetuneConfig(max_seq_length=16, batch_size=32))
    data = objective.train
    params = nn_unbox(jax.jit(lambda key: objective.init(key, data))(jax.random.key(0)))  # jitted: few compiles
    tcfg = TrainConfig(optimizer="adamw", adam_bias_correction=True, adam_b1=0.8, adam_b2=0.99, learning_rate=0.01,
                       lr_decay="slanted_triangular", warmup_steps=6, steps=60, weight_decay=0.01, clip_norm=0.4)
    tx, schedule = make_optimizer(tcfg, hooks.param_groups(cfg, "finetune"))
    step = jax.jit(make_train_step(objective, tx, schedule))
    state = TrainState.create(params, tx)
    quiet = dataclasses.replace(cfg, **{k: 0.0 for k in ("output_p", "hidden_p", "input_p", "embed_p", "weight_p",
                                                          "head_p")})
    for s in range(60):
        rows = (np.arange(32) + 32 * s) % 640
        b = {k: v[rows] for k, v in data.items()}
        state, metrics = step(state, b, jax.random.key(1))
        if s == 0:  # the step stores the statistics of its own forward pass (its dropout masks included)
            _, _, stats = jax.jit(lambda p, b: objective.loss_and_statistics(
                p, b, jax.random.fold_in(jax.random.key(1), 0), objective.normalizers(b), True))(params, b)
            got = state.params["params"]["classifier"]
            for name in ("bn_0", "bn_1"):
                for k in ("running_mean", "running_var"):
                    np.testing.assert_allclose(got[name][k], stats["params"]["classifier"][name][k], rtol=1e-5)
            assert float(np.abs(got["bn_0"]["running_mean"]).max()) > 0
            pooled = jax.jit(lambda p, i, m: concat_pool(AwdLstm(quiet).apply({"params": p}, i, m)[0], m))(
                params["params"]["ulmfit"], b["input_ids"], b["input_mask"])
            assert 0.01 < float(np.abs(pooled).mean()) < 0.2  # the small inputs the head has to cope with
    trunk0, trunk1 = params["params"]["ulmfit"], state.params["params"]["ulmfit"]
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(trunk0), jax.tree.leaves(trunk1)))  # frozen
    # dev accuracy with the batch norms on the dev batch's statistics (the running variance still holds most of
    # its initial 1 after 60 steps at momentum 0.1: 0.9^60 = 0.002, above the features' variance)
    d = objective.dev
    logits = jax.jit(lambda p, i, m: AwdLstmClassifier(quiet, 2).apply(p, i, m, False, rngs={
        "dropout": jax.random.key(2)}))(state.params, d["input_ids"], d["input_mask"])
    accuracy = float(np.mean(np.argmax(np.asarray(logits), -1) == objective.dev["labels"]))
    # a head whose ReLUs died stays at the majority class (0.5); this random trunk gives 0.79 (0.80 before each
    # layer kept PyTorch's two gate biases, which changed the trunk's initial gates)
    assert accuracy > 0.75, accuracy


def test_batch_norm_is_pytorchs_batchnorm1d_with_padding_rows_left_out():
    """Training: the real rows' mean and biased variance normalise, the running statistics move by momentum 0.1
    with the unbiased variance (torch.nn.BatchNorm1d); evaluation: the running statistics; the statistics
    collection is written only when the caller makes it mutable."""
    from ptm_jax.models.batch_norm import STATISTICS, BatchNorm

    x = np.random.default_rng(0).normal(0.3, 0.05, (6, 4)).astype(np.float32)
    rows = np.array([1, 1, 1, 1, 1, 0], bool)  # the last row is padding
    bn = BatchNorm()
    v = nn_unbox(bn.init(jax.random.key(0), jnp.asarray(x)))
    v["params"]["scale"] = jnp.asarray([1.0, 2.0, 0.5, 1.0])
    y, new = bn.apply(v, jnp.asarray(x), jnp.asarray(rows), False, mutable=[STATISTICS])
    real = x[rows].astype(np.float64)
    want = (x - real.mean(0)) / np.sqrt(real.var(0) + 1e-5) * np.array([1.0, 2.0, 0.5, 1.0]) + 1e-3
    np.testing.assert_allclose(np.asarray(y)[rows], want[rows], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(new[STATISTICS]["running_mean"], 0.1 * real.mean(0), rtol=1e-5)
    np.testing.assert_allclose(new[STATISTICS]["running_var"], 0.9 + 0.1 * real.var(0, ddof=1), rtol=1e-5)
    v["params"].update(new[STATISTICS])
    y_eval = bn.apply(v, jnp.asarray(x), None, True)
    np.testing.assert_allclose(y_eval, (x - 0.1 * real.mean(0)) / np.sqrt(0.9 + 0.1 * real.var(0, ddof=1) + 1e-5)
                               * np.array([1.0, 2.0, 0.5, 1.0]) + 1e-3, rtol=1e-4, atol=1e-5)
    _, untouched = bn.apply(v, jnp.asarray(x), None, False, mutable=["other"])
    assert STATISTICS not in untouched


def nn_unbox(tree):
    import flax.linen as nn

    return nn.meta.unbox(tree)


def test_ptm_run_pretrains_then_the_ulmfit_job_runs_the_target_lm_and_the_classifier(tmp_path, shared_data):
    """``ptm run`` of the tiny preset with a task: stage 1 (4 steps), the 'ulmfit' job's target-task LM (2 steps,
    from stage 1's weights) and the classifier from stage 2's trunk, each finished and summarised;
    ``ulmfit.target_lm_steps=0`` runs no stage 2 and starts the classifier from stage 1."""
    import json

    from ptm_jax import config_loading as config_lib
    from ptm_jax.train.stages import run

    base = [f"data.corpus={shared_data / 'corpus/tinyshakespeare/input.txt'}", "data.eval_documents=2",
            "model.vocab_size=256", "tokenizer.vocab_size=256", "train.steps=4", "train.eval_every=0",
            "train.checkpoint_every=4", "train.log_every=2", "finetune.task=sst2",
            f"finetune.data_dir={shared_data / 'glue'}", "finetune.train_subset=48", "finetune.epochs=1",
            "finetune.batch_size=16", "finetune.max_seq_length=24"]
    cfg = config_lib.load_config("ulmfit_tiny", [*base, f"output_dir={tmp_path / 'with'}",
                                                 "ulmfit.target_lm_steps=2"])
    assert cfg.finetune.job == "ulmfit"
    summary = run(cfg)
    stage2 = summary["finetune"]["lm_finetune"]
    assert summary["pretrain"]["step"] == 4 and stage2["step"] == 2 and not stage2["preempted"]
    best = summary["finetune"]["best"]["metrics"]
    assert summary["finetune"]["step"] == 3 and summary["finetune"]["train_examples"] == 48  # 48 rows / 16
    assert 0.0 <= best["accuracy"] <= 1.0 and 0.5 < best["loss"] < 1.0  # ln 2 = 0.69 at two untrained classes
    assert summary["finetune"]["init"] == str(tmp_path / "with" / "lm_finetune" / "pretrain")  # stage 2's trunk
    written = json.loads((tmp_path / "with" / "ulmfit_summary.json").read_text())
    assert written["lm_finetune"]["step"] == 2 and written["classifier"]["best"] == summary["finetune"]["best"]
    assert (tmp_path / "with" / "finetune-sst2" / "best").is_dir()

    cfg0 = config_lib.load_config("ulmfit_tiny", [*base, f"output_dir={tmp_path / 'without'}",
                                                  "ulmfit.target_lm_steps=0"])
    summary0 = run(cfg0)
    assert summary0["finetune"]["lm_finetune"] is None and not (tmp_path / "without" / "lm_finetune").exists()
    assert summary0["finetune"]["init"] == str(tmp_path / "without" / "pretrain")  # stage 1's trunk
    # same stage 1 (same config and seed): the two classifiers differ only by stage 2's trunk
    assert summary0["pretrain"]["train"]["lm_loss"] == summary["pretrain"]["train"]["lm_loss"]
    assert summary0["finetune"]["best"] != summary["finetune"]["best"]
