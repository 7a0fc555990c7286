"""GPT model: exact GPT-2 parameter counts, packed-row isolation, post-/pre-LN structure, KV-cache decoding."""
from __future__ import annotations

import dataclasses
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ptm_jax.families.gpt.config import GptConfig
from ptm_jax.config_loading import load_config
from ptm_jax.export.params import to_layout as gpt_to_layout
from ptm_jax.families.gpt.model import GPTLMHeadModel, GPTModel

TINY = GptConfig(family="gpt", vocab_size=1000, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                   max_position_embeddings=64, hidden_act="gelu_tanh", layer_norm_eps=1e-5,
                   layer_norm_position="pre", hidden_dropout=0.0, attention_dropout=0.0)


def _init(cfg: GptConfig, module=GPTLMHeadModel, seed: int = 0):
    return nn.meta.unbox(jax.jit(module(cfg).init)(jax.random.PRNGKey(seed), jnp.zeros((1, 8), jnp.int32))["params"])


@pytest.mark.parametrize("preset,count", [("gpt2_124m", 124_439_808), ("gpt2_355m", 354_823_168),
                                          ("gpt2_774m", 774_030_080), ("gpt2_1558m", 1_557_611_200)])
def test_gpt2_presets_have_the_published_parameter_counts(preset, count):
    cfg = dataclasses.replace(load_config(preset).model, scan_layers=True)  # scan: one layer traced
    shapes = jax.eval_shape(lambda: GPTLMHeadModel(cfg).init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32)))
    leaves = jax.tree.leaves(nn.meta.unbox(shapes["params"]))
    assert sum(int(np.prod(x.shape)) for x in leaves) == count
    assert all(x.dtype == jnp.float32 for x in leaves)


def test_packed_documents_do_not_see_each_other_and_attention_is_causal():
    params = _init(TINY, GPTModel)
    model = GPTModel(TINY)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 1000, (1, 24)).astype(np.int32)
    seg = np.array([[1] * 10 + [2] * 12 + [0] * 2], np.int32)
    apply = jax.jit(lambda x, s: model.apply({"params": params}, x, s))
    run = lambda x: np.asarray(apply(x, seg))  # noqa: E731
    base = run(ids)
    doc1_changed = ids.copy()
    doc1_changed[0, :10] = rng.integers(0, 1000, 10)
    h = run(doc1_changed)
    assert np.array_equal(h[0, 10:22], base[0, 10:22])  # document 2 bit-identical
    assert np.abs(h[0, :10] - base[0, :10]).min(axis=-1).max() > 0
    doc2_changed = ids.copy()
    doc2_changed[0, 15] = (ids[0, 15] + 1) % 1000
    h = run(doc2_changed)
    assert np.array_equal(h[0, :15], base[0, :15])  # document 1 and the earlier tokens of document 2
    assert (np.abs(h[0, 15:22] - base[0, 15:22]).max(axis=-1) > 1e-4).all()  # every later token of doc 2
    # positions restart per document: document 2 packed == document 2 alone
    alone = np.asarray(apply(ids[:, 10:22], None))
    assert np.abs(alone[0] - base[0, 10:22]).max() < 1e-5


def _ln(x, p, eps=1e-5):
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * p["norm"]["scale"] + p["norm"]["bias"]


def _block(x, p, pre: bool):
    """A numpy reference block: causal multi-head attention + tanh-GELU MLP, post- or pre-LN."""
    def attn(h):
        q, k, v = (np.einsum("th,hnd->tnd", h, p["attn"][n]["kernel"]) + p["attn"][n]["bias"]
                   for n in ("query", "key", "value"))
        s = np.einsum("tnd,snd->nts", q, k) / math.sqrt(q.shape[-1])
        s = np.where(np.tril(np.ones(s.shape[1:], bool)), s, -np.inf)
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        return np.einsum("nts,snd,ndh->th", a, v, p["attn"]["output"]["kernel"]) + p["attn"]["output"]["bias"]

    def mlp(h):
        u = h @ p["mlp"]["fc"]["kernel"] + p["mlp"]["fc"]["bias"]
        u = 0.5 * u * (1 + np.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3)))
        return u @ p["mlp"]["proj"]["kernel"] + p["mlp"]["proj"]["bias"]

    if pre:
        x = x + attn(_ln(x, p["ln_1"]))
        return x + mlp(_ln(x, p["ln_2"]))
    x = _ln(x + attn(x), p["ln_1"])
    return _ln(x + mlp(x), p["ln_2"])


@pytest.mark.parametrize("position", ["post", "pre"])
def test_post_ln_gpt1_and_pre_ln_gpt2_blocks_match_a_numpy_reference(position):
    cfg = dataclasses.replace(TINY, layer_norm_position=position)
    params = jax.tree.map(np.asarray, _init(cfg))
    rng = np.random.default_rng(1)  # non-trivial norms so a misplaced LayerNorm shows
    params = jax.tree.map(lambda x: x + 0.3 * rng.standard_normal(x.shape).astype(np.float32), params)
    g = params["gpt"]
    assert ("ln_f" in g) == (position == "pre")
    ids = rng.integers(0, 1000, (1, 12)).astype(np.int32)
    x = g["wte"]["embedding"][ids[0]] + g["wpe"]["embedding"][:12]
    for i in range(cfg.num_layers):
        x = _block(x.astype(np.float64), g["decoder"][f"layers_{i}"], position == "pre")
    if position == "pre":
        x = _ln(x, g["ln_f"])
    logits, hidden = jax.jit(GPTLMHeadModel(cfg).apply)({"params": params}, ids)
    assert np.abs(np.asarray(hidden)[0] - x).max() < 1e-4
    assert np.abs(np.asarray(logits)[0] - x @ g["wte"]["embedding"].T).max() < 1e-3


def test_init_scales_follow_gpt1_and_gpt2():
    big = dataclasses.replace(TINY, hidden_size=256, num_layers=8, num_heads=4, intermediate_size=1024,
                              max_position_embeddings=256)
    for position, resid, wpe in (("pre", 0.02 / math.sqrt(16), 0.01), ("post", 0.02, 0.02)):
        g = _init(dataclasses.replace(big, layer_norm_position=position))["gpt"]
        layer = g["decoder"]["layers_3"]
        assert np.std(layer["attn"]["output"]["kernel"]) == pytest.approx(resid, rel=0.03)
        assert np.std(layer["mlp"]["proj"]["kernel"]) == pytest.approx(resid, rel=0.03)
        assert np.std(layer["attn"]["query"]["kernel"]) == pytest.approx(0.02, rel=0.03)
        assert np.std(g["wte"]["embedding"]) == pytest.approx(0.02, rel=0.03)
        assert np.std(g["wpe"]["embedding"]) == pytest.approx(wpe, rel=0.03)


@pytest.mark.parametrize("scan", [False, True])
def test_decode_with_kv_cache_equals_the_full_forward(scan):
    cfg = dataclasses.replace(TINY, scan_layers=scan)
    params = _init(TINY, seed=3)  # loop layout; the scan model gets the same weights stacked
    params = gpt_to_layout(jax.tree.map(np.asarray, params), scan)
    model = GPTLMHeadModel(cfg, cache_length=32)
    ids = np.random.default_rng(2).integers(0, 1000, (2, 20)).astype(np.int32)
    full, _ = jax.jit(model.apply)({"params": params}, ids)
    step = jax.jit(lambda v, x: model.apply(v, x, decode=True, mutable=["cache"]))
    (logits, _), state = step({"params": params}, ids[:, :7])
    steps = [logits]
    for t in range(7, 20):
        (logits, _), state = step({"params": params, **state}, ids[:, t:t + 1])
        steps.append(logits)
    decoded = np.concatenate([np.asarray(s) for s in steps], axis=1)
    assert decoded.shape == (2, 20, 1000)
    assert np.abs(decoded - np.asarray(full)).max() < 1e-5
    cache = jax.tree.leaves(state["cache"]["gpt"]["decoder"])
    assert max(x.shape[-3] if x.ndim >= 3 else 0 for x in cache) == 32  # a fixed-size cache
