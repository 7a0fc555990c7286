"""BERT model: exact parameter counts, logical axis names, scan/remat equivalence, the sparse MLM head."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ptm_jax.families.bert.config import BertConfig
from ptm_jax.config_loading import load_config
from ptm_jax.families.bert.heads import BertForPreTraining
from ptm_jax.families.bert.model import BertModel

TINY = BertConfig(vocab_size=97, hidden_size=32, num_layers=3, num_heads=4, intermediate_size=64,
                   max_position_embeddings=32, hidden_dropout=0.0, attention_dropout=0.0)


def _count(cfg: BertConfig) -> int:
    ids = jnp.zeros((1, 8), jnp.int32)
    shapes = jax.eval_shape(lambda: BertModel(cfg).init(jax.random.key(0), ids, ids, ids))
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nn.meta.unbox(shapes)))


@pytest.mark.parametrize("preset,expected", [("bert_base", 109_482_240), ("bert_large", 335_141_888)])
@pytest.mark.parametrize("scan", [False, True])
def test_encoder_parameter_count_is_exact(preset, expected, scan):
    cfg = load_config(preset, [f"model.scan_layers={str(scan).lower()}"]).model
    assert _count(cfg) == expected


def test_every_parameter_has_logical_axis_names():
    ids = jnp.zeros((1, 8), jnp.int32)
    v = jax.eval_shape(lambda: BertForPreTraining(TINY).init(jax.random.key(0), ids, ids, ids, ids[:, :2]))
    leaves = jax.tree.leaves(v, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))
    assert leaves and all(isinstance(x, nn.LogicallyPartitioned) for x in leaves)
    assert all(len(x.names) == len(x.value.shape) for x in leaves)


def _batch(rng=0, b=3, s=16, p=4):
    r = np.random.default_rng(rng)
    ids = r.integers(5, TINY.vocab_size, (b, s)).astype(np.int32)
    mask = np.ones((b, s), np.int32)
    mask[0, 10:] = 0
    seg = (np.arange(s) >= 8).astype(np.int32)[None].repeat(b, 0)
    pos = np.sort(r.choice(np.arange(1, 10), (b, p)), axis=1).astype(np.int32)
    return ids, mask, seg, pos


def _stack_layers(params: dict, n: int) -> dict:
    """Loop layout (encoder/layers_i) -> scan layout (encoder/layers/layer with a leading axis)."""
    p = jax.tree.map(lambda x: x, params)
    enc = p["params"]["bert"]["encoder"]
    layers = [enc.pop(f"layers_{i}") for i in range(n)]
    enc["layers"] = {"layer": jax.tree.map(lambda *xs: jnp.stack(xs), *layers)}
    return p


def test_scan_over_layers_and_remat_compute_the_same_function():
    ids, mask, seg, pos = _batch()
    ref = BertForPreTraining(TINY)
    params = nn.meta.unbox(ref.init(jax.random.key(1), ids, mask, seg, pos))
    want = ref.apply(params, ids, mask, seg, pos)
    scanned = BertForPreTraining(TINY.__class__(**{**TINY.__dict__, "scan_layers": True}))
    got = scanned.apply(_stack_layers(params, TINY.num_layers), ids, mask, seg, pos)
    np.testing.assert_allclose(got[0], want[0], atol=1e-5)
    for policy in ("full", "save_dots"):
        remat = BertForPreTraining(TINY.__class__(**{**TINY.__dict__, "remat": policy}))
        np.testing.assert_allclose(remat.apply(params, ids, mask, seg, pos)[0], want[0], atol=1e-5)


def test_padding_does_not_change_real_token_outputs():
    ids, mask, seg, _ = _batch(b=1)
    mask[:] = 1
    mask[0, 12:] = 0
    model = BertModel(TINY)
    params = model.init(jax.random.key(2), ids, mask, seg)
    a, _ = model.apply(params, ids, mask, seg)
    ids2 = ids.copy()
    ids2[0, 12:] = 7  # change only padded tokens
    b, _ = model.apply(params, ids2, mask, seg)
    np.testing.assert_allclose(a[0, :12], b[0, :12], atol=1e-6)
    assert np.abs(np.asarray(a[0, 12:] - b[0, 12:])).max() > 1e-3


def test_mlm_head_logits_only_at_masked_positions_and_tied_to_embeddings():
    ids, mask, seg, pos = _batch()
    model = BertForPreTraining(TINY)
    params = nn.meta.unbox(model.init(jax.random.key(3), ids, mask, seg, pos))
    mlm, nsp = model.apply(params, ids, mask, seg, pos)
    assert mlm.shape == (3, 4, TINY.vocab_size) and nsp.shape == (3, 2)
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    names = ["/".join(str(getattr(k, "key", k)) for k in path) for path, _ in flat]
    assert not any("mlm" in n and "embedding" in n for n in names), "decoder must reuse the word embeddings"
    assert sum("word_embeddings" in n for n in names) == 1


def test_bfloat16_compute_keeps_float32_parameters():
    ids, mask, seg, pos = _batch()
    model = BertForPreTraining(TINY.__class__(**{**TINY.__dict__, "dtype": "bfloat16"}))
    params = nn.meta.unbox(model.init(jax.random.key(4), ids, mask, seg, pos))
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(params))
    mlm, _ = model.apply(params, ids, mask, seg, pos)
    ref, _ = BertForPreTraining(TINY).apply(params, ids, mask, seg, pos)
    assert mlm.dtype == jnp.float32
    rel = float(jnp.abs(mlm - ref).max() / jnp.abs(ref).max())
    assert 0 < rel < 0.05
