"""Hugging Face GPT-2 interop: import, export and errors, on a random-init transformers GPT2LMHeadModel."""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ptm_jax.errors import CheckpointError  # noqa: E402
from ptm_jax.export.params import load_params  # noqa: E402
from ptm_jax.families.gpt.hf import (  # noqa: E402
    export_hf,
    import_hf,
    import_hf_to_params_dir,
)
from ptm_jax.families.gpt.model import GPTLMHeadModel  # noqa: E402

torch.set_num_threads(1)
IDS = np.array([[5, 17, 42, 3, 99, 0, 64, 8, 8, 31, 2, 77], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]], np.int32)


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100, n_positions=64,
                                     initializer_range=0.2)
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # non-trivial LayerNorm and bias values so every tensor's mapping is exercised
        for name, p in model.named_parameters():
            if name.endswith("bias") or "ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
    d = tmp_path_factory.mktemp("hf") / "gpt2"
    model.save_pretrained(d)
    return d


def _hf_logits(path, ids):
    model = transformers.GPT2LMHeadModel.from_pretrained(path).eval()
    with torch.no_grad():
        return model(torch.tensor(ids, dtype=torch.long)).logits.numpy()


def _our_logits(params, cfg, ids):
    logits, _ = GPTLMHeadModel(cfg).apply({"params": params}, ids)
    return np.asarray(logits)


def test_import_matches_transformers_logits(hf_dir):
    params, cfg, info = import_hf(hf_dir)
    assert (cfg.family, cfg.layer_norm_position, cfg.hidden_act, cfg.layer_norm_eps) == ("gpt", "pre", "gelu_tanh",
                                                                                           1e-5)
    assert info["head"] == "causal_lm"
    ref = _hf_logits(hf_dir, IDS)
    ours = _our_logits(params, cfg, IDS)
    assert ours.shape == (2, 12, 100)
    assert np.abs(ours - ref).max() < 1e-5
    assert np.abs(ref).max() > 1.0  # the check is not vacuous


def test_import_reads_pytorch_bin_with_prefix_free_keys(hf_dir, tmp_path):
    """A bare GPT2Model (no 'transformer.' prefix) saved as pytorch_model.bin imports to the same tensors."""
    base = transformers.GPT2LMHeadModel.from_pretrained(hf_dir).transformer
    d = tmp_path / "bare"
    base.save_pretrained(d, safe_serialization=False)
    assert (d / "pytorch_model.bin").is_file()
    p1, _, _ = import_hf(hf_dir)
    p2, _, _ = import_hf(d)
    flat1, flat2 = dict(_flatten(p1)), dict(_flatten(p2))
    assert flat1.keys() == flat2.keys() and len(flat1) == 4 + 2 * 16
    assert all(np.array_equal(flat1[k], flat2[k]) for k in flat1)


def _flatten(tree, prefix=""):
    for k, v in tree.items():
        if isinstance(v, dict):
            yield from _flatten(v, f"{prefix}{k}/")
        else:
            yield f"{prefix}{k}", v


def test_export_loads_in_transformers_with_same_logits(hf_dir, tmp_path):
    params_dir = import_hf_to_params_dir(hf_dir, tmp_path / "params")
    assert json.loads((params_dir / "ptm.json").read_text())["head"] == "causal_lm"
    params, cfg, _, _ = load_params(params_dir)
    out = tmp_path / "exported"
    report = export_hf(params_dir, out)
    assert report.architecture == "GPT2LMHeadModel" and report.tensors == 4 + 2 * 12
    model, loading = transformers.GPT2LMHeadModel.from_pretrained(out, output_loading_info=True)
    assert loading["missing_keys"] == [] and loading["unexpected_keys"] == []
    ref = _hf_logits(out, IDS)
    assert np.abs(_our_logits(params, cfg, IDS) - ref).max() < 1e-5
    assert np.abs(ref - _hf_logits(hf_dir, IDS)).max() < 1e-5
    again, _, _ = import_hf(out)  # import(export(x)) == x bit for bit
    again, params = dict(_flatten(again)), dict(_flatten(params))
    assert again.keys() == params.keys() and all(np.array_equal(again[k], params[k]) for k in again)


def test_malformed_config_and_weights_name_file_and_key(hf_dir, tmp_path):
    import shutil

    from safetensors.numpy import load_file, save_file

    bad = tmp_path / "bad"
    shutil.copytree(hf_dir, bad)
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, "n_embd": "32"}))
    with pytest.raises(CheckpointError, match=r"config\.json.*'n_embd'"):
        import_hf(bad)
    del cfg["n_head"]
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"config\.json: lacks the GPT-2 config field 'n_head'"):
        import_hf(bad)
    shutil.copyfile(hf_dir / "config.json", bad / "config.json")
    tensors = load_file(str(bad / "model.safetensors"))
    tensors["transformer.h.1.mlp.c_fc.weight"] = tensors["transformer.h.1.mlp.c_fc.weight"][:, :100]
    del tensors["transformer.ln_f.bias"]
    save_file(tensors, str(bad / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"bad: .*missing tensors: transformer\.ln_f\.bias.*shape mismatches: "
                       r"transformer\.h\.1\.mlp\.c_fc\.weight \(checkpoint \(32, 100\), expected \(32, 128\)\)"):
        import_hf(bad)
    (bad / "model.safetensors").write_bytes(b"not safetensors at all")
    with pytest.raises(CheckpointError, match=r"model\.safetensors: not a readable safetensors file"):
        import_hf(bad)
