"""Every Hugging Face path through the `ptm` CLI as users run it, for each family with a transformers counterpart
(BERT, ERNIE, GPT-2, XLNet): `ptm export RUN --format hf` of a trained tiny run, `ptm import-hf` of that folder, and
`ptm embed` / `generate` / `perplexity` on the run, the exported folder and the imported params directory, with the
exit status and the printed summary checked and the three answering alike.

The CLI runs in this process (``ptm_jax.cli.main``, what the `ptm` script calls), so the jitted programs compile
once for the three; one trained run per family serves the whole module.
"""
from __future__ import annotations

import contextlib
import io
import json
import types
from pathlib import Path

import numpy as np
import pytest

from transformers5_env import TRANSFORMERS5_MISSING, run_transformers5_check, transformers5

from ptm_jax.cli import main
from ptm_jax.export import params as params_lib

PRESETS = {"bert": "bert_tiny", "ernie": "ernie_tiny", "gpt": "gpt_tiny", "xlnet": "xlnet_tiny"}
EXPORT = {  # family -> (architecture, tensors written, tokenizer files, parameter paths left out)
    "bert": ("BertForPreTraining", 46, "vocab.txt", ""),
    "ernie": ("ErnieForMaskedLM", 42, "vocab.txt", "ernie/pooler"),  # ernie_tiny: objective ernie_mlm (no NSP)
    "gpt": ("GPT2LMHeadModel", 28, "vocab.json, merges.txt", ""),
    "xlnet": ("XLNetLMHeadModel", 37, "spiece.model", ""),
}
STEPS = 2
TEXTS = ["the quick brown fox jumps over the lazy dog", "a second, rather different line of text.", ""]


def ptm(*args: str) -> types.SimpleNamespace:
    """``ptm ARGS`` in this process: its exit status and what it printed on stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(args))
        except SystemExit as e:  # argparse errors
            rc = e.code
    return types.SimpleNamespace(rc=rc, out=out.getvalue(), err=err.getvalue())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """family -> a tiny run of STEPS pretraining steps on the embedded corpus, trained on first use."""
    root = tmp_path_factory.mktemp("hf_cli")
    done: dict[str, object] = {}

    def get(family: str):
        if family not in done:
            out = root / family
            r = ptm("pretrain", "-c", PRESETS[family], f"output_dir={str(out)!r}", f"train.steps={STEPS}",
                    f"train.checkpoint_every={STEPS}", "train.eval_every=0", "train.log_every=1")
            assert r.rc == 0, r.err[-3000:]
            assert f"pretrain: step {STEPS}" in r.out, r.out[-2000:]
            done[family] = out
        return done[family]

    get.root = root
    return get


@pytest.fixture(scope="module")
def exported(runs):
    """family -> (run, exported HF folder, params directory imported back from it), each made through the CLI
    once; the export and import summaries are checked by the tests below."""
    done: dict[str, tuple] = {}

    def get(family: str):
        if family not in done:
            run = runs(family)
            hf, back = runs.root / f"{family}_hf", runs.root / f"{family}_imported"
            done[family] = (run, hf, back, ptm("export", str(run), "--format", "hf", "--out", str(hf)),
                            ptm("import-hf", str(hf), "--out", str(back)))
        return done[family]

    return get


def _flat(tree) -> dict[str, np.ndarray]:
    import jax

    return {jax.tree_util.keystr(k): np.asarray(v) for k, v in jax.tree_util.tree_flatten_with_path(tree)[0]}


@pytest.mark.parametrize("family", sorted(PRESETS))
def test_export_of_a_trained_run_exits_0_and_prints_its_summary(exported, family):
    run, hf, _, r, _ = exported(family)
    arch, tensors, tok, left_out = EXPORT[family]
    assert r.rc == 0, r.err[-3000:]
    assert r.out.splitlines()[0] == (f"exported {run} -> {hf} ({arch}; {tensors} tensors; tokenizer {tok}"
                                     + (f"; left out {left_out})" if left_out else ")")), r.out
    config = json.loads((hf / "config.json").read_text())
    assert config["architectures"] == [arch] and config["vocab_size"] == 1000
    assert all((hf / f).is_file() for f in ["model.safetensors", *tok.split(", ")])


@pytest.mark.parametrize("family", sorted(PRESETS))
def test_import_hf_of_the_export_exits_0_and_gives_back_the_run_bit_for_bit(exported, family):
    run, hf, back, _, r = exported(family)
    assert r.rc == 0, r.err[-3000:]
    head = {"gpt": "causal_lm", "xlnet": "plm", "ernie": "masked_lm"}.get(family, "pretraining")
    assert r.out.strip() == f"imported {hf} -> {back}: head {head}, 2 layers, hidden 32, vocab 1000", r.out
    ours, cfg, info, _ = params_lib.load_params(run)
    theirs, cfg2, info2, _ = params_lib.load_params(back)
    assert cfg2.family == cfg.family and info2["head"] == info["head"] == head
    assert info2["tokenizer"]["kind"] == info["tokenizer"]["kind"]
    a, b = _flat(params_lib.plain_tree(ours)), _flat(params_lib.plain_tree(theirs))
    left_out = EXPORT[family][3]  # the masked LM class has no pooler: the run's is reported and not exported
    a = {k: v for k, v in a.items() if not left_out or not k.startswith(_key(left_out))}
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def _key(path: str) -> str:
    return "".join(f"['{p}']" for p in path.split("/"))


def _embed(model, texts_file, out, *extra) -> np.ndarray:
    r = ptm("embed", str(model), str(texts_file), "--out", str(out), *extra)
    assert r.rc == 0, r.err[-3000:]
    return r


@pytest.mark.parametrize("family", ["bert", "ernie"])
def test_embed_gives_the_same_sentence_vectors_from_the_run_the_export_and_the_import(exported, family, tmp_path):
    run, hf, back, _, _ = exported(family)
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n")
    vectors = []
    for name, model in (("run", run), ("hf", hf), ("imported", back)):
        r = _embed(model, texts, tmp_path / f"{name}.npy")
        assert r.err.strip().splitlines()[-1] == f"3 embeddings of size 32 -> {tmp_path / f'{name}.npy'}"
        vectors.append(np.load(tmp_path / f"{name}.npy"))
    assert vectors[0].shape == (3, 32) and np.all(np.isfinite(vectors[0])) and np.abs(vectors[0]).max() > 0.01
    np.testing.assert_array_equal(vectors[1], vectors[0])
    np.testing.assert_array_equal(vectors[2], vectors[0])


@pytest.mark.parametrize("family", ["bert", "xlnet"])
def test_embed_layers_gives_the_same_word_features_from_the_run_and_the_export(exported, family, tmp_path):
    run, hf, _, _, _ = exported(family)
    words = tmp_path / "words.txt"
    words.write_text("the quick brown fox\njumps over the lazy dog\n")
    feats = []
    for name, model in (("run", run), ("hf", hf)):
        _embed(model, words, tmp_path / f"{name}.npz", "--layers", "all")
        with np.load(tmp_path / f"{name}.npz") as z:
            feats.append({k: z[k] for k in z.files})
    assert sorted(feats[0]) == sorted(feats[1]) and feats[0]
    first = feats[0][sorted(feats[0])[0]]
    assert first.shape[0] == 3 and first.shape[-1] == 32, first.shape  # token representation + 2 layers
    for k in feats[0]:
        np.testing.assert_array_equal(feats[1][k], feats[0][k], err_msg=k)


def test_generate_and_perplexity_answer_alike_from_the_gpt_run_the_export_and_the_import(exported, tmp_path):
    run, hf, back, _, _ = exported("gpt")
    texts = []
    for model in (run, hf, back):
        r = ptm("generate", str(model), "--prompt", "Once upon a time", "--greedy", "--max-new-tokens", "8")
        assert r.rc == 0, r.err[-3000:]
        assert r.out.startswith("Once upon a time"), r.out
        texts.append(r.out)
    assert texts[1] == texts[0] and texts[2] == texts[0]
    test = tmp_path / "test.txt"
    test.write_text("\n".join(TEXTS[:2] * 4) + "\n")
    scores = []
    for model in (run, hf):
        r = ptm("perplexity", str(model), str(test), "--seq-len", "32")
        assert r.rc == 0, r.err[-3000:]
        scores.append(json.loads(r.out[r.out.index("{"):]))
    assert scores[0]["tokens"] > 20 and 1.0 < scores[0]["token_perplexity"] < 1e4, scores[0]
    assert {**scores[1], "model": str(run)} == scores[0]


def test_export_over_an_existing_folder_is_a_clear_error_with_status_2(exported):
    run, hf, _, _, _ = exported("gpt")
    r = ptm("export", str(run), "--format", "hf", "--out", str(hf))
    assert r.rc == 2 and "Traceback" not in r.err and f"{hf} already exists" in r.err, r.err


CLASSIC_FILES = {"bert": ["vocab.txt"], "ernie": ["vocab.txt"], "gpt": ["vocab.json", "merges.txt"],
                 "xlnet": ["spiece.model"]}


def saved_like_transformers_5(hf, out):
    """``hf`` re-saved the way transformers 5 saves a model folder: the weights and config as they are, the
    tokenizer as ``tokenizer.json`` only (transformers' fast tokenizer's own serialisation, no vocab.txt,
    vocab.json/merges.txt or spiece.model). Returns transformers' tokenizer of the folder."""
    import shutil

    from transformers import AutoTokenizer

    shutil.copytree(hf, out)
    fast = AutoTokenizer.from_pretrained(str(hf), use_fast=True)
    assert fast.is_fast
    fast.save_pretrained(str(out))
    for name in sum(CLASSIC_FILES.values(), []):
        (out / name).unlink(missing_ok=True)
    assert (out / "tokenizer.json").is_file()
    return fast


@pytest.mark.parametrize("family", sorted(PRESETS))
def test_a_folder_with_only_tokenizer_json_imports_with_ids_equal_to_transformers(exported, family, shared_data,
                                                                                  tmp_path):
    run, hf, _, _, _ = exported(family)
    v5 = tmp_path / "v5"
    fast = saved_like_transformers_5(hf, v5)
    r = ptm("import-hf", str(v5), "--out", str(tmp_path / "imported"))
    assert r.rc == 0, r.err[-3000:]
    assert r.out.startswith(f"imported {v5} -> {tmp_path / 'imported'}: head "), r.out
    ours, _, info, tok_dir = params_lib.load_params(tmp_path / "imported")
    _, _, run_info, _ = params_lib.load_params(run)
    assert info["tokenizer"]["files"] == CLASSIC_FILES[family]
    assert info["tokenizer"]["kind"].split("_")[0] == run_info["tokenizer"]["kind"].split("_")[0]
    assert bool(info["tokenizer"].get("lower_case")) == bool(run_info["tokenizer"].get("lower_case"))
    tok = params_lib.load_tokenizer(info, tok_dir)
    lines = (shared_data / "corpus/tinyshakespeare/input.txt").read_text(encoding="utf-8").splitlines()[:400]
    lines += TEXTS + ["Numbers 12,345.67 and punctuation: (a) [b] {c}!", "  leading and   inner spaces  "]
    if family == "xlnet":  # transformers' tokenizers-backed XLNet keeps a '▁' for trailing spaces; SentencePiece
        lines = [line.strip() for line in lines]  # (and transformers 4's XLNetTokenizer) drop it
    want = fast(lines, add_special_tokens=False)["input_ids"]
    got = tok.encode_batch(lines)
    assert sum(map(len, got)) > 2000
    assert got == want, next((line, g, w) for line, g, w in zip(lines, got, want) if g != w)
    # the folder itself is a model for every command: the same answers as the run
    if family in ("bert", "ernie"):
        texts = tmp_path / "texts.txt"
        texts.write_text("\n".join(TEXTS) + "\n")
        np.testing.assert_array_equal(np.load(_embed(v5, texts, tmp_path / "v5.npy") and tmp_path / "v5.npy"),
                                      np.load(_embed(run, texts, tmp_path / "run.npy") and tmp_path / "run.npy"))
    if family == "gpt":
        a = ptm("generate", str(v5), "--prompt", "Once upon a time", "--greedy", "--max-new-tokens", "8")
        b = ptm("generate", str(run), "--prompt", "Once upon a time", "--greedy", "--max-new-tokens", "8")
        assert a.rc == 0 and a.out == b.out, a.err[-2000:]


def _ptm_logits(family: str, run) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(transformers inputs, ptm_jax's logits by transformers' output name) of the run's model on fixed inputs."""
    import jax.numpy as jnp

    params, cfg, _, _ = params_lib.load_params(run)
    params = params_lib.unstack_layers(params_lib.plain_tree(params))
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 1000, (2, 12))
    if family == "gpt":
        from ptm_jax.families.gpt.model import GPTLMHeadModel

        logits, _ = GPTLMHeadModel(cfg).apply({"params": params}, jnp.asarray(ids))
        return {"input_ids": ids}, {"logits": np.asarray(logits)}
    if family == "xlnet":
        from ptm_jax.families.xlnet.model import XLNetLMHeadModel

        seg = np.zeros_like(ids)
        seg[:, 6:] = 1
        perm = np.zeros((2, 12, 12), np.float32)
        perm[:, :, 8:] = 1.0  # the last four positions are targets no position sees
        tm = np.zeros((2, 4, 12), np.float32)
        tm[:, np.arange(4), np.arange(8, 12)] = 1.0
        pad = np.zeros((2, 12), np.float32)
        logits, _ = XLNetLMHeadModel(cfg).apply({"params": params}, *map(jnp.asarray, (ids, seg, pad, perm, tm)))
        return ({"input_ids": ids, "token_type_ids": seg, "input_mask": pad, "perm_mask": perm, "target_mapping": tm},
                {"logits": np.asarray(logits)})
    from ptm_jax.families.bert.heads import BertForPreTraining
    from ptm_jax.families.ernie.model import ErnieForPreTraining

    model = BertForPreTraining(cfg) if family == "bert" else ErnieForPreTraining(cfg, with_nsp=False)
    mask, seg = np.ones_like(ids), np.zeros_like(ids)
    seg[:, 6:] = 1
    mlm, nsp = model.apply({"params": params}, *map(jnp.asarray, (ids, mask, seg, np.tile(np.arange(12), (2, 1)))))
    inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": seg}
    if family == "ernie":  # ErnieForMaskedLM: the MLM logits at every position
        return inputs, {"logits": np.asarray(mlm)}
    return inputs, {"prediction_logits": np.asarray(mlm), "seq_relationship_logits": np.asarray(nsp)}


def test_exports_load_in_transformers_5_with_ptm_logits_and_its_saved_folders_import(exported, tmp_path):
    """Version 5 (PyTorch classes) loads every family's export with no missing or unexpected tensor and the logits
    ptm_jax computes; the folders its ``save_pretrained`` writes (tokenizer.json only) import back to the run's
    parameters bit for bit, with the ids its tokenizer gives."""
    found = transformers5()
    if found is None:
        pytest.skip(TRANSFORMERS5_MISSING)
    python, env = found
    cases, expected = [], {}
    texts = TEXTS[:2] + ["Numbers 12,345.67 and punctuation: (a) [b] {c}!"]
    for family in sorted(PRESETS):
        run, hf, _, r, _ = exported(family)
        assert r.rc == 0, r.err[-2000:]
        inputs, logits = _ptm_logits(family, run)
        np.savez(tmp_path / f"{family}.npz", **inputs)
        expected[str(hf)] = (family, run, logits)
        cases.append({"hf": str(hf), "architecture": EXPORT[family][0], "inputs": str(tmp_path / f"{family}.npz"),
                      "out": str(tmp_path / f"{family}_v5"), "texts": texts})
    (tmp_path / "spec.json").write_text(json.dumps(cases))
    reports = run_transformers5_check(python, env, tmp_path / "spec.json")
    assert len(reports) == len(cases)
    for rep, case in zip(reports, cases):
        family, run, logits = expected[rep["hf"]]
        assert int(rep["version"].split(".")[0]) >= 5, rep["version"]
        assert rep["class"] == case["architecture"] and rep["missing"] == [] and rep["unexpected"] == [], rep
        with np.load(case["out"] + ".logits.npz") as theirs:
            assert sorted(theirs.files) == sorted(logits)
            for k in logits:
                np.testing.assert_allclose(theirs[k], logits[k], atol=1e-4, rtol=1e-4, err_msg=f"{family} {k}")
        v5 = Path(case["out"])
        assert (v5 / "tokenizer.json").is_file()
        r = ptm("import-hf", str(v5), "--out", str(tmp_path / f"{family}_back"))
        assert r.rc == 0 and r.out.startswith(f"imported {v5} -> "), r.err[-2000:]
        back, _, info, tok_dir = params_lib.load_params(tmp_path / f"{family}_back")
        ours, _, _, _ = params_lib.load_params(run)
        a, b = _flat(params_lib.plain_tree(ours)), _flat(params_lib.plain_tree(back))
        a = {k: v for k, v in a.items() if not EXPORT[family][3] or not k.startswith(_key(EXPORT[family][3]))}
        assert sorted(a) == sorted(b)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=f"{family} {k}")
        tok = params_lib.load_tokenizer(info, tok_dir)
        assert tok.encode_batch(texts) == rep["ids"], family


def test_a_tokenizer_json_of_another_kind_or_with_bad_ids_is_a_clear_error(tmp_path):
    from ptm_jax.errors import CheckpointError
    from ptm_jax.families.bert import hf as bert_hf

    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": {}, "merges": []}}))
    with pytest.raises(CheckpointError, match=r"tokenizer.json: model.type='BPE'; this model needs a WordPiece"):
        bert_hf.tokenizer_source(tmp_path)
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordPiece", "vocab": {"a": 0, "b": 5}}}))
    with pytest.raises(CheckpointError, match=r"model.vocab\['b'\] = 5: ids must be the integers 0..1, each once"):
        bert_hf.tokenizer_source(tmp_path)
    (tmp_path / "tokenizer.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match=r"tokenizer.json: holds a JSON list, expected an object"):
        bert_hf.tokenizer_source(tmp_path)
