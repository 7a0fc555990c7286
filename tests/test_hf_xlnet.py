"""Hugging Face XLNet <-> ptm_jax: random-init transformers XLNet models (every tensor perturbed, untie_r on
and off) give the same content stream, query stream, LM logits and memories as our model (torch fp32 eval vs
JAX fp32, max-abs <= 1e-5) on a permutation-LM batch and on a second segment fed the first one's memories;
export -> transformers reload gives the same logits; malformed checkpoints raise CheckpointError naming the
file and key; the presets have XLNet's exact parameter counts."""
from __future__ import annotations

import dataclasses
import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ptm_jax.config_loading import load_config  # noqa: E402
from ptm_jax.errors import CheckpointError  # noqa: E402
from ptm_jax.export import params as params_lib  # noqa: E402
from ptm_jax.families.xlnet import hf as hf_xlnet  # noqa: E402
from ptm_jax.families.xlnet.model import (  # noqa: E402
    XLNetForQuestionAnswering,
    XLNetForSequenceClassification,
    XLNetLMHeadModel,
    XLNetModel,
)

torch.set_num_threads(1)
TOL = 1e-5
TINY = dict(vocab_size=99, d_model=32, n_layer=2, n_head=4, d_inner=64, mem_len=8, dropout=0.1)
B, L, P = 2, 10, 3


def make_hf(cls_name: str, seed: int = 0, **overrides):
    """A random transformers XLNet whose every tensor is non-trivial (LayerNorms, biases, lm bias too)."""
    torch.manual_seed(seed)
    cfg = transformers.XLNetConfig(**{**TINY, **overrides})
    model = getattr(transformers, cls_name)(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
        if not cfg.untie_r:  # transformers keeps per-layer biases; a tied model has them equal
            first = model.transformer.layer[0].rel_attn
            for layer in model.transformer.layer[1:]:
                for name in hf_xlnet.BIASES:
                    getattr(layer.rel_attn, name).copy_(getattr(first, name))
    return model


def plm_batch(rng: np.random.Generator, vocab: int = 99):
    """Ids, segments (0 / 1 / 2 for <cls>), left padding in row 1, and a permutation-LM mask: P targets in a
    random factorization order; target i cannot see target j with rank_j >= rank_i, non-targets see no
    target; target_mapping one-hot at the targets."""
    ids = rng.integers(0, vocab, (B, L))
    seg = np.zeros((B, L), np.int64)
    seg[:, 5:] = 1
    seg[:, -1] = 2
    pad = np.zeros((B, L), np.float32)
    pad[1, :2] = 1.0
    perm = np.zeros((B, L, L), np.float32)
    tm = np.zeros((B, P, L), np.float32)
    for b in range(B):
        targets = rng.choice(np.arange(2, L - 1), P, replace=False)
        rank = np.full(L, -1)
        rank[targets] = rng.permutation(P)
        perm[b] = (rank[None, :] >= 0) & (rank[:, None] <= rank[None, :])
        tm[b, np.arange(P), targets] = 1.0
    return ids, seg, pad, perm, tm


def run_hf(model, batch, mems=None):
    ids, seg, pad, perm, tm = (torch.tensor(x) for x in batch)
    with torch.no_grad():
        return model(ids, token_type_ids=seg, input_mask=pad, perm_mask=perm, target_mapping=tm, mems=mems,
                     use_mems=True, output_hidden_states=True)


def max_abs(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


@pytest.fixture(scope="module", params=[True, False], ids=["untied", "tied"])
def lm(request, tmp_path_factory):
    """(transformers model, our params, config, info); the tied model also clamps distances at 5."""
    model = make_hf("XLNetLMHeadModel", untie_r=request.param, clamp_len=-1 if request.param else 5)
    d = tmp_path_factory.mktemp("xlnet_lm")
    model.save_pretrained(d)
    params, cfg, info, _ = hf_xlnet.import_hf_xlnet(d)
    return model, params, cfg, info


def test_plm_streams_logits_and_mems_match_transformers_over_two_segments(lm):
    model, params, cfg, info = lm
    assert info["head"] == "plm" and cfg.family == "xlnet" and cfg.untie_r == model.config.untie_r
    assert cfg.clamp_len == model.config.clamp_len and cfg.mem_len == 8
    assert ("r_w_bias" in params["xlnet"]) == (not cfg.untie_r)
    rng = np.random.default_rng(0)
    hf_mems, mems = None, None
    for segment in range(2):
        batch = plm_batch(rng)
        out = run_hf(model, batch, hf_mems)
        args = [jnp.asarray(x) for x in batch]
        (logits, new_mems), state = XLNetLMHeadModel(cfg).apply(
            {"params": params}, *args, mems, mutable=["intermediates"],
            capture_intermediates=lambda module, method: isinstance(module, XLNetModel))
        h, g, _ = state["intermediates"]["xlnet"]["__call__"][0]  # the trunk's (content, query, mems)
        assert logits.shape == (B, P, 99) and h.shape == (B, L, 32) and g.shape == (B, P, 32)
        assert max_abs(h, out.hidden_states[-2]) <= TOL, segment  # content stream
        assert max_abs(g, out.hidden_states[-1]) <= TOL, segment  # query stream
        assert max_abs(logits, out.logits) <= TOL, segment
        assert len(new_mems) == 2 and new_mems[0].shape == (B, 8, 32)
        for ours, theirs in zip(new_mems, out.mems):  # transformers keeps memories [M, B, H]
            assert max_abs(ours, theirs.numpy().transpose(1, 0, 2)) <= TOL
        hf_mems, mems = out.mems, new_mems


def test_export_reloads_in_transformers_with_same_logits_and_round_trips_bitwise(lm, tmp_path):
    model, params, cfg, info = lm
    out = tmp_path / "hf"
    report = hf_xlnet.write_hf_xlnet(params, cfg, "plm", out)
    assert report.architecture == "XLNetLMHeadModel" and report.tokenizer == ()
    reloaded, loading = transformers.XLNetLMHeadModel.from_pretrained(out, output_loading_info=True)
    assert loading["missing_keys"] == [] and loading["unexpected_keys"] == []
    assert reloaded.config.untie_r == cfg.untie_r
    batch = plm_batch(np.random.default_rng(1))
    logits, _ = XLNetLMHeadModel(cfg).apply({"params": params}, *[jnp.asarray(x) for x in batch])
    assert max_abs(logits, run_hf(reloaded.eval(), batch).logits) <= TOL
    back, cfg2, _, _ = hf_xlnet.import_hf_xlnet(out)
    assert cfg2 == cfg
    a, b = params_lib.flatten(params), params_lib.flatten(back)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_sequence_classification_and_span_heads_match_transformers(tmp_path):
    """Left padding (XLNet's convention): the summary reads the last token <cls>; BERT-style task masks.
    Right padding (our task batches) gives the same logits: the summary reads the last real token and
    relative positions ignore where the padding sits."""
    ids = np.random.default_rng(2).integers(0, 99, (B, L))
    seg = np.zeros((B, L), np.int64)
    seg[:, -1] = 2
    real = np.ones((B, L), np.float32)
    real[1, :3] = 0.0
    torch_in = dict(input_ids=torch.tensor(ids), token_type_ids=torch.tensor(seg), attention_mask=torch.tensor(real))
    ours_in = (jnp.asarray(ids), jnp.asarray(real), jnp.asarray(seg))

    clf = make_hf("XLNetForSequenceClassification", seed=3, num_labels=3)
    clf.save_pretrained(tmp_path / "clf")
    params, cfg, info, _ = hf_xlnet.import_hf_xlnet(tmp_path / "clf")
    assert info["head"] == "sequence_classification" and info["num_labels"] == 3
    logits = XLNetForSequenceClassification(cfg, 3).apply({"params": params}, *ours_in)
    with torch.no_grad():
        assert max_abs(logits, clf(**torch_in).logits) <= TOL
    right = [np.array(x) for x in ours_in]
    for x in right:
        x[1] = np.roll(x[1], -3)  # row 1's three pads moved to the end
    assert max_abs(XLNetForSequenceClassification(cfg, 3).apply({"params": params}, *map(jnp.asarray, right)),
                   logits) <= TOL
    hf_xlnet.write_hf_xlnet(params, cfg, "sequence_classification", tmp_path / "clf_out", info=info)
    again = transformers.XLNetForSequenceClassification.from_pretrained(tmp_path / "clf_out").eval()
    with torch.no_grad():
        assert max_abs(logits, again(**torch_in).logits) <= TOL

    qa = make_hf("XLNetForQuestionAnsweringSimple", seed=4)
    qa.save_pretrained(tmp_path / "qa")
    params, cfg, info, _ = hf_xlnet.import_hf_xlnet(tmp_path / "qa")
    assert info["head"] == "question_answering"
    start, end = XLNetForQuestionAnswering(cfg).apply({"params": params}, *ours_in)
    with torch.no_grad():
        ref = qa(**torch_in)
    assert max_abs(start, ref.start_logits) <= TOL and max_abs(end, ref.end_logits) <= TOL


def test_bin_weights_bare_trunk_and_explicit_encoder_head(tmp_path):
    model = make_hf("XLNetLMHeadModel", seed=5)
    model.save_pretrained(tmp_path / "bin", safe_serialization=False)
    assert (tmp_path / "bin" / "pytorch_model.bin").is_file()
    params, cfg, info, _ = hf_xlnet.import_hf_xlnet(tmp_path / "bin")
    assert info["head"] == "plm" and "lm_bias" in params

    trunk, _, info, _ = hf_xlnet.import_hf_xlnet(tmp_path / "bin", head="encoder")
    assert info["head"] == "encoder" and set(trunk) == {"xlnet"} and "lm_loss.bias" in info["dropped"]

    model.transformer.save_pretrained(tmp_path / "bare")  # XLNetModel: no 'transformer.' prefix
    bare, _, info, _ = hf_xlnet.import_hf_xlnet(tmp_path / "bare")
    assert info["head"] == "encoder"
    w = bare["xlnet"]["encoder"]["layers_1"]["ff"]["layer_1"]["dense"]["kernel"]
    assert np.array_equal(w, model.transformer.layer[1].ff.layer_1.weight.detach().numpy().T)


def _rewrite(src, dst, config=None, tensors=None, drop=()):
    """A copy of an HF folder with its config.json and/or tensors edited."""
    from safetensors.numpy import load_file, save_file

    shutil.copytree(src, dst)
    if config is not None:
        (dst / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    if tensors is not None or drop:
        t = load_file(str(src / "model.safetensors"))
        t.update(tensors or {})
        for k in drop:
            t.pop(k)
        save_file(t, str(dst / "model.safetensors"))
    return dst


@pytest.mark.parametrize("case, needle", [
    ("not_json", "not valid JSON"),
    ("bad_type", "field 'n_layer' must be int"),
    ("uni", "field 'attn_type' is 'uni'"),
    ("missing_tensor", "missing tensors: transformer.layer.1.rel_attn.seg_embed"),
    ("shape", "transformer.layer.0.ff.layer_1.weight (checkpoint (64, 32), expected (48, 32))"),
    ("untied_output", "lm_loss.weight differs from transformer.word_embedding.weight"),
])
def test_malformed_checkpoints_raise_checkpoint_error_naming_file_and_key(tmp_path, case, needle):
    src = tmp_path / "ok"
    make_hf("XLNetLMHeadModel", seed=6).save_pretrained(src)
    config = json.loads((src / "config.json").read_text())
    edits = {"not_json": dict(config="{ not json"), "bad_type": dict(config={**config, "n_layer": "two"}),
             "uni": dict(config={**config, "attn_type": "uni"}),
             "missing_tensor": dict(drop=["transformer.layer.1.rel_attn.seg_embed"]),
             "shape": dict(config={**config, "d_inner": 48}),
             "untied_output": dict(tensors={"lm_loss.weight": np.ones((99, 32), np.float32)})}[case]
    bad = _rewrite(src, tmp_path / case, **edits)
    with pytest.raises(CheckpointError) as err:
        hf_xlnet.import_hf_xlnet(bad)
    assert str(bad) in str(err.value) and needle in str(err.value)


@pytest.mark.parametrize("preset, expected", [("xlnet_base", 116_750_336), ("xlnet_large", 360_300_800)])
def test_preset_parameter_counts_equal_xlnet(preset, expected):
    cfg = load_config(preset).model
    ids = jax.ShapeDtypeStruct((2, 8), jnp.int32)
    shapes = jax.eval_shape(lambda x: XLNetLMHeadModel(cfg).init(jax.random.PRNGKey(0), x, x), ids)
    assert sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes)) == expected


@pytest.mark.parametrize("lm", [False], indirect=True, ids=["tied"])
def test_params_directory_round_trip_to_transformers(lm, tmp_path):
    """HF folder -> ptm params directory (export/params.save_params) -> HF folder -> same logits."""
    model, params, cfg, _ = lm
    src = tmp_path / "src"
    model.save_pretrained(src)
    out = hf_xlnet.import_hf_xlnet_to_params_dir(src, tmp_path / "params")
    report = hf_xlnet.export_hf_xlnet(out, tmp_path / "hf")
    assert report.head == "plm"
    reloaded = transformers.XLNetLMHeadModel.from_pretrained(tmp_path / "hf").eval()
    batch = plm_batch(np.random.default_rng(3))
    assert max_abs(run_hf(reloaded, batch).logits, run_hf(model, batch).logits) == 0.0
    flat, scanned = (hf_xlnet.params_to_hf(p, cfg, "plm") for p in (params, params_lib.stack_layers(params)))
    assert flat.keys() == scanned.keys() and all(np.array_equal(flat[k], scanned[k]) for k in flat)


@pytest.mark.parametrize("lm", [True], indirect=True, ids=["untied"])
def test_export_carries_the_sentencepiece_model_transformers_tokenizes_with(lm, tmp_path):
    spm = pytest.importorskip("sentencepiece")
    _, params, cfg, _ = lm
    words = [f"{a}{b}{c}" for a in "bcdfg" for b in "aeiou" for c in "lmnrst"]
    (tmp_path / "text.txt").write_text("\n".join(" ".join(words[i::7]) for i in range(7)) + "\n")
    spm.SentencePieceTrainer.train(input=str(tmp_path / "text.txt"), model_prefix=str(tmp_path / "spm"),
                                   vocab_size=40, model_type="unigram", user_defined_symbols=["<sep>", "<cls>"],
                                   minloglevel=2)
    src = params_lib.save_params(tmp_path / "params", params, cfg, "plm", {"tokenizer": {"kind": "sentencepiece",
                                 "lower_case": False}}, [tmp_path / "spm.model"])
    report = hf_xlnet.export_hf_xlnet(src, tmp_path / "hf")
    assert report.tokenizer == ("spiece.model",)
    tok = transformers.XLNetTokenizer.from_pretrained(tmp_path / "hf")
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "spm.model"))
    text = "bal mes tir gun fos"
    assert tok.tokenize(text) == sp.encode(text, out_type=str)
    assert tok.convert_tokens_to_ids(["<sep>", "<cls>"]) == [sp.piece_to_id("<sep>"), sp.piece_to_id("<cls>")]



@pytest.mark.parametrize("lm, scan, remat, stream", [(True, True, "full", True), (False, False, "save_dots", False)],
                         indirect=["lm"], ids=["untied-scan-full-bi_data-reuse", "tied-loop-save_dots"])
def test_scanned_and_rematerialised_stacks_give_transformers_logits(lm, scan, remat, stream):
    """Also the pretraining stream options: bi_data (second half of the batch reversed: negated distances)
    and reuse_len (memory keeps the first 6 states of the segment), against transformers' own."""
    model, params, cfg, _ = lm
    cfg = dataclasses.replace(cfg, scan_layers=scan, remat=remat)
    if scan:
        params = params_lib.stack_layers(params)
    reuse = 6 if stream else 0
    batch = plm_batch(np.random.default_rng(4))
    model.transformer.bi_data, model.transformer.reuse_len = stream, reuse
    try:
        out = run_hf(model, batch)
    finally:
        model.transformer.bi_data, model.transformer.reuse_len = False, None
    apply = jax.jit(lambda p, *a: XLNetLMHeadModel(cfg, reuse_len=reuse, bi_data=stream).apply({"params": p}, *a))
    logits, mems = apply(params, *[jnp.asarray(x) for x in batch])
    assert max_abs(logits, out.logits) <= TOL
    assert mems[0].shape == (B, reuse or 8, 32)
    assert all(max_abs(a, b.numpy().transpose(1, 0, 2)) <= TOL for a, b in zip(mems, out.mems))
