"""Transformer-XL (ptm_jax/families/transfo_xl): forward parity with transformers' TransfoXLLMHeadModel with the
memory carried over several segments, Hugging Face folders in and out, segment recurrence against one long causal
pass, the contiguous training stream, the memory carried by the train step, perplexity with a longer memory,
sampling with the memory as the cache, and the one-line refusals of bad input.

transformers 4.57's deprecated ``TransfoXLModel.forward`` calls ``Tensor.type_as(dtype=...)``, which torch 2.13
rejects; the ``transformers_txl`` fixture patches ``type_as`` to accept ``dtype=`` (the call's evident intent: the
relative positions in the embeddings' dtype) for the test's duration. The rest of the reference runs as released.
"""
from __future__ import annotations

import dataclasses
import subprocess
import sys
import warnings
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from corpus_util import word_source

from ptm_jax.config import MeshConfig
from ptm_jax.config_loading import load_config
from ptm_jax.errors import CheckpointError, ConfigError
from ptm_jax.families.transfo_xl import hf as txl_hf
from ptm_jax.families.transfo_xl.config import TransfoXlConfig
from ptm_jax.families.transfo_xl.decode import generate
from ptm_jax.families.transfo_xl.model import TransfoXLLMHeadModel
from ptm_jax.families.transfo_xl.objective import SegmentLmObjective
from ptm_jax.families.transfo_xl.perplexity import perplexity
from ptm_jax.parallel.feed import to_global
from ptm_jax.parallel.mesh import make_mesh
from ptm_jax.train.loop import compile_objective

BASE = dict(vocab_size=100, cutoffs=[20, 40, 80], d_model=32, d_embed=32, n_head=4, d_head=8, d_inner=64, div_val=2,
            n_layer=2, mem_len=6, clamp_len=-1, same_length=False, dropout=0.0)


@pytest.fixture
def transformers_txl(monkeypatch):
    torch = pytest.importorskip("torch")
    original = torch.Tensor.type_as

    def type_as(self, other=None, dtype=None):
        return self.to(dtype) if other is None else original(self, other)

    monkeypatch.setattr(torch.Tensor, "type_as", type_as)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    from transformers.models.deprecated.transfo_xl import TransfoXLConfig, TransfoXLLMHeadModel as HfModel

    def build(**kw):
        torch.manual_seed(0)
        model = HfModel(TransfoXLConfig(**{**BASE, **kw})).eval()
        with torch.no_grad():  # move biases and LayerNorms off their init so that every tensor matters
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        return model

    return torch, build


def _ours(model) -> tuple[dict, TransfoXlConfig]:
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    cfg = txl_hf.model_config_from_hf(model.config.to_dict(), Path("config.json"))
    return txl_hf.hf_to_params(state, cfg, Path("hf")), cfg


VARIANTS = {
    "adaptive_div_val_2": {},
    "adaptive_div_val_1_projected": dict(div_val=1, d_embed=16),
    "full_softmax": dict(cutoffs=[], div_val=1),
    "same_length_clamped": dict(same_length=True, clamp_len=3),
    "shared_biases_pre_ln_unshared_projections": dict(untie_r=False, pre_lnorm=True, proj_share_all_but_first=False),
    "memory_longer_than_segment": dict(mem_len=12),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_log_probs_and_memory_match_transformers_over_four_segments(transformers_txl, variant):
    torch, build = transformers_txl
    hf_model = build(**VARIANTS[variant])
    params, cfg = _ours(hf_model)
    model = TransfoXLLMHeadModel(cfg)
    rng = np.random.default_rng(0)
    b, length = 3, 5
    hf_mems, mems, worst = None, jnp.zeros((cfg.num_layers, b, cfg.mem_len, cfg.hidden_size)), 0.0
    for _ in range(4):  # transformers starts from mem_len zero states: ours with zeros, every position valid
        ids = rng.integers(0, cfg.vocab_size, (b, length))
        with torch.no_grad():
            out = hf_model(torch.tensor(ids), mems=hf_mems)
        hf_mems = out.mems
        logp, mems, _ = model.apply({"params": params}, jnp.asarray(ids), mems)
        worst = max(worst, float(np.abs(np.asarray(logp) - out.prediction_scores.numpy()).max()))
        for layer in range(cfg.num_layers):
            np.testing.assert_allclose(np.asarray(mems[layer]), hf_mems[layer].numpy().transpose(1, 0, 2), atol=1e-5)
    assert worst < 1e-5, worst
    assert np.allclose(np.exp(np.asarray(logp)).sum(-1), 1.0, atol=1e-5)  # a distribution over the whole vocab


def test_hugging_face_folder_round_trip_is_bit_equal_and_transformers_loads_the_export(transformers_txl, tmp_path):
    torch, build = transformers_txl
    hf_model = build(mem_len=4)
    hf_model.save_pretrained(tmp_path / "hf")
    params, cfg, info, _ = txl_hf.import_hf(tmp_path / "hf")
    assert info["head"] == "language_model" and cfg.cutoffs == [20, 40, 80] and cfg.div_val == 2
    out = txl_hf.import_hf_to_params_dir(tmp_path / "hf", tmp_path / "params")
    report = txl_hf.export_hf(out, tmp_path / "back")
    assert report.architecture == "TransfoXLLMHeadModel"
    from safetensors.numpy import load_file

    a, b = load_file(tmp_path / "hf" / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert sorted(set(a) - {"transformer.pos_emb.inv_freq"}) == sorted(b)
    for k in b:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    from transformers.models.deprecated.transfo_xl import TransfoXLLMHeadModel as HfModel

    again = HfModel.from_pretrained(tmp_path / "back").eval()
    ids = torch.tensor(np.random.default_rng(1).integers(0, 100, (2, 7)))
    with torch.no_grad():
        np.testing.assert_array_equal(again(ids).prediction_scores.numpy(), hf_model(ids).prediction_scores.numpy())


def _tiny(**kw) -> TransfoXlConfig:
    base = dict(vocab_size=64, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32, cutoffs=[16, 32],
                div_val=2, mem_len=0, hidden_dropout=0.0, initializer_range=0.3)
    return TransfoXlConfig(**{**base, **kw})


def test_segments_with_an_unbounded_memory_equal_one_causal_pass_and_masked_memory_equals_none():
    cfg = _tiny(mem_len=64)
    model = TransfoXLLMHeadModel(cfg)
    apply = jax.jit(model.apply)
    ids = jnp.asarray(np.random.default_rng(0).integers(0, 64, (2, 24)))
    params = jax.jit(model.init)(jax.random.key(0), ids[:, :4])
    whole, _, _ = jax.jit(TransfoXLLMHeadModel(dataclasses.replace(cfg, mem_len=0)).apply)(params, ids)
    mems, valid, parts = jnp.zeros((2, 2, 64, 16)), jnp.zeros((2,), jnp.int32), []
    for s in range(0, 24, 6):
        logp, mems, valid = apply(params, ids[:, s:s + 6], mems, valid)
        parts.append(logp)
    np.testing.assert_allclose(np.concatenate(parts, axis=1), np.asarray(whole), atol=2e-5)
    assert np.asarray(valid).tolist() == [24, 24]
    # a masked memory of garbage is no memory; an unmasked one changes the output
    junk = jax.random.normal(jax.random.key(1), (2, 2, 64, 16))
    masked, _, _ = apply(params, ids[:, :6], junk, jnp.zeros((2,), jnp.int32))
    np.testing.assert_allclose(np.asarray(masked), np.asarray(whole[:, :6]), atol=2e-5)
    seen, _, _ = jax.jit(model.apply)(params, ids[:, :6], junk)
    assert np.abs(np.asarray(seen) - np.asarray(whole[:, :6])).max() > 1e-2


def _objective(shared_data, *overrides, vocab=256):
    source, special = word_source(shared_data / "corpus/tinyshakespeare/input.txt", vocab)
    cfg = load_config("transfo_xl_tiny", [f"model.vocab_size={vocab}", "model.hidden_dropout=0.0",
                                          "model.initializer_range=0.3", *overrides])
    return cfg, SegmentLmObjective(cfg, source, None, eos_id=special.sep, pad_id=special.pad)


def test_each_row_is_a_contiguous_stream_and_the_stream_resumes_and_splits_over_processes(shared_data):
    cfg, obj = _objective(shared_data)
    b, n = 8, cfg.data.max_seq_length
    it = obj.train_batches(0, b, 0, 1)
    batches = [next(it) for _ in range(6)]
    for prev, nxt in zip(batches, batches[1:]):
        np.testing.assert_array_equal(prev["target_ids"][:, -1], nxt["input_ids"][:, 0])  # row r continues row r
        np.testing.assert_array_equal(prev["target_ids"][:, :-1], prev["input_ids"][:, 1:])
        assert not nxt["reset"].any()
    assert batches[0]["reset"].all() and batches[0]["input_ids"].shape == (b, n)
    resumed = next(obj.train_batches(4 * b, b, 0, 1))
    shares = [next(obj.train_batches(4 * b, b, p, 2)) for p in range(2)]
    for k in resumed:
        np.testing.assert_array_equal(resumed[k], batches[4][k])
        np.testing.assert_array_equal(np.concatenate([s[k] for s in shares]), batches[4][k])


def test_the_train_step_carries_each_layers_memory_and_the_next_loss_reads_it(shared_data):
    cfg, obj = _objective(shared_data)
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    compiled = compile_objective(obj, cfg.train, mesh)
    state0 = compiled.init_fn(jax.random.key(3))
    it = obj.train_batches(0, 8, 0, 1)
    b0, b1 = next(it), next(it)
    params0 = jax.device_get(state0.params)
    assert not np.asarray(state0.carry["valid"]).any()
    state1, _ = compiled.train_step(state0, to_global(b0, mesh, compiled.batch_keys), jax.random.key(0))
    carry1 = jax.device_get(state1.carry)
    _, mems, valid = jax.jit(obj.model.apply)(params0, jnp.asarray(b0["input_ids"]), jnp.zeros_like(carry1["mems"]),
                                              jnp.zeros((8,), jnp.int32))
    np.testing.assert_allclose(carry1["mems"], np.asarray(mems), atol=1e-5)
    assert np.asarray(carry1["valid"]).tolist() == [cfg.data.max_seq_length] * 8
    params1 = jax.device_get(state1.params)
    norm = {"lm": jnp.float32(b1["target_weights"].sum())}
    # jitted, as the train step runs them (eagerly each of their ~150 operations compiles a program of its own)
    loss_carrying = jax.jit(obj.loss_carrying, static_argnums=5)
    with_mem, _, _ = loss_carrying(params1, b1, carry1, None, norm, False)
    without, _ = jax.jit(obj.loss, static_argnums=4)(params1, b1, None, norm, False)
    assert abs(float(with_mem) - float(without)) > 1e-3
    reset = dict(b1, reset=np.ones(8, np.int32))  # a pass start forgets the memory
    np.testing.assert_allclose(float(loss_carrying(params1, reset, carry1, None, norm, False)[0]),
                               float(without), rtol=1e-6)


class _Words:
    """A word tokenizer over '<pad> <unk> <eos> w3 .. w63' for the perplexity hook."""

    pad_id, eos_id, sep_id = 0, 2, 2

    def encode_batch(self, lines):
        return [[int(w[1:]) if w.startswith("w") else 1 for w in line.split()] for line in lines]


def test_perplexity_with_an_unbounded_memory_equals_one_pass_and_scores_every_token_once(tmp_path):
    cfg = _tiny(mem_len=8)
    model = TransfoXLLMHeadModel(cfg)
    rng = np.random.default_rng(2)
    lines = [" ".join(f"w{i}" for i in rng.integers(3, 64, 9)) for _ in range(6)]
    (tmp_path / "t.txt").write_text("\n".join(lines) + "\n")
    ids = np.concatenate([np.r_[[int(w[1:]) for w in ln.split()], 2] for ln in lines])  # 60 ids
    params = jax.jit(model.init)(jax.random.key(0), jnp.asarray(ids[None, :4]))["params"]
    full, _, _ = jax.jit(TransfoXLLMHeadModel(dataclasses.replace(cfg, mem_len=0)).apply)({"params": params},
                                                                                        jnp.asarray(ids[None, :-1]))
    want = -np.take_along_axis(np.asarray(full)[0], ids[1:, None], axis=-1).mean()
    got = perplexity(params, cfg, _Words(), tmp_path / "t.txt", seq_len=70, stride=10, batch_size=1)
    assert got["tokens"] == 59 and got["memory"] == 60 and got["segment"] == 10
    np.testing.assert_allclose(got["nll_per_token"], want, rtol=1e-5)
    alone = perplexity(params, cfg, _Words(), tmp_path / "t.txt", seq_len=10, batch_size=1)
    assert alone["memory"] == 0 and alone["tokens"] == 59 and abs(alone["nll_per_token"] - want) > 1e-3
    assert perplexity(params, cfg, _Words(), tmp_path / "t.txt", batch_size=1)["memory"] == cfg.mem_len
    with pytest.raises(ConfigError, match="--seq-len must be >= --stride"):
        perplexity(params, cfg, _Words(), tmp_path / "t.txt", seq_len=4, stride=8)


def test_greedy_decoding_with_the_memory_equals_argmax_of_the_full_causal_pass_and_padding_is_invisible():
    cfg = _tiny(mem_len=4)
    model = TransfoXLLMHeadModel(dataclasses.replace(cfg, mem_len=0))
    prompt = [5, 9, 17, 33, 40]
    params = jax.jit(model.init)(jax.random.key(0), jnp.asarray([prompt]))["params"]
    got = generate(params, cfg, [prompt, [7, 8]], 6, greedy=True, max_length=32)
    logp, _, _ = jax.jit(model.apply)({"params": params}, jnp.asarray([prompt + got[0]]))
    # every new token is the argmax after the prompt and the tokens before it (one pass, no memory)
    assert got[0] == np.argmax(np.asarray(logp)[0, len(prompt) - 1:-1], axis=-1).tolist()
    assert got[1] == generate(params, cfg, [[7, 8]], 6, greedy=True, max_length=32)[0]
    short = generate(params, cfg, [prompt], 6, greedy=True, max_length=2)  # the memory keeps the last 2 states
    assert len(short[0]) == 6
    assert generate(params, cfg, [prompt], 6, greedy=True, max_length=32, eos_id=got[0][2])[0] == got[0][:3]


@pytest.mark.parametrize("override, message", [
    ("model.cutoffs=[500,100]", "model.cutoffs=[500, 100] must be integers ascending strictly inside"),
    ("model.vocab_size=100", "model.cutoffs=[64, 128] must be integers ascending strictly inside (0, "
                             "model.vocab_size=100)"),
    ("model.scan_layers=true", "model.scan_layers=true: the Transformer-XL family runs its layers in a Python loop"),
    ("model.div_val=8", "leaves the last of 3 clusters no embedding dimension"),
    ("model.attention_impl=splash", "relative attention has one path"),
])
def test_bad_config_is_refused_with_one_line(tmp_path, override, message):
    proc = subprocess.run([sys.executable, "-m", "ptm_jax.cli", "pretrain", "-c", "transfo_xl_tiny",
                           f"output_dir={tmp_path}", override], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if "error" in ln]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in proc.stderr, proc.stderr[-2000:]


def test_malformed_hugging_face_folders_are_checkpoint_errors_naming_the_field_or_tensor(tmp_path):
    good = txl_hf.hf_config(_tiny(), {})
    for change, message in ((dict(model_type="gpt2"), "only 'transfo-xl' imports"),
                            (dict(tie_projs=[True, False, True]), "field 'tie_projs'"),
                            (dict(n_layer="two"), "field 'n_layer' must be an integer"),
                            (dict(attn_type=2), "field 'attn_type'=2 is not supported"),
                            (dict(cutoffs=[40, 16]), "cutoffs")):
        with pytest.raises(CheckpointError, match=message):
            txl_hf.model_config_from_hf({**good, **change}, Path("config.json"))
    cfg = txl_hf.model_config_from_hf(good, Path("config.json"))
    params = jax.jit(TransfoXLLMHeadModel(cfg).init)(jax.random.key(0), jnp.zeros((1, 3), jnp.int32))["params"]
    tensors = txl_hf.params_to_hf(jax.device_get(nn.meta.unbox(params)), cfg)
    r_net = tensors.pop("transformer.layers.1.dec_attn.r_net.weight")
    with pytest.raises(CheckpointError, match="missing tensors: transformer.layers.1.dec_attn.r_net.weight"):
        txl_hf.hf_to_params(tensors, cfg, Path("hf"))
    tensors["transformer.layers.1.dec_attn.r_net.weight"] = r_net
    tensors["crit.out_layers.0.weight"] = np.zeros((16, 16), np.float32)  # a tied copy that differs
    with pytest.raises(CheckpointError, match="crit.out_layers.0.weight differs from "
                                              "transformer.word_emb.emb_layers.0.weight"):
        txl_hf.hf_to_params(tensors, cfg, Path("hf"))


def test_training_steps_match_transformers_from_the_same_init_on_the_same_batches(transformers_txl, shared_data):
    """Training like the reference: transformers' model and ours from the same (imported) parameters, the same 24
    batches of the contiguous stream with the memory carried on both sides (and emptied at a pass start), dropout
    off, Adam at a constant rate with gradient clipping: the per-step losses agree within 2e-5 (relative), and after
    the last step 99% of the parameters within 2e-5 (half within 1e-6) and all within a third of one Adam step.
    transformers' first segment gets a zero-length memory, which is our empty (masked) one."""
    torch, _ = transformers_txl
    from transformers.models.deprecated.transfo_xl import TransfoXLConfig, TransfoXLLMHeadModel as HfModel

    cfg, obj = _objective(shared_data, "model.mem_len=16", "train.learning_rate=3e-3", "train.lr_decay=constant",
                          "train.adam_eps=1e-8", "train.clip_norm=0.25", "train.steps=24")
    torch.manual_seed(0)
    hf_model = HfModel(TransfoXLConfig(**{k: v for k, v in txl_hf.hf_config(cfg.model, {}).items()
                                          if k not in ("architectures", "model_type")}))
    state = {k: v.detach().numpy() for k, v in hf_model.state_dict().items()}
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    compiled = compile_objective(obj, cfg.train, mesh)
    ours = compiled.init_fn(jax.random.key(0))
    params = {"params": txl_hf.hf_to_params(state, cfg.model, Path("hf"))}
    ours = ours.replace(params=jax.device_put(params, jax.tree.map(lambda x: x.sharding, ours.params)))
    opt = torch.optim.Adam(hf_model.parameters(), lr=3e-3, eps=1e-8)
    ours_losses, hf_losses, passes = [], [], 0
    batches = obj.train_batches(0, 8, 0, 1)
    for _ in range(24):
        b = next(batches)
        if b["reset"].all():  # a pass starts (the corpus is short: 24 steps cross a pass end)
            hf_mems = [torch.zeros(0, 8, cfg.model.hidden_size) for _ in range(cfg.model.num_layers)]
            passes += 1
        ours, metrics = compiled.train_step(ours, to_global(b, mesh, compiled.batch_keys), jax.random.key(0))
        ours_losses.append(float(metrics["loss"]))
        out = hf_model(torch.tensor(b["input_ids"]), mems=hf_mems)
        hf_mems = out.mems
        w = torch.tensor(b["target_weights"])
        picked = out.prediction_scores.gather(-1, torch.tensor(b["target_ids"]).long()[..., None])[..., 0]
        loss = -(picked * w).sum() / w.sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(hf_model.parameters(), 0.25)
        opt.step()
        hf_losses.append(float(loss))
    np.testing.assert_allclose(ours_losses, hf_losses, rtol=2e-5)
    assert passes >= 2 and hf_losses[-1] < hf_losses[0] - 0.5  # it trained, across a pass end
    after = txl_hf.hf_to_params({k: v.detach().numpy() for k, v in hf_model.state_dict().items()}, cfg.model,
                                Path("hf"))
    mine = jax.device_get(ours.params)["params"]
    diffs = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(after)[0]:
        got = mine
        for k in path:
            got = got[k.key]
        diffs.append(np.abs(np.asarray(got) - leaf).ravel())
    diffs = np.concatenate(diffs)
    # Adam moves a parameter by about lr per step whatever its gradient's size, so an element whose gradient is
    # near zero may take a step of the other sign on one side: bounded by a fraction of one step, and rare
    q = np.quantile(diffs, [0.5, 0.99, 1.0])
    assert q[0] < 1e-6 and q[1] < 2e-5 and q[2] < 1e-3, q
