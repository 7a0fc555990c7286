"""train.optimizer=lamb against LAMB implementations ptm_jax did not write, over a whole trajectory at a tiny shape:

- torch-optimizer's ``Lamb`` (the paper's v3 update, no bias correction; tests/lamb_reference_env.py): a 4-layer
  network with an embedding, two kernels, their biases and a LayerNorm, 30 steps of warmup + polynomial decay
  (power 0.5, NVIDIA's recipe) with global-norm clipping to 1. ptm's exclusions (no weight decay and no trust ratio
  on LayerNorm and biases, NVIDIA's FusedLAMB) are torch-optimizer's two parameter groups: the decayed leaves in a
  ``Lamb(weight_decay=0.01)``, the excluded ones in a ``Lamb(weight_decay=0, adam=True)`` (trust ratio 1);
  ``clamp_value`` is raised out of reach, as its docstring says to (the paper has no clamp).
- optax's ``lamb`` (bias-corrected moments, every leaf decayed and adapted) for ``adam_bias_correction=true``, the
  setting of the BERT-large phase presets.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lamb_reference_env import MISSING, lamb_class
from ptm_jax.config import TrainConfig
from ptm_jax.train.optim import make_optimizer

V, D, H, C, B, L = 50, 16, 24, 5, 8, 6
STEPS = 30
EXCLUDED = ("dense/bias", "LayerNorm/scale", "LayerNorm/bias", "out/bias")


def init_params(seed: int = 0) -> dict:
    r = np.random.default_rng(seed)
    return {"embed": {"embedding": r.normal(0, 0.5, (V, D))},
            "dense": {"kernel": r.normal(0, 0.3, (D, H)), "bias": r.normal(0, 0.1, (H,))},
            "LayerNorm": {"scale": 1 + r.normal(0, 0.1, (H,)), "bias": r.normal(0, 0.1, (H,))},
            "out": {"kernel": r.normal(0, 0.3, (H, C)), "bias": np.zeros(C)}}


def batches() -> list[tuple[np.ndarray, np.ndarray]]:
    r = np.random.default_rng(1)
    fixed = [r.integers(0, V, (B, L)) for _ in range(3)]  # labels a function of the ids: something to learn
    return [(ids, ids[:, 0] % C) for ids in (fixed[k % 3] for k in range(STEPS))]


def jax_loss(p, ids, labels):
    h = jnp.tanh(p["embed"]["embedding"][ids].mean(axis=1) @ p["dense"]["kernel"] + p["dense"]["bias"])
    mu, var = h.mean(-1, keepdims=True), h.var(-1, keepdims=True)
    h = (h - mu) / jnp.sqrt(var + 1e-5) * p["LayerNorm"]["scale"] + p["LayerNorm"]["bias"]
    logits = h @ p["out"]["kernel"] + p["out"]["bias"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def lamb_config(**kw) -> TrainConfig:
    base = dict(optimizer="lamb", learning_rate=0.02, warmup_steps=5, steps=STEPS, lr_decay_power=0.5,
                weight_decay=0.01, clip_norm=1.0, adam_b1=0.9, adam_b2=0.999, adam_eps=1e-6)
    return TrainConfig(**{**base, **kw})


def run_ptm(cfg: TrainConfig, rules=None) -> tuple[list[dict], list[float]]:
    tx, _ = make_optimizer(cfg, rules)
    params = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), init_params())
    state = tx.init(params)
    step = jax.jit(lambda p, s, x, y: _step(tx, p, s, x, y))
    out, losses = [], []
    for ids, labels in batches():
        params, state, loss = step(params, state, ids, labels)
        out.append(jax.tree.map(np.asarray, params))
        losses.append(float(loss))
    return out, losses


def _step(tx, p, s, x, y):
    loss, g = jax.value_and_grad(jax_loss)(p, x, y)
    u, s = tx.update(g, s, p)
    return optax.apply_updates(p, u), s, loss


@pytest.mark.skipif(lamb_class() is None, reason=MISSING)
def test_lamb_trajectory_matches_torch_optimizer_lamb_with_bert_exclusions_over_30_steps():
    torch = pytest.importorskip("torch")
    lamb = lamb_class()
    cfg = lamb_config(adam_bias_correction=False)
    ours, our_losses = run_ptm(cfg)

    tp = {f"{a}/{b}": torch.nn.Parameter(torch.tensor(v, dtype=torch.float32))
          for a, leaves in init_params().items() for b, v in leaves.items()}
    decayed = [p for k, p in tp.items() if k not in EXCLUDED]
    plain = [p for k, p in tp.items() if k in EXCLUDED]
    opts = [lamb(decayed, lr=1.0, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01, clamp_value=1e12),
            lamb(plain, lr=1.0, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, adam=True)]
    _, schedule = make_optimizer(cfg)
    worst, torch_losses = 0.0, []
    for k, (ids, labels) in enumerate(batches()):
        ids_t, labels_t = torch.tensor(ids), torch.tensor(labels)
        h = torch.tanh(tp["embed/embedding"][ids_t].mean(dim=1) @ tp["dense/kernel"] + tp["dense/bias"])
        h = torch.nn.functional.layer_norm(h, (H,), tp["LayerNorm/scale"], tp["LayerNorm/bias"], eps=1e-5)
        loss = torch.nn.functional.cross_entropy(h @ tp["out/kernel"] + tp["out/bias"], labels_t)
        for o in opts:
            o.zero_grad()
        loss.backward()
        torch_losses.append(float(loss.detach()))
        norm = torch.sqrt(sum((p.grad ** 2).sum() for p in tp.values()))  # optax.clip_by_global_norm(1.0)
        if norm > 1.0:
            for p in tp.values():
                p.grad.mul_(1.0 / norm)
        for o in opts:
            for g in o.param_groups:
                g["lr"] = float(schedule(k))
            o.step()
        for name, p in tp.items():
            a, b = name.split("/")
            diff = np.abs(p.detach().numpy() - ours[k][a][b]).max()
            worst = max(worst, float(diff))
    print(f"LAMB parity: largest parameter difference over {STEPS} steps {worst:.3g}; losses "
          f"{our_losses[0]:.4f} -> {our_losses[-1]:.4f} (ptm) and {torch_losses[0]:.4f} -> {torch_losses[-1]:.4f}")
    assert worst < 2e-6, f"largest parameter difference over {STEPS} steps: {worst:.3g}"
    np.testing.assert_allclose(our_losses, torch_losses, rtol=1e-5)
    assert our_losses[-1] < 0.7 * our_losses[0], "the trajectory trains (else parity would say little)"


def test_bias_corrected_lamb_equals_optax_lamb_when_every_leaf_is_decayed():
    cfg = lamb_config(adam_bias_correction=True)
    ours, _ = run_ptm(cfg, rules=[])
    _, schedule = make_optimizer(cfg)
    tx = optax.chain(optax.clip_by_global_norm(1.0),
                     optax.lamb(schedule, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01))
    params = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), init_params())
    state = tx.init(params)
    step = jax.jit(lambda p, s, x, y: _step(tx, p, s, x, y))
    for k, (ids, labels) in enumerate(batches()):
        params, state, _ = step(params, state, ids, labels)
        for a, leaves in params.items():
            for b, v in leaves.items():
                np.testing.assert_allclose(np.asarray(v), ours[k][a][b], rtol=0, atol=1e-6, err_msg=f"{a}/{b} {k}")


def test_lamb_leaves_layernorm_and_biases_unadapted_and_undecayed():
    """One step from zero moments: an excluded leaf moves by lr * m / (sqrt(v) + eps) exactly; a decayed leaf by
    lr * |p| / |u| * u with u = m / (sqrt(v) + eps) + wd * p."""
    cfg = lamb_config(adam_bias_correction=False, clip_norm=0.0, warmup_steps=0, lr_decay="constant")
    tx, _ = make_optimizer(cfg)
    params = {"dense": {"kernel": jnp.full((3, 2), 2.0), "bias": jnp.full((2,), 2.0)}}
    grads = {"dense": {"kernel": jnp.full((3, 2), 0.5), "bias": jnp.full((2,), 0.5)}}
    updates, _ = tx.update(grads, tx.init(params), params)
    u = 0.05 / (np.sqrt(0.001 * 0.25) + 1e-6)  # (1 - b1) g / (sqrt((1 - b2) g^2) + eps)
    np.testing.assert_allclose(updates["dense"]["bias"], -0.02 * u, rtol=1e-6)
    full = u + 0.01 * 2.0
    np.testing.assert_allclose(updates["dense"]["kernel"], -0.02 * (2.0 / full) * full, rtol=1e-6)


def test_poly_decay_power_half_is_nvidia_poly_warmup_after_warmup():
    from ptm_jax.train.optim import lr_schedule

    s = lr_schedule(TrainConfig(learning_rate=6e-3, warmup_steps=2000, steps=7038, lr_decay_power=0.5))
    for k in (0, 1000, 2000, 5000, 7037):
        want = 6e-3 * k / 2000 if k < 2000 else 6e-3 * (1 - k / 7038) ** 0.5
        assert abs(float(s(k)) - want) <= 1e-4 * want  # float32: 1 - k / T near the end
