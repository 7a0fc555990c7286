"""BERT's AdamW: no bias correction, decoupled decay excluding LayerNorm/bias, clip, warmup + linear decay."""
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ptm_jax.config import TrainConfig
from ptm_jax.train.optim import bert_schedule, make_optimizer


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


def test_global_norm_clipping_to_one():
    cfg = TrainConfig(learning_rate=1.0, warmup_steps=0, steps=10, weight_decay=0.0, clip_norm=1.0)
    tx, _ = make_optimizer(cfg)
    params = {"kernel": jnp.zeros(2)}
    state = tx.init(params)
    updates, _ = tx.update({"kernel": jnp.array([30.0, 40.0])}, state, params)
    # clipped gradient = [0.6, 0.8]; first Adam step without bias correction: m/(sqrt(v)+eps) = 0.1g/(sqrt(0.001)|g|)
    np.testing.assert_allclose(updates["kernel"], -np.array([0.6, 0.8]) * 0.1 / (np.sqrt(0.001) * np.array([0.6, 0.8]) + 1e-6), rtol=1e-5)
