"""Hugging Face GPT-1 (OpenAIGPTLMHeadModel) interop: a random-init transformers OpenAI GPT imports with the same
logits (post-LN blocks, no final LayerNorm, tanh GELU); ptm's own post-LN GPT exports to a folder transformers loads
with no missing or unexpected tensor and the same logits, also on packed rows (segment ids and restarting positions
given to transformers as position ids and one row per document); import(export(x)) == x; what OpenAI GPT cannot
represent is refused by name."""
from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ptm_jax.config_loading import load_config  # noqa: E402
from ptm_jax.errors import CheckpointError  # noqa: E402
from ptm_jax.export import params as params_lib  # noqa: E402
from ptm_jax.families.gpt.hf import export_hf, import_hf, import_hf_to_params_dir  # noqa: E402
from ptm_jax.families.gpt.model import GPTLMHeadModel  # noqa: E402

torch.set_num_threads(1)
IDS = np.array([[5, 17, 42, 3, 99, 0, 64, 8, 8, 31, 2, 77], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]], np.int32)
TOL = 1e-5


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    torch.manual_seed(0)
    config = transformers.OpenAIGPTConfig(n_layer=2, n_embd=32, n_head=4, vocab_size=100, n_positions=64)
    model = transformers.OpenAIGPTLMHeadModel(config).eval()
    with torch.no_grad():  # every tensor non-trivial (LayerNorms, biases) so each mapping is exercised
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    d = tmp_path_factory.mktemp("hf") / "openai_gpt"
    model.save_pretrained(d)
    return d


def _hf_logits(path, ids, **kw):
    model = transformers.OpenAIGPTLMHeadModel.from_pretrained(path).eval()
    with torch.no_grad():
        return model(torch.tensor(ids, dtype=torch.long), **kw).logits.numpy()


def _our_logits(params, cfg, ids, segments=None):
    logits, _ = GPTLMHeadModel(cfg).apply({"params": params}, ids, segments)
    return np.asarray(logits)


def test_import_matches_transformers_logits(hf_dir):
    params, cfg, info = import_hf(hf_dir)
    assert (cfg.layer_norm_position, cfg.hidden_act, cfg.intermediate_size, cfg.layer_norm_eps) == (
        "post", "gelu_tanh", 128, 1e-5)
    assert info["head"] == "causal_lm" and "ln_f" not in params["gpt"]
    ref = _hf_logits(hf_dir, IDS)
    assert np.abs(_our_logits(params, cfg, IDS) - ref).max() < TOL
    assert np.abs(ref).max() > 1.0  # not vacuous


def test_ptm_gpt1_exports_to_openai_gpt_with_same_logits_and_round_trips_bitwise(tmp_path):
    """ptm's own GPT-1 init (the gpt1 preset's layer, shrunk) -> params dir -> `export_hf` -> transformers."""
    cfg = dataclasses.replace(load_config("gpt1").model, vocab_size=100, hidden_size=32, num_layers=2, num_heads=4,
                              intermediate_size=128, max_position_embeddings=64)
    params = GPTLMHeadModel(cfg).init(jax.random.key(3), jnp.asarray(IDS))["params"]
    params = jax.tree.map(np.asarray, params_lib.plain_tree(params))
    src = params_lib.save_params(tmp_path / "params", params, cfg, "causal_lm")
    report = export_hf(src, tmp_path / "hf")
    assert report.architecture == "OpenAIGPTLMHeadModel" and report.tensors == 2 + 2 * 12
    hf = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (hf["model_type"], hf["afn"], hf["n_embd"]) == ("openai-gpt", "gelu", 32)
    model, loading = transformers.OpenAIGPTLMHeadModel.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert loading["missing_keys"] == [] and loading["unexpected_keys"] == []
    assert np.abs(_our_logits(params, cfg, IDS) - _hf_logits(tmp_path / "hf", IDS)).max() < TOL
    back, cfg2, _ = import_hf(tmp_path / "hf")
    assert cfg2 == cfg
    a, b = params_lib.flatten(params), params_lib.flatten(back)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_packed_row_equals_transformers_on_each_document_with_its_positions(hf_dir):
    """A packed row (documents 1 and 2, then padding) in ptm = each document on its own row in transformers."""
    params, cfg, _ = import_hf(hf_dir)
    segments = np.array([[1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 0, 0]], np.int32)
    ours = _our_logits(params, cfg, IDS[:1], segments)
    for doc, (lo, hi) in ((1, (0, 5)), (2, (5, 10))):
        ref = _hf_logits(hf_dir, IDS[:1, lo:hi], position_ids=torch.arange(hi - lo)[None])
        assert np.abs(ours[:, lo:hi] - ref).max() < TOL, doc


def test_import_to_params_dir_and_what_openai_gpt_cannot_hold_is_refused_by_name(hf_dir, tmp_path):
    out = import_hf_to_params_dir(hf_dir, tmp_path / "params")
    _, cfg, info, _ = params_lib.load_params(out)
    assert info["head"] == "causal_lm" and cfg.layer_norm_position == "post"
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in hf_dir.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    hf = json.loads((hf_dir / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**hf, "afn": "swish"}))
    with pytest.raises(CheckpointError, match=r"config\.json: field 'afn'='swish' is not supported"):
        import_hf(bad)
    wide = dataclasses.replace(cfg, intermediate_size=100)
    params = GPTLMHeadModel(wide).init(jax.random.key(0), jnp.asarray(IDS))["params"]
    src = params_lib.save_params(tmp_path / "wide", jax.tree.map(np.asarray, params_lib.plain_tree(params)), wide,
                                 "causal_lm")
    with pytest.raises(CheckpointError, match=r"intermediate_size = 4 x hidden_size"):
        export_hf(src, tmp_path / "hf_wide")
