"""The lax.scan LSTM(P) (ptm_jax/models/lstm.py) against torch.nn.LSTM at the same weights, both directions with
padding, carries in and out, gradients; clipping against a step-by-step numpy loop."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ptm_jax.models.lstm import LSTM, LstmCarry, lstm_scan

B, T, D, H, P = 3, 7, 5, 6, 4
LENGTHS = [7, 4, 1]


@pytest.fixture(scope="module")
def torch_run():
    torch.manual_seed(0)
    net = torch.nn.LSTM(D, H, proj_size=P, batch_first=True, bidirectional=True).double()
    x = torch.randn(B, T, D, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(2, B, P, dtype=torch.float64)
    c0 = torch.randn(2, B, H, dtype=torch.float64)
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, LENGTHS, batch_first=True, enforce_sorted=True)
    out, (hn, cn) = net(packed, (h0, c0))
    out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=T)
    out.sum().backward()
    return net, x, h0, c0, out.detach().numpy(), hn.detach().numpy(), cn.detach().numpy()


def _weights(net, suffix):
    g = lambda name: getattr(net, name + suffix).detach().numpy().astype(np.float32)
    return {"kernel": g("weight_ih_l0").T, "recurrent_kernel": g("weight_hh_l0").T,
            "bias": g("bias_ih_l0") + g("bias_hh_l0"), "projection": g("weight_hr_l0").T}


def test_lstmp_matches_torch_both_directions_with_padding_and_carry(torch_run):
    net, x, h0, c0, out, hn, cn = torch_run
    mask = np.arange(T)[None, :] < np.array(LENGTHS)[:, None]
    xs = jnp.asarray(x.detach().numpy(), jnp.float32)
    for d, (suffix, reverse) in enumerate((("", False), ("_reverse", True))):
        carry = LstmCarry(jnp.asarray(c0[d].numpy(), jnp.float32), jnp.asarray(h0[d].numpy(), jnp.float32))
        ys, final = lstm_scan(_weights(net, suffix), xs, jnp.asarray(mask), carry, reverse=reverse)
        np.testing.assert_allclose(np.asarray(ys), out[..., d * P:(d + 1) * P], atol=1e-5)
        np.testing.assert_allclose(np.asarray(final.h), hn[d], atol=1e-5)
        np.testing.assert_allclose(np.asarray(final.c), cn[d], atol=1e-5)
        assert np.all(np.asarray(ys)[~mask] == 0.0)


def test_lstm_module_gradients_match_torch(torch_run):
    """The Flax module's params take the documented layout; d(sum of outputs)/d(inputs and kernels) = torch's."""
    net, x, h0, c0, _, _, _ = torch_run
    mask = jnp.asarray(np.arange(T)[None, :] < np.array(LENGTHS)[:, None])
    xs = jnp.asarray(x.detach().numpy(), jnp.float32)
    carry = LstmCarry(jnp.asarray(c0[0].numpy(), jnp.float32), jnp.asarray(h0[0].numpy(), jnp.float32))
    model = LSTM(hidden_size=H, proj_size=P)
    params = model.init(jax.random.PRNGKey(0), xs, mask)
    import flax.linen as nn

    assert jax.tree.map(jnp.shape, nn.meta.unbox(params))["params"] == {
        "kernel": (D, 4 * H), "recurrent_kernel": (P, 4 * H), "bias": (4 * H,), "projection": (H, P)}
    assert nn.get_partition_spec(params)["params"]["projection"] == jax.sharding.PartitionSpec("mlp", "embed")
    params = {"params": _weights(net, "")}

    def total(p, inp):
        return model.apply(p, inp, mask, carry)[0].sum()

    gp, gx = jax.grad(total, argnums=(0, 1))(params, xs)
    # torch's run summed both directions; the forward direction's input gradient is not separable, so compare the
    # kernel gradients (each belongs to one direction) and the input gradient of a forward-only torch run
    np.testing.assert_allclose(np.asarray(gp["params"]["kernel"]), net.weight_ih_l0.grad.numpy().T, atol=1e-5)
    np.testing.assert_allclose(np.asarray(gp["params"]["recurrent_kernel"]), net.weight_hh_l0.grad.numpy().T,
                               atol=1e-5)
    np.testing.assert_allclose(np.asarray(gp["params"]["projection"]), net.weight_hr_l0.grad.numpy().T, atol=1e-5)
    one = torch.nn.LSTM(D, H, proj_size=P, batch_first=True).double()
    with torch.no_grad():
        for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_hr_l0"):
            getattr(one, name).copy_(getattr(net, name))
    xt = x.detach().clone().requires_grad_(True)
    packed = torch.nn.utils.rnn.pack_padded_sequence(xt, LENGTHS, batch_first=True)
    o, _ = one(packed, (h0[:1], c0[:1]))
    torch.nn.utils.rnn.pad_packed_sequence(o, batch_first=True)[0].sum().backward()
    np.testing.assert_allclose(np.asarray(gx), xt.grad.numpy(), atol=1e-5)


def test_clipping_and_recurrent_fn_match_a_numpy_loop():
    """Cell clip after the update, projection clip after the projection (TF LSTMCell); ``recurrent_fn`` sees the
    recurrent kernel (weight-drop's hook): zeroing it makes every step independent of the previous output."""
    rng = np.random.default_rng(1)
    w = {"kernel": rng.normal(0, 1.5, (D, 4 * H)), "recurrent_kernel": rng.normal(0, 1.5, (P, 4 * H)),
         "bias": rng.normal(0, 1, (4 * H,)), "projection": rng.normal(0, 1.5, (H, P))}
    x = rng.normal(0, 1, (B, T, D))
    sig = lambda v: 1 / (1 + np.exp(-v))

    def loop(zero_rec=False):
        c, h, ys = np.zeros((B, H)), np.zeros((B, P)), []
        rec = 0 * w["recurrent_kernel"] if zero_rec else w["recurrent_kernel"]
        for t in range(T):
            i, f, g, o = np.split(x[:, t] @ w["kernel"] + h @ rec + w["bias"], 4, axis=-1)
            c = np.clip(sig(f) * c + sig(i) * np.tanh(g), -0.5, 0.5)
            h = np.clip((sig(o) * np.tanh(c)) @ w["projection"], -0.3, 0.3)
            ys.append(h)
        return np.stack(ys, 1), c

    f32 = {k: jnp.asarray(v, jnp.float32) for k, v in w.items()}
    ys, final = lstm_scan(f32, jnp.asarray(x, jnp.float32), cell_clip=0.5, proj_clip=0.3)
    ref, ref_c = loop()
    np.testing.assert_allclose(np.asarray(ys), ref, atol=1e-5)
    np.testing.assert_allclose(np.asarray(final.c), ref_c, atol=1e-5)
    assert np.abs(ref_c).max() == pytest.approx(0.5) and np.abs(ref).max() == pytest.approx(0.3)

    model = LSTM(hidden_size=H, proj_size=P, cell_clip=0.5, proj_clip=0.3)
    ys0 = model.apply({"params": f32}, jnp.asarray(x, jnp.float32), recurrent_fn=jnp.zeros_like)[0]
    np.testing.assert_allclose(np.asarray(ys0), loop(zero_rec=True)[0], atol=1e-5)
