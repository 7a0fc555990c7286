"""The SAN answer module (models/san.py; Liu et al. 2018 Sec. 2, mt-dnn module/san.py): its K-step recurrence
against a numpy re-derivation from the parameters, stochastic prediction dropout (train only, seeded, one step
always kept), and the option's bad values (mtdnn.answer, san_steps, san_step_dropout)."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ptm_jax.config_loading import load_config
from ptm_jax.errors import ConfigError
from ptm_jax.jobs.mtdnn.config import MtdnnConfig
from ptm_jax.models.san import SANAnswer
from ptm_jax.objectives.multi_task import TaskData, answer_of, san_settings


def _pair_batch(b=3, s=9, h=8, seed=0):
    rng = np.random.default_rng(seed)
    seq = rng.normal(size=(b, s, h)).astype(np.float32)
    # [CLS] A [SEP] | B [SEP] | padding, lengths differing per row
    seg = np.array([[0, 0, 0, 1, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 1, 1, 0, 0, 0, 0, 0]])[:b]
    mask = np.array([[1] * 7 + [0] * 2, [1] * 9, [1] * 4 + [0] * 5])[:b]
    return seq, mask.astype(np.int32), seg.astype(np.int32)


def _softmax(x, mask=None):
    if mask is not None:
        x = np.where(mask, x, -np.inf)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _numpy_san_steps(p, seq, mask, seg, steps):
    """[B, K, C] step distributions, written from the equations of Liu et al. 2018 Sec. 2 as mt-dnn runs them:
    s_0 the self-attentive summary of segment 0, x_t the bilinear read of segment 1, P_t from [x; s; |x-s|; x*s],
    s_{t+1} = GRUCell(x_t, s_t)."""
    first, second = (mask > 0) & (seg == 0), (mask > 0) & (seg == 1)
    d = lambda name: (np.asarray(p[name]["dense"]["kernel"]), np.asarray(p[name]["dense"]["bias"]))  # noqa: E731
    (ws, bs), (wa, ba), (wc, bc) = d("summary"), d("attention"), d("classifier")
    g = {k: np.asarray(v) for k, v in p["gru"].items()}
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    out = []
    for b in range(seq.shape[0]):
        m = seq[b]
        s = _softmax((m @ ws + bs)[:, 0], first[b]) @ m
        row = []
        for _ in range(steps):
            x = _softmax(m @ (s @ wa + ba), second[b]) @ m
            row.append(_softmax(np.concatenate([x, s, np.abs(x - s), x * s]) @ wc + bc))
            gi, gh, f = x @ g["input_kernel"] + g["input_bias"], s @ g["hidden_kernel"] + g["hidden_bias"], len(s)
            r, z = sig(gi[:f] + gh[:f]), sig(gi[f:2 * f] + gh[f:2 * f])
            n = np.tanh(gi[2 * f:] + r * gh[2 * f:])
            s = (1 - z) * n + z * s
        out.append(row)
    return np.asarray(out)


def test_san_steps_match_numpy_and_inference_averages_all_k_step_softmaxes():
    seq, mask, seg = _pair_batch()
    model = SANAnswer(3, steps=5, dropout=0.1, step_dropout=0.1, init_std=0.5)  # wide init: steps differ visibly
    params = nn.meta.unbox(model.init(jax.random.key(0), seq, mask, seg))["params"]
    out, inter = model.apply({"params": params}, seq, mask, seg, mutable=["intermediates"])
    steps = np.asarray(inter["intermediates"]["step_probs"][0])
    ref = _numpy_san_steps(params, seq, mask, seg, 5)
    assert steps.shape == (3, 5, 3)
    np.testing.assert_allclose(steps, ref, rtol=2e-5, atol=1e-6)
    # the answer is log(mean of the K softmaxes), a distribution; the steps really differ (the GRU moves s)
    np.testing.assert_allclose(np.exp(np.asarray(out)), ref.mean(1), rtol=2e-5, atol=1e-7)
    np.testing.assert_allclose(np.exp(np.asarray(out)).sum(-1), 1.0, atol=1e-5)
    assert np.abs(ref[:, 0] - ref[:, -1]).max() > 1e-3
    # which memory is which: the padding and segment-1 tokens never reach s_0; segment-0 tokens after [CLS]
    # do, and segment-1 tokens change every step's read
    for pos, seg_is in ((7, None), (5, 1), (1, 0)):
        moved = seq.copy()
        moved[0, pos] += 3.0
        got = np.asarray(model.apply({"params": params}, moved, mask, seg, mutable=["intermediates"])[1][
            "intermediates"]["step_probs"][0])
        if seg_is is None:  # padding: nothing changes
            np.testing.assert_allclose(got[0], steps[0], rtol=1e-6)
        else:
            assert np.abs(got[0, 0] - steps[0, 0]).max() > 1e-4  # step 0 sees both s_0 (seg 0) and the read (seg 1)
        np.testing.assert_allclose(got[1:], steps[1:], rtol=1e-6)  # rows are independent


def test_stochastic_prediction_dropout_changes_training_output_only_seeded_and_keeps_a_step_per_row():
    seq, mask, seg = _pair_batch(b=3)
    # memory/state dropout off, so training and inference differ only by the dropped steps
    model = SANAnswer(2, steps=5, dropout=0.0, step_dropout=0.5, init_std=0.5)
    params = nn.meta.unbox(model.init(jax.random.key(0), seq, mask, seg))
    evals = [model.apply(params, seq, mask, seg, deterministic=True) for _ in range(2)]
    all_steps = np.asarray(model.apply(params, seq, mask, seg, mutable=["intermediates"])[1]["intermediates"][
        "step_probs"][0])
    np.testing.assert_array_equal(evals[0], evals[1])
    np.testing.assert_allclose(np.exp(np.asarray(evals[0])), all_steps.mean(1), rtol=1e-6)
    changed = 0
    for seed in range(8):
        train, inter = model.apply(params, seq, mask, seg, deterministic=False, rngs={"dropout": jax.random.key(seed)},
                                   mutable=["intermediates"])
        keep = np.asarray(inter["intermediates"]["step_keep"][0])
        assert keep.min(1).min() >= 0 and np.all(keep.sum(1) >= 1)
        want = (keep[..., None] * all_steps).sum(1) / keep.sum(1, keepdims=True)  # mean over the kept steps
        np.testing.assert_allclose(np.exp(np.asarray(train)), want, rtol=1e-5)
        dropped = keep.sum(1) < 5
        assert np.all(np.abs(np.asarray(train) - np.asarray(evals[0])).max(1)[dropped] > 1e-6)
        np.testing.assert_allclose(np.asarray(train)[~dropped], np.asarray(evals[0])[~dropped], rtol=1e-6)
        changed += int(dropped.any())
        again = model.apply(params, seq, mask, seg, deterministic=False, rngs={"dropout": jax.random.key(seed)})
        np.testing.assert_array_equal(train, again)  # a function of the step rng
    assert changed >= 6
    # the keep rate: each step kept with 1 - p, plus the step forced per row: (1 - p) + p / K = 0.6
    big = jnp.asarray(np.repeat(seq[:1], 4000, 0)), jnp.asarray(np.repeat(mask[:1], 4000, 0))
    keep = np.asarray(model.apply(params, big[0], big[1], jnp.asarray(np.repeat(seg[:1], 4000, 0)),
                                  deterministic=False, rngs={"dropout": jax.random.key(9)},
                                  mutable=["intermediates"])[1]["intermediates"]["step_keep"][0])
    assert keep.mean() == pytest.approx(0.6, abs=0.015) and keep.sum(1).min() >= 1


def test_bad_answer_options_are_config_errors_and_san_goes_to_pair_classification_tasks_only(tmp_path):
    with pytest.raises(ConfigError, match=r"mtdnn.answer: 'bilinear' is not allowed"):
        load_config("bert_tiny", ["mtdnn.answer=bilinear"])
    assert load_config("bert_tiny", ["mtdnn.answer=san"]).plugins["mtdnn"].answer == "san"
    for fields, msg in (({"san_steps": 0}, r"mtdnn.san_steps=0: .* at least 1"),
                        ({"san_step_dropout": 1.0}, r"mtdnn.san_step_dropout=1.0 must be in \[0, 1\)")):
        with pytest.raises(ConfigError, match=msg):
            san_settings(MtdnnConfig(**fields))
    # through `ptm finetune --job mtdnn`: refused before any model or data is read
    from ptm_jax.train.finetune import finetune

    cfg = load_config("bert_tiny", ["finetune.job=mtdnn", "mtdnn.tasks=[rte]", "mtdnn.san_steps=0",
                                    f"finetune.init='{tmp_path / 'missing'}'", f"output_dir='{tmp_path}'"])
    with pytest.raises(ConfigError, match="mtdnn.san_steps=0"):
        finetune(cfg)
    san = MtdnnConfig(answer="san")
    task = lambda kind, pair: TaskData("t", kind, 2, 1, None, {}, np.zeros(1), None, "accuracy", "", pair)  # noqa
    assert [answer_of(task(k, p), san) for k, p in (("classification", True), ("classification", False),
                                                    ("regression", True), ("ranking", True))] == [
        "san", "linear", "linear", "linear"]
    assert answer_of(task("classification", True), MtdnnConfig()) == "linear"
