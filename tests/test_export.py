"""Params directories, loading from training runs, npz export, strict import errors, the .bin pickle guard,
and the `ptm import-hf | export | embed | predict` handlers on a tiny model."""
from __future__ import annotations

import argparse
import dataclasses
import json
import pickle

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from ptm_jax.checkpoint import Checkpointer
from ptm_jax.families.bert.config import BertConfig
from ptm_jax.config import RunConfig
from ptm_jax.config_loading import to_dict
from ptm_jax.errors import CheckpointError, ConfigError, DataError
from ptm_jax.commands import export as commands
from ptm_jax.export import inference
from ptm_jax.export import params as params_lib
from ptm_jax.families.bert import hf as hf_bert
from ptm_jax.families.bert.heads import BertForPreTraining
from ptm_jax.families.bert.model import BertModel
from ptm_jax.families.bert.task_heads import BertForSequenceClassification
from ptm_jax.train.state import TrainState

LETTERS = list("abcdefghijklmnopqrstuvwxyz")
VOCAB = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "!", "the", "movie", "good", "bad", "was"]
         + LETTERS + ["##" + c for c in LETTERS])
TINY = BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_layers=2, num_heads=4, intermediate_size=48,
                   max_position_embeddings=64, hidden_dropout=0.0, attention_dropout=0.0)
TEXTS = ["the movie was good !", "bad", "", "the the the movie movie , was bad . xyz", "good good"]


def flat_equal(a: dict, b: dict) -> bool:
    fa, fb = params_lib.flatten(a), params_lib.flatten(b)
    return fa.keys() == fb.keys() and all(np.array_equal(fa[k], fb[k]) for k in fa)


@pytest.fixture
def vocab_file(tmp_path):
    f = tmp_path / "vocab.txt"
    f.write_text("\n".join(VOCAB) + "\n")
    return f


def init(model, *args, seed: int = 3):
    """Random parameters of ``model`` (numpy normal(0, 0.05), every tensor non-trivial); shapes from
    eval_shape, so no init computation is compiled."""
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), *args))
    rng = np.random.default_rng(seed)
    tree = jax.tree.map(lambda s: (0.05 * rng.standard_normal(s.shape)).astype(np.float32),
                        nn.meta.unbox(shapes))
    return params_lib.plain_tree(tree)


def pretraining_params(cfg=TINY):
    ids = jnp.zeros((1, 8), jnp.int32)
    return init(BertForPreTraining(cfg), ids, ids, ids, ids[:, :2])


def classifier_params(n=3):
    ids = jnp.zeros((1, 8), jnp.int32)
    return init(BertForSequenceClassification(TINY, n), ids, ids, ids)


# ----------------------------------------------------------------------------------------------------
# params directory, runs, npz


def test_params_directory_round_trips_bitwise_with_config_and_tokenizer(tmp_path, vocab_file):
    params = pretraining_params()
    out = params_lib.save_params(tmp_path / "p", params, TINY, "pretraining", {"source": "unit"}, [vocab_file])
    meta = json.loads((out / "ptm.json").read_text())
    assert meta["head"] == "pretraining" and meta["model"]["hidden_size"] == 32 and meta["source"] == "unit"
    assert meta["tokenizer"] == {"kind": "wordpiece", "lower_case": True, "files": ["vocab.txt"]}
    assert (out / "vocab.txt").read_text() == vocab_file.read_text()
    got, cfg, info, tok_dir = params_lib.load_params(out)
    assert cfg == TINY and info["head"] == "pretraining" and tok_dir == out
    assert flat_equal(got, params)
    assert all(isinstance(x, np.ndarray) for x in jax.tree.leaves(got))
    assert params_lib.load_tokenizer(info, tok_dir).encode("the movie") == [8, 9]
    with pytest.raises(ConfigError, match="already exists"):
        params_lib.save_params(out, params, TINY, "pretraining", {}, [vocab_file])
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left behind


def _write_run(tmp_path, vocab_file, cfg=TINY, meta_extra=None):
    run = RunConfig(output_dir=str(tmp_path / "run"), model=cfg)
    out = tmp_path / "run"
    (out / "tokenizer").mkdir(parents=True)
    (out / "tokenizer" / "vocab.txt").write_text(vocab_file.read_text())
    (out / "config.json").write_text(json.dumps(to_dict(run)))
    variables = {"params": pretraining_params(cfg)}
    ckpt = Checkpointer(out / "pretrain" / "checkpoints", async_save=False)
    for step in (10, 20):
        state = TrainState.create(jax.tree.map(lambda x: x * step, variables), optax.adamw(1e-3))
        ckpt.save(step, state, {"config": to_dict(run), "cursor": step * 4, "step": step, **(meta_extra or {})})
    ckpt.close()
    return out, jax.tree.map(lambda x: np.asarray(x * 20), variables)["params"]


@pytest.mark.parametrize("where", ["run", "stage", "checkpoints"])
def test_load_params_reads_the_latest_step_of_a_training_run(tmp_path, vocab_file, where):
    out, want = _write_run(tmp_path, vocab_file)
    path = {"run": out, "stage": out / "pretrain", "checkpoints": out / "pretrain" / "checkpoints"}[where]
    params, cfg, info, tok_dir = params_lib.load_params(path)
    assert info["head"] == "pretraining" and info["step"] == 20 and cfg == TINY
    assert tok_dir == out / "tokenizer" and info["tokenizer"]["files"] == ["vocab.txt"]
    assert flat_equal(params, want)


def test_scan_layout_run_exports_the_same_tensors_as_its_loop_layout(tmp_path, vocab_file):
    scan_cfg = dataclasses.replace(TINY, scan_layers=True)
    out, want = _write_run(tmp_path, vocab_file, scan_cfg)
    params, cfg, _, _ = params_lib.load_params(out)
    assert cfg.scan_layers and params["bert"]["encoder"]["layers"]["layer"]["output"]["dense"]["kernel"].shape \
        == (2, 48, 32)
    hf_bert.export_hf(out, tmp_path / "hf")
    back, cfg2, info, _ = hf_bert.import_hf(tmp_path / "hf")
    assert info["head"] == "pretraining" and not cfg2.scan_layers
    assert flat_equal(back, params_lib.unstack_layers(want))


def test_npz_export_is_flat_names_to_arrays(tmp_path, vocab_file):
    params = classifier_params()
    params_lib.save_params(tmp_path / "p", params, TINY, "sequence_classification",
                           {"num_labels": 3, "label_names": ["a", "b", "c"]}, [vocab_file])
    parser = argparse.ArgumentParser()
    commands.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["export", str(tmp_path / "p"), "--format", "npz", "--out", str(tmp_path / "x.npz")])
    assert args.handler(args) == 0
    with np.load(tmp_path / "x.npz", allow_pickle=False) as z:
        assert "bert/encoder/layers_1/attention/query/kernel" in z.files
        assert np.array_equal(z["classifier/dense/bias"], params["classifier"]["dense"]["bias"])
    got, cfg, info, tok_dir = params_lib.load_params(tmp_path / "x.npz")
    assert cfg == TINY and info["label_names"] == ["a", "b", "c"] and flat_equal(got, params) and tok_dir is None


# ----------------------------------------------------------------------------------------------------
# strict import


def _hf_dir(tmp_path, vocab_file, head="pretraining"):
    out = tmp_path / "hf"
    params = pretraining_params() if head == "pretraining" else classifier_params()
    params_lib.save_params(tmp_path / "p", params, TINY, head, {"num_labels": 3}, [vocab_file])
    hf_bert.export_hf(tmp_path / "p", out)
    from safetensors.numpy import load_file

    return out, load_file(str(out / "model.safetensors"))


def _rewrite(out, tensors):
    from safetensors.numpy import save_file

    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})


def test_missing_unexpected_and_misshapen_tensors_are_named(tmp_path, vocab_file):
    out, tensors = _hf_dir(tmp_path, vocab_file)
    good = dict(tensors)
    del tensors["bert.encoder.layer.1.output.dense.bias"]
    _rewrite(out, tensors)
    with pytest.raises(CheckpointError, match=r"missing tensors: bert\.encoder\.layer\.1\.output\.dense\.bias"):
        hf_bert.import_hf(out)
    _rewrite(out, {**good, "bert.encoder.layer.2.output.dense.bias": np.zeros(32, np.float32)})
    with pytest.raises(CheckpointError, match=r"unexpected tensors: bert\.encoder\.layer\.2\.output\.dense\.bias"):
        hf_bert.import_hf(out)
    _rewrite(out, {**good, "bert.encoder.layer.0.attention.self.key.weight": np.zeros((32, 31), np.float32)})
    with pytest.raises(CheckpointError, match=r"shape mismatches: bert\.encoder\.layer\.0\.attention\.self\.key"
                                              r"\.weight \(checkpoint \(32, 31\), expected \(32, 32\)\)"):
        hf_bert.import_hf(out)
    # what transformers itself ignores is tolerated by name: the position_ids buffer, tied decoder copies
    extra = {"bert.embeddings.position_ids": np.arange(64, dtype=np.int64)[None],
             "cls.predictions.decoder.weight": good["bert.embeddings.word_embeddings.weight"],
             "cls.predictions.decoder.bias": good["cls.predictions.bias"]}
    _rewrite(out, {**good, **extra})
    params, _, info, _ = hf_bert.import_hf(out)
    assert info["head"] == "pretraining" and not any("position_ids" in k for k in params_lib.flatten(params))
    _rewrite(out, {**good, **extra, "cls.predictions.decoder.weight": good["bert.embeddings.word_embeddings.weight"]
                   + 1.0})
    with pytest.raises(CheckpointError, match=r"cls\.predictions\.decoder\.weight differs"):
        hf_bert.import_hf(out)


def test_an_explicit_head_drops_the_other_heads_by_name(tmp_path, vocab_file):
    out, tensors = _hf_dir(tmp_path, vocab_file)
    params, _, info, _ = hf_bert.import_hf(out, head="encoder")
    assert set(params) == {"bert"} and "pooler" in params["bert"]
    assert info["dropped"] == sorted(k for k in tensors if k.startswith("cls."))
    with pytest.raises(CheckpointError, match=r"missing tensors: classifier\.bias, classifier\.weight"):
        hf_bert.import_hf(out, head="sequence_classification")


def test_config_that_our_bert_cannot_represent_is_refused(tmp_path, vocab_file):
    out, _ = _hf_dir(tmp_path, vocab_file)
    cfg = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**cfg, "position_embedding_type": "relative_key"}))
    with pytest.raises(CheckpointError, match="position_embedding_type='relative_key'"):
        hf_bert.import_hf(out)
    (out / "config.json").write_text(json.dumps({**cfg, "hidden_act": "swish"}))
    with pytest.raises(CheckpointError, match="hidden_act='swish'"):
        hf_bert.import_hf(out)


class _RunsCode:
    """Unpickling this would run code: it writes a marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('ran')",))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("writer", ["pickle", "torch.save"])
def test_bin_that_is_not_a_weights_only_pickle_is_refused(tmp_path, vocab_file, writer):
    torch = pytest.importorskip("torch")
    out, tensors = _hf_dir(tmp_path, vocab_file)
    (out / "model.safetensors").unlink()
    marker = tmp_path / "marker"
    state = {k: torch.from_numpy(v.copy()) for k, v in tensors.items()}
    state["bert.pooler.dense.bias"] = _RunsCode(marker)
    with open(out / "pytorch_model.bin", "wb") as f:
        pickle.dump(state, f) if writer == "pickle" else torch.save(state, f)
    with pytest.raises(CheckpointError, match="pytorch_model.bin: refused: not a weights-only"):
        hf_bert.import_hf(out)
    assert not marker.exists()
    state["bert.pooler.dense.bias"] = torch.from_numpy(tensors["bert.pooler.dense.bias"])
    torch.save(state, out / "pytorch_model.bin")  # the same tensors, weights only: accepted
    params, _, _, _ = hf_bert.import_hf(out)
    assert np.array_equal(params["bert"]["pooler"]["dense"]["bias"], tensors["bert.pooler.dense.bias"])


# ----------------------------------------------------------------------------------------------------
# inference commands


def test_truncate_pair_matches_berts_pop_loop():
    def reference(a, b, budget):
        while a + b > budget:
            if a > b:
                a -= 1
            else:
                b -= 1
        return a, b

    cases = [(a, b, t) for a in range(12) for b in range(12) for t in range(24)]
    from ptm_jax.data.tasks.features import truncate_pair

    assert all(truncate_pair(a, b, t) == reference(a, b, t) for a, b, t in cases)


def test_embeddings_do_not_depend_on_batching_or_padding(tmp_path, vocab_file):
    from ptm_jax.data.tokenizers import WordPieceTokenizer

    params = pretraining_params()
    tok = WordPieceTokenizer(vocab_file)
    full = inference.embed_texts(params, TINY, tok, TEXTS, batch_size=8)
    ones = inference.embed_texts(params, TINY, tok, TEXTS, batch_size=1)
    assert full.shape == (5, 32) and np.abs(full - ones).max() < 1e-5
    ids = [2] + tok.encode(TEXTS[0]) + [3]  # one unpadded sequence, mean over its tokens
    x = jnp.asarray([ids])
    h, _ = jax.jit(BertModel(TINY).apply)({"params": params["bert"]}, x, jnp.ones_like(x), jnp.zeros_like(x))
    assert np.abs(full[0] - np.asarray(h[0]).mean(0)).max() < 1e-5
    cls = inference.embed_texts(params, TINY, tok, TEXTS, pooling="cls", normalize=True, batch_size=1)
    assert np.abs(cls[0] - np.asarray(h[0, 0]) / np.linalg.norm(h[0, 0])).max() < 1e-5


def test_cli_import_export_embed_predict(tmp_path, vocab_file, capsys, monkeypatch):
    # weights 10x the usual 0.05: attention is far from uniform, so the texts' class probabilities differ by
    # tenths (at 0.05 they differ in the fifth decimal and any text's output would pass for another's)
    params = jax.tree.map(lambda a: 10 * a, classifier_params())
    params_lib.save_params(tmp_path / "clf", params, TINY, "sequence_classification",
                           {"num_labels": 3, "label_names": ["neg", "neu", "pos"]}, [vocab_file])
    parser = argparse.ArgumentParser()
    commands.register(parser.add_subparsers(dest="command"))

    def run(*argv):
        args = parser.parse_args([str(a) for a in argv])
        return args.handler(args)

    assert run("export", tmp_path / "clf", "--format", "hf", "--out", tmp_path / "hf") == 0
    assert run("import-hf", tmp_path / "hf", "--out", tmp_path / "back") == 0
    back, _, info, _ = params_lib.load_params(tmp_path / "back")
    assert info["label_names"] == ["neg", "neu", "pos"] and flat_equal(back, params)
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n")
    capsys.readouterr()
    assert run("predict", tmp_path / "back", tmp_path / "in.txt") == 0
    printed = capsys.readouterr().out.splitlines()
    from ptm_jax.data.tokenizers import WordPieceTokenizer

    # independently of the batched, padded, bucketed inference path: the model's apply on each text alone,
    # [CLS] text [SEP] unpadded, the softmax in numpy, the mean of the trunk's last layer
    tok = WordPieceTokenizer(vocab_file)
    logits, means, cls = [], [], []
    for text in TEXTS:
        x = jnp.asarray([[2] + tok.encode(text) + [3]])
        logits.append(np.asarray(BertForSequenceClassification(TINY, 3).apply(
            {"params": params}, x, jnp.ones_like(x), jnp.zeros_like(x)))[0])
        h, _ = BertModel(TINY).apply({"params": params["bert"]}, x, jnp.ones_like(x), jnp.zeros_like(x))
        means.append(np.asarray(h[0]).mean(0))
        cls.append(np.asarray(h[0, 0]))
    logits = np.asarray(logits, np.float64)
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    assert printed == [["neg", "neu", "pos"][i] for i in logits.argmax(1)]
    assert run("predict", tmp_path / "back", tmp_path / "in.txt", "--out", tmp_path / "p.tsv") == 0
    rows = [r.split("\t") for r in (tmp_path / "p.tsv").read_text().splitlines()]
    assert rows[0] == ["index", "prediction", "p_neg", "p_neu", "p_pos"] and len(rows) == 6
    assert [r[:2] for r in rows[1:]] == [[str(i), label] for i, label in enumerate(printed)]
    assert np.ptp(probs[:, 2]) > 0.1                                     # the texts' outputs differ
    np.testing.assert_allclose(np.array([r[2:] for r in rows[1:]], float), probs, atol=1e-5)
    assert run("embed", tmp_path / "back", tmp_path / "in.txt", "--out", tmp_path / "e.npy") == 0
    np.testing.assert_allclose(np.load(tmp_path / "e.npy"), np.asarray(means), atol=1e-5)
    monkeypatch.setattr("sys.stdin", open(tmp_path / "in.txt"))
    assert run("embed", tmp_path / "back", "-", "--pooling", "cls") == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["text"] for x in lines] == TEXTS
    np.testing.assert_allclose([x["embedding"] for x in lines], np.asarray(cls), atol=1e-5)
    (tmp_path / "bad.txt").write_bytes(b"fine\n\xff\xfe broken\n")
    with pytest.raises(DataError, match=r"bad\.txt:2: not UTF-8"):
        run("embed", tmp_path / "back", tmp_path / "bad.txt")
    with pytest.raises(DataError, match=r"in\.txt:1: --pairs expects"):
        run("predict", tmp_path / "back", tmp_path / "in.txt", "--pairs")
    with pytest.raises(ConfigError, match="predict needs a finetuned sequence classifier"):
        params_lib.save_params(tmp_path / "enc", pretraining_params(), TINY, "pretraining", {}, [vocab_file])
        run("predict", tmp_path / "enc", tmp_path / "in.txt")
