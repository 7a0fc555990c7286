"""The optimizers: BERT's AdamW (no bias correction, decoupled decay excluding LayerNorm/bias, clip, warmup +
linear decay) bit for bit as before the parameter-group seam; Adam, SGD, AdaGrad; frozen and step-dependent
parameter groups; the config's [[train.param_groups]] tables."""
import dataclasses
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from ptm_jax.config import ParamGroupConfig, TrainConfig
from ptm_jax.config_loading import load_config
from ptm_jax.presets import list_presets
from ptm_jax.errors import ConfigError
from ptm_jax.train.optim import bert_schedule, make_optimizer
from ptm_jax.train.param_groups import DEFAULT_RULES, layerwise_decay_rules


def test_schedule_warmup_then_linear_decay_counted_from_step_zero():
    s = bert_schedule(1e-3, warmup_steps=10, total_steps=100)
    np.testing.assert_allclose([float(s(i)) for i in (0, 5, 10, 50, 100, 120)],
                               [0.0, 5e-4, 1e-3 * 0.9, 1e-3 * 0.5, 0.0, 0.0], rtol=1e-6, atol=1e-12)


def test_from_peak_schedule_equals_transformers_linear_schedule_with_warmup_at_every_step():
    """train.lr_decay='from_peak' is transformers' get_linear_schedule_with_warmup (the MiniLM SST-2 protocol)."""
    import pytest

    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=5e-5)
    sched = transformers.get_linear_schedule_with_warmup(opt, num_warmup_steps=25, num_training_steps=250)
    want = []
    for _ in range(260):
        want.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    ours = bert_schedule(5e-5, warmup_steps=25, total_steps=250, from_peak=True)
    np.testing.assert_allclose([float(ours(k)) for k in range(260)], want, rtol=1e-6, atol=1e-12)
    bert = bert_schedule(5e-5, warmup_steps=25, total_steps=250)
    assert float(bert(25)) == pytest.approx(4.5e-5) and want[25] == pytest.approx(5e-5)  # BERT drops at warmup end


def test_adamw_matches_hand_computed_updates_without_bias_correction():
    cfg = TrainConfig(learning_rate=0.1, warmup_steps=0, steps=1000, weight_decay=0.01, clip_norm=0.0,
                      adam_b1=0.9, adam_b2=0.999, adam_eps=1e-6)
    tx, sched = make_optimizer(cfg)
    params = {"dense": {"kernel": jnp.array([1.0, -2.0]), "bias": jnp.array([0.5])},
              "norm": {"scale": jnp.array([1.0])}}
    state = tx.init(params)
    grads = [{"dense": {"kernel": jnp.array([0.1, 0.2]), "bias": jnp.array([0.3])}, "norm": {"scale": jnp.array([-0.4])}},
             {"dense": {"kernel": jnp.array([-0.5, 0.1]), "bias": jnp.array([0.2])}, "norm": {"scale": jnp.array([0.1])}}]
    p = jax.tree.map(np.asarray, params)
    m = jax.tree.map(np.zeros_like, p)
    v = jax.tree.map(np.zeros_like, p)
    for step, g in enumerate(grads):
        updates, state = tx.update(g, state, params)
        params = optax.apply_updates(params, updates)
        lr = float(sched(step))
        for grp, name in (("dense", "kernel"), ("dense", "bias"), ("norm", "scale")):
            gg = np.asarray(g[grp][name])
            m[grp][name] = 0.9 * m[grp][name] + 0.1 * gg
            v[grp][name] = 0.999 * v[grp][name] + 0.001 * gg**2
            upd = m[grp][name] / (np.sqrt(v[grp][name]) + 1e-6)
            if name == "kernel":
                upd = upd + 0.01 * p[grp][name]
            p[grp][name] = p[grp][name] - lr * upd
    for grp, name in (("dense", "kernel"), ("dense", "bias"), ("norm", "scale")):
        np.testing.assert_allclose(params[grp][name], p[grp][name], rtol=1e-6)


def test_adam_bias_correction_is_float32_accurate_where_the_direct_form_is_off_by_1e5():
    """AdamW with bias correction equals a float64 computation of it (torch's AdamW takes the correction in double
    precision) to 1e-6 (updates of size ~1) over its first steps, where optax's direct float32 1 - b ** t is 6e-6
    off; and 1 - b ** t is right to a few float32 ulps for every t up to 10^4 (the direct form: 1.3e-5 off at
    t = 1 for b = 0.999)."""
    cfg = TrainConfig(learning_rate=1.0, warmup_steps=0, steps=10, lr_decay="constant", weight_decay=0.0,
                      clip_norm=0.0, adam_bias_correction=True, adam_b1=0.9, adam_b2=0.999, adam_eps=1e-6)
    tx, _ = make_optimizer(cfg)
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal(64).astype(np.float32) for _ in range(4)]
    params = {"w": jnp.zeros(64)}
    state, m, v = tx.init(params), np.zeros(64), np.zeros(64)
    for k, g in enumerate(grads, start=1):
        u, state = tx.update({"w": jnp.asarray(g)}, state, params)
        m, v = 0.9 * m + 0.1 * g.astype(np.float64), 0.999 * v + 0.001 * g.astype(np.float64) ** 2
        want = -(m / (1 - 0.9 ** k)) / (np.sqrt(v / (1 - 0.999 ** k)) + 1e-6)
        np.testing.assert_allclose(np.asarray(u["w"], np.float64), want, rtol=0, atol=1e-6, err_msg=f"step {k}")

    from ptm_jax.train.optim import adam_bias_correction

    t = np.arange(1, 10_001)
    for b in (0.9, 0.98, 0.99, 0.999, 0.9999):
        got = np.asarray(adam_bias_correction(b, jnp.asarray(t, jnp.int32)), np.float64)
        np.testing.assert_allclose(got, 1.0 - b ** t.astype(np.float64), rtol=5e-7, err_msg=str(b))


def test_global_norm_clipping_to_one():
    cfg = TrainConfig(learning_rate=1.0, warmup_steps=0, steps=10, weight_decay=0.0, clip_norm=1.0)
    tx, _ = make_optimizer(cfg)
    params = {"kernel": jnp.zeros(2)}
    state = tx.init(params)
    updates, _ = tx.update({"kernel": jnp.array([30.0, 40.0])}, state, params)
    # clipped gradient = [0.6, 0.8]; first Adam step without bias correction: m/(sqrt(v)+eps) = 0.1g/(sqrt(0.001)|g|)
    np.testing.assert_allclose(updates["kernel"], -np.array([0.6, 0.8]) * 0.1 / (np.sqrt(0.001) * np.array([0.6, 0.8]) + 1e-6), rtol=1e-5)


# ---------------------------------------------------------------------------------------------------------
# The optimizer as it was before the parameter-group seam (ptm_jax/train/optim.py and finetune.py at 3f902aa),
# kept verbatim as the reference for bit-identical updates.

def _pre_seam_is_decayed(path, _leaf):
    name = str(getattr(path[-1], "key", path[-1]))
    return name in ("kernel", "embedding")


def _pre_seam_layerwise_lr_scale(decay, num_layers):
    def scale(tree):
        def one(path, leaf):
            joined = "/".join(str(getattr(k, "key", k)) for k in path)
            m = re.search(r"layers_(\d+)", joined)
            if m:
                return decay ** (num_layers - int(m.group(1)))
            if "embeddings" in joined:
                return decay ** (num_layers + 1)
            return 1.0

        return jax.tree_util.tree_map_with_path(one, tree)

    return scale


def _pre_seam_optimizer(cfg, lr_scale=None):
    from ptm_jax.train.optim import scale_by_adam_no_bias_correction

    schedule = bert_schedule(cfg.learning_rate, cfg.warmup_steps, cfg.steps, from_peak=cfg.lr_decay == "from_peak")
    parts = [optax.clip_by_global_norm(cfg.clip_norm)] if cfg.clip_norm > 0 else []
    parts += [optax.scale_by_adam(cfg.adam_b1, cfg.adam_b2, cfg.adam_eps) if cfg.adam_bias_correction
              else scale_by_adam_no_bias_correction(cfg.adam_b1, cfg.adam_b2, cfg.adam_eps),
              optax.add_decayed_weights(cfg.weight_decay,
                                        mask=lambda p: jax.tree_util.tree_map_with_path(_pre_seam_is_decayed, p))]
    if lr_scale is not None:
        def init(params):
            return optax.EmptyState()

        def update(updates, state, params=None):
            return jax.tree.map(lambda u, s: u * s, updates, lr_scale(updates)), state

        parts.append(optax.GradientTransformation(init, update))
    parts.append(optax.scale_by_learning_rate(schedule))
    return optax.chain(*parts)


def _model_params(preset, scan=False):
    """A real model's initial parameters (the tree the optimizer sees in training: {'params': {...}})."""
    from ptm_jax.families.bert.heads import BertForPreTraining

    cfg = dataclasses.replace(load_config(preset).model, scan_layers=scan)
    ids = jnp.zeros((2, 8), jnp.int32)
    return nn.meta.unbox(BertForPreTraining(cfg).init(jax.random.key(0), ids, ids, ids, ids[:, :2]))


def _grads(params, steps=3):
    """Gradients of different scales per leaf and step (numpy, so that building them costs no compilation)."""
    rng = np.random.default_rng(0)
    return [jax.tree.map(lambda x: (rng.standard_normal(x.shape) * rng.choice([1e-3, 0.1, 3.0])).astype(np.float32),
                         params) for _ in range(steps)]


def _run(tx, params, grads):
    """One update per gradient, by one jitted step (as in training: step.py)."""

    @jax.jit
    def step(params, state, g):
        updates, state = tx.update(g, state, params)
        return optax.apply_updates(params, updates), state

    state = tx.init(params)
    for g in grads:
        params, state = step(params, state, g)
    return params, state


def _optimizer_settings():
    """One preset setting (pretraining or finetuning stage) per distinct chain of operations among all the
    presets: the optimizer, Adam's moments, schedule kind, clipping on/off, decay on/off (the numbers are
    constants of the same operations in both implementations). Warmup is cut to 1 step so that every compared
    update is non-zero."""
    from ptm_jax.train.finetune import finetune_train_config

    seen = {}
    for preset in list_presets():
        cfg = load_config(preset)
        for tcfg in (cfg.train, finetune_train_config(cfg, 1000)):
            tcfg = dataclasses.replace(tcfg, warmup_steps=1, steps=max(tcfg.steps, 10))
            if tcfg.optimizer != "adamw" or tcfg.lr_decay not in ("bert", "from_peak"):  # the pre-seam optimizer:
                continue  # AdamW with BERT's or the from-peak decay (not AdaGrad, SGD, constant or ULMFiT's rates)
            key = (tcfg.optimizer, tcfg.adam_bias_correction, tcfg.lr_decay, tcfg.clip_norm > 0,
                   tcfg.weight_decay > 0, len(tcfg.param_groups))
            seen.setdefault(key, (preset, tcfg))
    return list(seen.values())


def test_default_adamw_is_bit_identical_to_the_pre_seam_optimizer_for_every_preset_setting():
    """Bit for bit without bias correction (BERT); with it (GPT, XLNet) the same state and moments bit for bit and
    parameters within the pre-seam optax bias correction's float32 error (``adam_bias_correction``)."""
    params = _model_params("bert_tiny")
    grads = _grads(params)
    settings = _optimizer_settings()
    assert {t.adam_bias_correction for _, t in settings} == {False, True}  # BERT's moments and GPT/XLNet's
    for preset, tcfg in settings:
        want_p, want_s = _run(_pre_seam_optimizer(tcfg), params, grads)
        tx, _ = make_optimizer(tcfg)
        got_p, got_s = _run(tx, params, grads)
        assert jax.tree.structure(got_s) == jax.tree.structure(want_s), preset  # old checkpoints restore
        for a, b in zip(jax.tree.leaves(got_s), jax.tree.leaves(want_s)):
            assert np.array_equal(np.asarray(a), np.asarray(b)), preset
        for a, b, p in zip(jax.tree.leaves(got_p), jax.tree.leaves(want_p), jax.tree.leaves(params)):
            if tcfg.adam_bias_correction:  # within 3e-5 of the largest update, plus the parameter's rounding
                a, b, p = np.asarray(a), np.asarray(b), np.asarray(p)
                assert np.abs(a - b).max() <= 3e-5 * np.abs(b - p).max() + 2 * np.spacing(np.abs(p).max()), preset
            else:
                assert np.array_equal(np.asarray(a), np.asarray(b)), preset
        moved = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree.leaves(got_p), jax.tree.leaves(params)))
        assert moved > 0, preset


def test_layerwise_decay_is_bit_identical_to_the_pre_seam_finetuning_optimizer():
    params = _model_params("bert_tiny")
    tcfg = TrainConfig(learning_rate=1e-3, warmup_steps=1, steps=10)
    grads = _grads(params)
    want_p, want_s = _run(_pre_seam_optimizer(tcfg, _pre_seam_layerwise_lr_scale(0.8, 2)), params, grads)
    tx, _ = make_optimizer(tcfg, [*DEFAULT_RULES, *layerwise_decay_rules(0.8, 2)])
    got_p, got_s = _run(tx, params, grads)
    assert jax.tree.structure(got_s) == jax.tree.structure(want_s)
    for a, b in zip(jax.tree.leaves((got_p, got_s)), jax.tree.leaves((want_p, want_s))):
        assert np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("preset", ["bert_tiny", "gpt_tiny", "xlnet_tiny"])
def test_default_decay_mask_equals_the_pre_seam_mask_on_every_family(preset):
    """Every family's parameters (BERT, GPT, XLNet, both layer layouts): decayed exactly where the old mask said."""
    from ptm_jax.families.bert.heads import BertForPreTraining
    from ptm_jax.families.gpt.model import GPTLMHeadModel
    from ptm_jax.families.xlnet.model import XLNetLMHeadModel
    from ptm_jax.train.param_groups import multipliers

    ids = jnp.zeros((2, 8), jnp.int32)
    for scan in (False, True):
        cfg = dataclasses.replace(load_config(preset).model, scan_layers=scan)
        init = {"bert": lambda: BertForPreTraining(cfg).init(jax.random.key(0), ids, ids, ids, ids[:, :2]),
                "gpt": lambda: GPTLMHeadModel(cfg).init(jax.random.key(0), ids),
                "xlnet": lambda: XLNetLMHeadModel(cfg).init(jax.random.key(0), ids)}[cfg.family]
        params = nn.meta.unbox(jax.eval_shape(init))
        want = jax.tree_util.tree_map_with_path(_pre_seam_is_decayed, params)
        got = jax.tree.map(lambda m: m == 1.0, multipliers(DEFAULT_RULES, params, "weight_decay"))
        assert got == want
        assert 0 < sum(jax.tree.leaves(got)) < len(jax.tree.leaves(got))


def _small():
    params = {"dense": {"kernel": jnp.array([1.0, -2.0]), "bias": jnp.array([0.5])}, "norm": {"scale": jnp.array([1.0])}}
    grads = [{"dense": {"kernel": jnp.array([0.1, 0.2]), "bias": jnp.array([0.3])}, "norm": {"scale": jnp.array([-0.4])}},
             {"dense": {"kernel": jnp.array([-0.5, 0.1]), "bias": jnp.array([0.2])}, "norm": {"scale": jnp.array([0.1])}}]
    return params, grads


def _apply(cfg, rules=None, steps=2):
    tx, sched = make_optimizer(cfg, rules)
    params, grads = _small()
    state = tx.init(params)
    for g in grads[:steps]:
        updates, state = tx.update(g, state, params)
        params = optax.apply_updates(params, updates)
    return params, state, sched


def test_sgd_is_minus_lr_times_gradient_plus_l2_on_weights_with_linear_decay():
    cfg = TrainConfig(optimizer="sgd", learning_rate=0.5, warmup_steps=0, steps=4, weight_decay=0.1, clip_norm=0.0)
    got, _, _ = _apply(cfg)
    p, grads = _small()
    p = jax.tree.map(np.asarray, p)
    for k, g in enumerate(grads):
        lr = 0.5 * (1 - k / 4)  # word2vec.c's linear decay: alpha = starting_alpha * (1 - progress)
        p = {"dense": {"kernel": p["dense"]["kernel"] - lr * (g["dense"]["kernel"] + 0.1 * p["dense"]["kernel"]),
                       "bias": p["dense"]["bias"] - lr * g["dense"]["bias"]},
             "norm": {"scale": p["norm"]["scale"] - lr * g["norm"]["scale"]}}
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(p)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_sgd_schedule_with_min_lr_ratio_is_word2vecs_alpha_at_every_step():
    """word2vec.c: alpha = starting_alpha * (1 - progress), floored at starting_alpha * 0.0001."""
    from ptm_jax.train.optim import lr_schedule

    cfg = TrainConfig(optimizer="sgd", learning_rate=0.025, warmup_steps=0, steps=1000, min_lr_ratio=1e-4)
    want = [max(0.025 * (1 - k / 1000), 0.025 * 1e-4) for k in range(1010)]
    sched = lr_schedule(cfg)
    np.testing.assert_allclose([float(sched(k)) for k in range(0, 1010, 7)], want[::7], rtol=1e-6, atol=1e-9)
    assert float(sched(1005)) == pytest.approx(2.5e-6)


def test_adagrad_divides_by_the_root_of_the_summed_squares_from_the_initial_accumulator():
    cfg = TrainConfig(optimizer="adagrad", learning_rate=0.05, warmup_steps=0, steps=10, lr_decay="constant",
                      weight_decay=0.0, clip_norm=0.0, adagrad_initial_accumulator=1.0)
    got, _, sched = _apply(cfg)
    assert float(sched(7)) == pytest.approx(0.05)
    p, grads = _small()
    acc = jax.tree.map(lambda x: np.ones_like(np.asarray(x)), p)
    p = jax.tree.map(np.asarray, p)
    for g in grads:  # glove.c: gradsq starts at 1; w -= eta * grad / sqrt(gradsq); gradsq += grad^2 (optax: sum first)
        acc = jax.tree.map(lambda a, x: a + np.asarray(x) ** 2, acc, g)
        p = jax.tree.map(lambda w, x, a: w - 0.05 * np.asarray(x) / np.sqrt(a + 1e-7), p, g, acc)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(p)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_adam_is_optax_adam_with_l2_on_weights_only():
    cfg = TrainConfig(optimizer="adam", learning_rate=0.01, warmup_steps=0, steps=1000, lr_decay="constant",
                      weight_decay=0.1, clip_norm=0.0, adam_eps=1e-8)
    got, _, _ = _apply(cfg)
    params, grads = _small()
    ref = optax.chain(optax.add_decayed_weights(0.1, mask={"dense": {"kernel": True, "bias": False},
                                                           "norm": {"scale": False}}),
                      optax.adam(0.01, eps=1e-8))
    state = ref.init(params)
    for g in grads:
        u, state = ref.update(g, state, params)
        params = optax.apply_updates(params, u)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(params)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_frozen_group_gets_no_update_and_no_optimizer_state():
    cfg = TrainConfig(learning_rate=0.1, warmup_steps=0, steps=10,
                      param_groups=[ParamGroupConfig("norm/", frozen=True)])
    got, state, _ = _apply(cfg)
    params, _ = _small()
    assert np.array_equal(got["norm"]["scale"], params["norm"]["scale"])
    assert not np.allclose(got["dense"]["kernel"], params["dense"]["kernel"])
    n_state = sum(x.size for x in jax.tree.leaves(state) if np.ndim(x))
    assert n_state == 2 * 3  # Adam's m and v for the 3 trainable numbers, none for the frozen one


def test_lr_multiplier_and_start_step_scale_the_update_of_a_group():
    base = TrainConfig(learning_rate=0.1, warmup_steps=0, steps=10, clip_norm=0.0)
    ref, _, _ = _apply(base)
    half, _, _ = _apply(dataclasses.replace(base, param_groups=[ParamGroupConfig("bias", lr=0.5)]))
    params, _ = _small()
    np.testing.assert_allclose(half["dense"]["bias"] - params["dense"]["bias"],
                               0.5 * (ref["dense"]["bias"] - params["dense"]["bias"]), rtol=1e-6)
    assert np.array_equal(half["dense"]["kernel"], ref["dense"]["kernel"])
    # start_step=1: no update at step 0, the full update at step 1 (gradual unfreezing)
    late, _, _ = _apply(dataclasses.replace(base, param_groups=[ParamGroupConfig("kernel", start_step=1)]), steps=1)
    assert np.array_equal(late["dense"]["kernel"], params["dense"]["kernel"])
    late2, _, _ = _apply(dataclasses.replace(base, param_groups=[ParamGroupConfig("kernel", start_step=1)]))
    assert not np.allclose(late2["dense"]["kernel"], params["dense"]["kernel"])


def test_group_before_its_start_step_is_frozen_for_clipping_moments_and_bias_correction():
    """start_step (gradual unfreezing) freezes as fastai's requires_grad=False does: before it the group's gradient
    is left out of the clipping norm, its Adam moments stay zero and it gets no update or decay; its first
    update is a first Adam step (bias correction counts its own steps), clipped with everyone's gradients."""
    base = TrainConfig(optimizer="adamw", adam_bias_correction=True, learning_rate=0.1, warmup_steps=0, steps=10,
                       clip_norm=0.2, weight_decay=0.1, lr_decay="constant")
    late = dataclasses.replace(base, param_groups=[ParamGroupConfig("kernel", start_step=1)])
    params, grads = _small()
    got, state, _ = _apply(late, steps=1)
    assert np.array_equal(got["dense"]["kernel"], params["dense"]["kernel"])
    adam = [x for x in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, optax.ScaleByAdamState))
            if isinstance(x, optax.ScaleByAdamState)][0]
    assert not np.any(adam.mu["dense"]["kernel"]) and not np.any(adam.nu["dense"]["kernel"])
    assert np.all(adam.mu["dense"]["bias"] != 0)
    # the others moved exactly as if the kernel had had no gradient at all (the clip norm left it out)
    tx, _ = make_optimizer(base)
    no_kernel = {**grads[0], "dense": {**grads[0]["dense"], "kernel": jnp.zeros(2)}}
    u, _ = tx.update(no_kernel, tx.init(params), params)
    np.testing.assert_allclose(got["dense"]["bias"], params["dense"]["bias"] + u["dense"]["bias"], rtol=1e-6)
    np.testing.assert_allclose(got["norm"]["scale"], params["norm"]["scale"] + u["norm"]["scale"], rtol=1e-6)
    # step 1: the kernel's first Adam step, t = 1: m_hat = g, v_hat = g^2 of the clipped gradient
    got2, _, _ = _apply(late, steps=2)
    g = np.concatenate([np.ravel(x) for x in jax.tree.leaves(grads[1])])
    clipped = np.asarray(grads[1]["dense"]["kernel"]) * min(1.0, 0.2 / np.linalg.norm(g))
    want = params["dense"]["kernel"] - 0.1 * (clipped / (np.abs(clipped) + 1e-6) + 0.1 * params["dense"]["kernel"])
    np.testing.assert_allclose(got2["dense"]["kernel"], want, rtol=1e-5)


def test_weight_decay_multiplier_scales_the_decoupled_decay():
    base = TrainConfig(learning_rate=0.1, warmup_steps=0, steps=10, clip_norm=0.0, weight_decay=0.1)
    zero_g = [{"dense": {"kernel": jnp.zeros(2), "bias": jnp.zeros(1)}, "norm": {"scale": jnp.zeros(1)}}]
    for mult, want in ((1.0, 0.1 * 0.1), (0.5, 0.05 * 0.1), (0.0, 0.0)):
        cfg = dataclasses.replace(base, param_groups=[ParamGroupConfig("kernel", weight_decay=mult)])
        tx, _ = make_optimizer(cfg)
        params, _ = _small()
        u, _ = tx.update(zero_g[0], tx.init(params), params)
        np.testing.assert_allclose(u["dense"]["kernel"], -want * np.array([1.0, -2.0]), rtol=1e-6)


def test_param_groups_from_toml_tables_and_overrides(tmp_path):
    preset = tmp_path / "groups.toml"
    preset.write_text('extends = "bert_tiny"\n[train]\noptimizer = "sgd"\n'
                      '[[train.param_groups]]\npattern = "embeddings"\nfrozen = true\n'
                      '[[train.param_groups]]\npattern = "layers_0/"\nlr = 0.5\nstart_step = 3\n')
    cfg = load_config(str(preset))
    assert cfg.train.optimizer == "sgd"
    assert cfg.train.param_groups == [ParamGroupConfig("embeddings", frozen=True),
                                      ParamGroupConfig("layers_0/", lr=0.5, start_step=3)]
    cfg = load_config("bert_tiny", ['finetune.param_groups=[{"pattern": "pooler", "lr": 2}]'])
    assert cfg.finetune.param_groups == [ParamGroupConfig("pooler", lr=2.0)]


@pytest.mark.parametrize("override,message", [
    ('train.param_groups=[{"patern": "x"}]', r"unknown config key 'train\.param_groups\[0\]\.patern'\. Did you mean: "
                                              r"train\.param_groups\[0\]\.pattern"),
    ('train.param_groups=[{"pattern": "x", "lr": "big"}]', r"train\.param_groups\[0\]\.lr: expected float"),
    ('train.param_groups={"pattern": "x"}', r"train\.param_groups: expected a list of tables"),
    ('train.param_groups=[{"pattern": "(x"}]', r"train\.param_groups\[0\]\.pattern='\(x' is not a regular expression"),
    ('train.param_groups=[{"lr": 0.5}]', r"train\.param_groups\[0\]\.pattern is empty"),
    ("train.optimizer=adagard", r"train\.optimizer: 'adagard' is not allowed.*Did you mean adagrad"),
])
def test_bad_param_groups_and_optimizer_are_config_errors_naming_the_field(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config("bert_tiny", [override])


def test_a_rule_that_matches_no_parameter_is_a_config_error_listing_paths():
    cfg = TrainConfig(param_groups=[ParamGroupConfig("encoder/layer_0/")])
    tx, _ = make_optimizer(cfg)
    with pytest.raises(ConfigError, match=r"train\.param_groups\[0\]: pattern 'encoder/layer_0/' matches no "
                                          r"parameter; paths look like dense/bias"):
        tx.init(_small()[0])
