"""Attention paths (ptm_jax/models/attention.py, models/splash.py) against the float32 einsum reference.

Tolerances: XLA's fused attention and the reference run the same float32 products (atol 1e-5); splash runs in
Pallas' interpreter on CPU with online-softmax blocks (atol 2e-5 forward, 1e-4 on gradients). Rows of padding
queries are compared only where the mask leaves them a key (the module's contract)."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ptm_jax.errors import ConfigError
from ptm_jax.models.attention import (
    AttentionMask,
    dot_product_attention,
    implementation_for,
    padding_mask,
    segment_mask,
)
from ptm_jax.models.dropout import keep_mask, keep_probability
from ptm_jax.models.layers import dtype_of

B, T, N, H = 2, 128, 2, 16


def _qkv(seed=0, t=T, dtype=jnp.float32):
    ks = jax.random.split(jax.random.key(seed), 3)
    return tuple(jax.random.normal(k, (B, t, N, H), dtype) for k in ks)


def _masks():
    lengths = jnp.array([T, 77])
    valid = jnp.arange(T)[None] < lengths[:, None]
    seg = jnp.concatenate([jnp.ones((B, 50), jnp.int32), jnp.full((B, 60), 2, jnp.int32),
                           jnp.zeros((B, 18), jnp.int32)], axis=1)  # two documents, then padding (id 0)
    return {
        "none": AttentionMask(),
        "lengths": AttentionMask(key_valid=valid),
        "causal": AttentionMask(causal=True),
        "causal_segments": AttentionMask(causal=True, segments=(seg, seg)),
        "lengths_segments": AttentionMask(key_valid=valid, segments=(seg, seg)),
        "segments": segment_mask(seg),
    }


def _run(q, k, v, mask, impl, rate=0.0, rng=None, deterministic=True):
    return dot_product_attention(q, k, v, mask, dropout_rate=rate, deterministic=deterministic, dropout_rng=rng,
                                 implementation=impl)


@pytest.mark.parametrize("name", list(_masks()))
def test_xla_fused_attention_equals_einsum_reference(name):
    q, k, v = _qkv()
    mask = _masks()[name]
    ref = _run(q, k, v, mask, "einsum")
    out = _run(q, k, v, mask, "xla")
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=1e-5)
    assert float(jnp.abs(ref).mean()) > 0.1  # not a degenerate all-zero output


def test_mask_fields_block_exactly_the_keys_they_name():
    """Probe: v = one-hot of the key position, so the output row is the attention distribution itself."""
    t = 8
    q = jnp.zeros((1, t, 1, 8))
    k = jnp.zeros((1, t, 1, 8))
    v = jnp.eye(t)[None, :, None, :]
    seg = jnp.array([[1, 1, 1, 2, 2, 2, 0, 0]])
    valid = jnp.array([[1, 1, 1, 1, 1, 0, 0, 0]], bool)
    for mask, expect in [
        (AttentionMask(causal=True), np.tril(np.ones((t, t)))),
        (AttentionMask(key_valid=valid), np.broadcast_to(np.asarray(valid[0], float), (t, t))),
        (AttentionMask(causal=True, segments=(seg, seg)),
         np.tril(np.asarray(seg[0][:, None] == seg[0][None, :], float))),
    ]:
        for impl in ("einsum", "xla"):
            p = np.asarray(jax.jit(lambda q, k, v, m: _run(q, k, v, m, impl))(q, k, v, mask))[0, :, 0, :]
            np.testing.assert_allclose(p, expect / expect.sum(-1, keepdims=True), atol=1e-6, err_msg=impl)


@pytest.mark.parametrize("name", ["lengths", "causal_segments", "lengths_segments"])
def test_splash_attention_equals_einsum_reference_in_the_interpreter(name):
    q, k, v = _qkv(1)
    mask = _masks()[name]
    ref = _run(q, k, v, mask, "einsum")
    out = _run(q, k, v, mask, "splash")
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=2e-5)


def test_splash_attention_gradients_equal_einsum_gradients():
    q, k, v = (x[1:, :, :1] for x in _qkv(2))  # one row, one head: the interpreter runs the kernel grid in Python
    seg = _masks()["causal_segments"].segments[0][1:]
    mask = AttentionMask(causal=True, segments=(seg, seg))
    w = jax.random.normal(jax.random.key(9), q.shape)

    def loss(impl):
        return jax.grad(lambda q, k, v: jnp.sum(_run(q, k, v, mask, impl) * w), argnums=(0, 1, 2))(q, k, v)

    for got, want in zip(loss("splash"), loss("einsum")):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-4)


def test_dropout_at_rate_zero_equals_the_deterministic_path():
    q, k, v = _qkv(3)
    mask = _masks()["lengths"]
    ref = _run(q, k, v, mask, "xla")
    out = _run(q, k, v, mask, "auto", rate=0.0, rng=jax.random.key(0), deterministic=False)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=1e-5)


def test_attention_dropout_drops_probabilities_with_the_packed_threefry_mask():
    """Training path (auto under dropout = einsum): probabilities * keep / keep_probability, the mask that
    models/dropout.keep_mask draws from the layer's key, so the result is exactly reproducible from the key."""
    q, k, v = _qkv(4)
    mask = _masks()["causal"]
    rate, rng = 0.1, jax.random.key(11)
    out = _run(q, k, v, mask, "auto", rate=rate, rng=rng, deterministic=False)
    logits = jnp.einsum("btnh,bsnh->bnts", q, k) * H ** -0.5
    logits = jnp.where(jnp.tril(jnp.ones((T, T), bool)), logits, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(logits, -1)
    keep = keep_mask(rng, probs.shape, rate)
    want = jnp.einsum("bnts,bsnh->btnh", jnp.where(keep, probs / keep_probability(rate), 0.0), v)
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), atol=1e-5)
    # unbiased: over 64 keys, the mean output stays near the deterministic output
    det = _run(q, k, v, mask, "einsum")
    assert float(jnp.abs(out - det).mean()) > 1e-3  # something was dropped
    outs = jnp.stack([_run(q, k, v, mask, "einsum", rate, jax.random.key(i), False) for i in range(64)])
    assert float(jnp.abs(outs.mean(0) - det)[:, 64:].mean()) < 0.25 * float(jnp.abs(out - det)[:, 64:].mean())


def test_auto_picks_per_platform_and_dropout():
    q, k, _ = _qkv(0, t=1024, dtype=jnp.bfloat16)
    plain, causal = AttentionMask(), AttentionMask(causal=True)
    assert implementation_for("auto", q, k, plain, True, "gpu") == "einsum"
    assert implementation_for("auto", q, k, causal, False, "gpu") == "cudnn"
    assert implementation_for("auto", q.astype(jnp.float32), k, causal, False, "gpu") == "xla"  # cuDNN: bf16/fp16
    assert implementation_for("auto", q, k, causal, False, "tpu") == "splash"
    assert implementation_for("auto", q[:, :512], k[:, :512], causal, False, "tpu") == "xla"  # short: XLA
    dense = AttentionMask(dense=jnp.ones((1, 1, 1024, 1024), bool))
    assert implementation_for("auto", q, k, dense, False, "tpu") == "xla"
    assert implementation_for("auto", q, k, causal, False, "cpu") == "xla"
    assert implementation_for("xla", q, k, causal, True, "cpu") == "xla"
    with pytest.raises(ConfigError, match="attention_impl='bogus'"):
        implementation_for("bogus", q, k, causal, False, "cpu")


def test_paths_without_dropout_refuse_training_with_attention_dropout():
    q, k, v = _qkv()
    for impl in ("xla", "splash"):
        with pytest.raises(ConfigError, match="no attention-probability dropout"):
            _run(q, k, v, AttentionMask(), impl, rate=0.1, rng=jax.random.key(0), deterministic=False)


def test_splash_refuses_a_dense_mask_and_unaligned_lengths():
    q, k, v = _qkv()
    with pytest.raises(ConfigError, match="not a dense mask"):
        _run(q, k, v, AttentionMask(dense=jnp.ones((1, 1, T, T), bool)), "splash")
    q, k, v = _qkv(t=96)
    with pytest.raises(ConfigError, match="multiples of 128"):
        _run(q, k, v, AttentionMask(), "splash")


def test_auto_dtype_is_float32_on_cpu():
    assert dtype_of("auto") == jnp.float32
    assert dtype_of("bfloat16") == jnp.bfloat16


@pytest.mark.parametrize("family", ["bert", "gpt"])
def test_models_give_the_same_outputs_on_every_cpu_attention_path(family):
    """The trunk with padding (BERT) / packed documents (GPT), at attention_impl einsum, xla and splash."""
    from ptm_jax.config_loading import load_config

    cfg = load_config(f"configs/{family}_tiny.toml", [f"model.max_position_embeddings={T}"]).model
    ids = jax.random.randint(jax.random.key(0), (B, T), 5, 100)
    if family == "bert":
        from ptm_jax.families.bert.model import BertModel

        mask = (jnp.arange(T)[None] < jnp.array([[T], [70]])).astype(jnp.int32)

        def apply(c):
            m = BertModel(c)
            params = m.init(jax.random.key(1), ids, mask, jnp.zeros_like(ids))
            return m.apply(params, ids, mask, jnp.zeros_like(ids))[0]
    else:
        from ptm_jax.families.gpt.model import GPTModel

        seg = jnp.concatenate([jnp.ones((B, 40), jnp.int32), jnp.full((B, 88), 2, jnp.int32)], axis=1)

        def apply(c):
            m = GPTModel(c)
            params = m.init(jax.random.key(1), ids, seg)
            return m.apply(params, ids, seg)

    outs = {impl: np.asarray(apply(dataclasses.replace(cfg, attention_impl=impl)))
            for impl in ("einsum", "xla", "splash")}
    for impl in ("xla", "splash"):
        np.testing.assert_allclose(outs[impl], outs["einsum"], atol=1e-4, err_msg=impl)


def test_padding_mask_is_key_lengths_of_the_input_mask():
    m = padding_mask(jnp.array([[1, 1, 1, 0], [1, 0, 0, 0]]))
    assert m.kv_lengths().tolist() == [3, 1]


def test_splash_in_a_scanned_layer_stack_gives_the_einsum_gradients():
    """nn.scan traces the layer more than once (forward, then its linearisation): the cached splash kernel must
    not carry one trace's arrays into the next (it raised UnexpectedTracerError)."""
    from ptm_jax.config_loading import load_config
    from ptm_jax.families.bert.model import BertModel

    cfg = load_config("configs/bert_tiny.toml", [f"model.max_position_embeddings={T}", "model.scan_layers=true"]).model
    ids = jax.random.randint(jax.random.key(0), (B, T), 5, 100)
    mask = (jnp.arange(T)[None] < jnp.array([[T], [70]])).astype(jnp.int32)
    params = BertModel(cfg).init(jax.random.key(1), ids, mask, jnp.zeros_like(ids))

    def grads(impl):
        m = BertModel(dataclasses.replace(cfg, attention_impl=impl))
        return jax.jit(jax.grad(lambda p: jnp.sum(m.apply(p, ids, mask, jnp.zeros_like(ids))[0] ** 2)))(params)

    for got, want in zip(jax.tree.leaves(grads("splash")), jax.tree.leaves(grads("einsum"))):
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
