"""The cuDNN LSTM path (models/lstm.py ``lstm_cudnn``) against the ``lax.scan`` LSTM.

cuDNN's kernel needs a GPU; on CPU the same weight packing, sequence lengths and in-place flipping run around
``jax.experimental.rnn.lstm_ref`` (jax's pure reference of the cuDNN kernel), so what is checked here is
everything between ptm's layout and the kernel. Tolerance 1e-5 (float32, the same products)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ptm_jax.errors import ConfigError
from ptm_jax.models.lstm import LSTM, LstmCarry, lstm_cudnn, lstm_scan

B, T, D, H = 3, 7, 5, 6


def _setup():
    ks = jax.random.split(jax.random.key(0), 6)
    w = {"kernel": jax.random.normal(ks[0], (D, 4 * H)) * 0.3,
         "recurrent_kernel": jax.random.normal(ks[1], (H, 4 * H)) * 0.3,
         "bias": jax.random.normal(ks[2], (4 * H,)) * 0.1}
    x = jax.random.normal(ks[3], (B, T, D))
    mask = jnp.arange(T)[None] < jnp.array([[7], [4], [0]])  # full, ragged, empty rows
    carry = LstmCarry(jax.random.normal(ks[4], (B, H)), jax.random.normal(ks[5], (B, H)))
    return w, x, mask, carry


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_cudnn_layout_equals_the_scan_with_ragged_rows_and_a_carry(reverse):
    w, x, mask, carry = _setup()
    want, want_carry = lstm_scan(w, x, mask, carry, reverse=reverse)
    got, got_carry = lstm_cudnn(w, x, mask, carry, reverse=reverse, core="reference")
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)
    np.testing.assert_allclose(np.asarray(got_carry.c), np.asarray(want_carry.c), atol=1e-5)
    np.testing.assert_allclose(np.asarray(got_carry.h), np.asarray(want_carry.h), atol=1e-5)
    assert float(jnp.abs(got[1, 4:]).max()) == 0.0  # padding steps output zeros
    np.testing.assert_array_equal(np.asarray(got_carry.c[2]), np.asarray(carry.c[2]))  # an empty row keeps it


def test_cudnn_layout_gradients_equal_the_scan_gradients():
    w, x, mask, carry = _setup()

    def loss(fn, w, x):
        y, c = fn(w, x)
        return jnp.sum(y * jnp.arange(H)) + jnp.sum(c.c) + jnp.sum(c.h ** 2)

    scan = lambda w, x: lstm_scan(w, x, mask, carry, reverse=True)
    ref = lambda w, x: lstm_cudnn(w, x, mask, carry, reverse=True, core="reference")
    g_want = jax.grad(lambda w, x: loss(scan, w, x), argnums=(0, 1))(w, x)
    g_got = jax.grad(lambda w, x: loss(ref, w, x), argnums=(0, 1))(w, x)
    for a, b in zip(jax.tree.leaves(g_got), jax.tree.leaves(g_want)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def test_a_recurrent_bias_is_pytorchs_b_hh_in_the_scan_and_the_cudnn_layout():
    """``recurrent_bias`` (PyTorch's b_hh beside b_ih = ``bias``) adds to the gates as the summed bias does, in both
    implementations; the module declares it only when asked."""
    w, x, mask, carry = _setup()
    b_hh = jax.random.normal(jax.random.key(9), (4 * H,)) * 0.1
    two, one = dict(w, recurrent_bias=b_hh), dict(w, bias=w["bias"] + b_hh)
    want, want_carry = lstm_scan(one, x, mask, carry)
    for got, got_carry in (lstm_scan(two, x, mask, carry), lstm_cudnn(two, x, mask, carry, core="reference")):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)
        np.testing.assert_allclose(np.asarray(got_carry.c), np.asarray(want_carry.c), atol=1e-5)
    with_bias = LSTM(H, recurrent_bias=True).init(jax.random.key(0), x)["params"]
    assert with_bias["recurrent_bias"].unbox().shape == (4 * H,)
    assert "recurrent_bias" not in LSTM(H).init(jax.random.key(0), x)["params"]


def test_auto_runs_the_scan_on_cpu_and_cudnn_refuses_a_projection():
    w, x, mask, carry = _setup()
    auto, scan = LSTM(H, implementation="auto"), LSTM(H, implementation="scan")
    params = scan.init(jax.random.key(1), x, mask)
    got, want = auto.apply(params, x, mask)[0], scan.apply(params, x, mask)[0]
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    lstmp = LSTM(H, proj_size=3, implementation="cudnn")
    with pytest.raises(ConfigError, match="no projection or clipping"):
        lstmp.init(jax.random.key(1), x, mask)


def test_ulmfit_config_names_the_lstm_implementations():
    from ptm_jax.families.ulmfit.config import UlmfitConfig

    with pytest.raises(ConfigError, match="lstm_impl='fused' must be 'auto', 'scan' or 'cudnn'"):
        UlmfitConfig(lstm_impl="fused").validate()
