"""ULMFiT / AWD-LSTM (issue 18, item 2): fastai parity, weight-import errors, variable-BPTT batches, the LM
trained through the loop with its carried state, the classifier stage's parameter groups and slanted
triangular rates, and the pipeline's refusal to build a classifier without a finished LM.

The two fastai tests skip where fastai is absent: it is not in pyproject.toml because its own requirements
(torchvision, spacy) would let pip replace the pinned torch. Install it beside torch with
``pip install --no-deps fastai fastcore fasttransform fastdownload "fastprogress==1.0.3" plum-dispatch beartype
pandas`` (fastprogress 1.1 imports python-fasthtml)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ptm_jax.errors import CheckpointError, ConfigError
from ptm_jax.families.ulmfit import hooks
from ptm_jax.families.ulmfit.config import UlmfitConfig
from ptm_jax.families.ulmfit.lm_data import LmBatches, bucket_lengths
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


def test_fastai_state_dict_missing_or_misshapen_tensor_is_a_checkpoint_error(fastai_lm, tmp_path):
    model, path = fastai_lm
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    cfg = UlmfitConfig(vocab_size=50, embed_dim=8, hidden_dim=12, num_layers=3)
    assert import_state_dict(state, cfg)["ulmfit"]["layers_1"]["recurrent_kernel"].shape == (12, 48)
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


def test_classifier_parameter_groups_discriminative_rates_gradual_unfreezing_and_slanted_triangular():
    cfg = UlmfitConfig(vocab_size=20, embed_dim=4, hidden_dim=6, num_layers=3, unfreeze_every=10)
    rules = hooks.param_groups(cfg, "finetune")
    tree = {"params": {"ulmfit": {"embedding": np.ones((20, 4)), "layers_0": {"kernel": np.ones((4, 24))},
                                  "layers_1": {"kernel": np.ones((6, 24))}, "layers_2": {"kernel": np.ones((6, 16))}},
                       "classifier": {"output": {"kernel": np.ones((50, 2)), "bias": np.ones(2)}}}}
    pg.check_rules_match(rules, tree)

    def lrs(step):
        m = pg.multipliers(rules, tree, "lr", jnp.int32(step))["params"]
        return [float(m["ulmfit"]["embedding"])] + [float(m["ulmfit"][f"layers_{i}"]["kernel"]) for i in range(3)] \
            + [float(m["classifier"]["output"]["kernel"])]

    top = [2.6 ** -k for k in (4, 3, 2, 1, 0)]
    assert lrs(0) == pytest.approx([0, 0, 0, 0, 1.0])  # epoch 1: the head only
    assert lrs(10) == pytest.approx([0, 0, 0, top[3], 1.0])  # one more group from the top per 10 steps
    assert lrs(39) == pytest.approx([0, top[1], top[2], top[3], 1.0])
    assert lrs(40) == pytest.approx(top)  # all unfrozen, each group lr / 2.6 of the one above
    off = hooks.param_groups(UlmfitConfig(discriminative_factor=1.0, gradual_unfreezing=False), "finetune")
    assert [r.pattern for r in off] == [r"(^|/)bias$"]  # both switched off: no lr rule at all
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

    from ptm_jax import config as config_lib
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
    objective = FAMILY.objectives["awd_lstm_lm"](cfg, corpus)
    result = fit(objective, cfg.train, make_mesh(cfg.mesh), tmp_path / "pretrain")
    assert result.step == 6 and 3.0 < result.train_metrics["lm_loss"] < 5.6  # ln 256 = 5.55 at the start
    carry = carry_to_tuple(jax.device_get(result.state.carry))
    assert len(carry) == 3 and carry[2].h.shape == (8, 16) and np.abs(carry[2].h).max() > 1e-3
    widths = {objective.batches(8).batch(i, slice(0, 8))["input_ids"].shape[1] for i in range(6)}
    assert widths == {40}  # the tiny preset's one bucket: one compiled step
    with pytest.raises(ConfigError, match="the target-task LM .stage 2. is not finished"):
        _require_finished(tmp_path / "lm_finetune" / "pretrain", 10, "the target-task LM (stage 2)")
    _require_finished(tmp_path / "pretrain", 6, "the general-domain LM (stage 1)")
