"""ptm compare: a real two-entry comparison (word2vec skip-gram under a wall-clock budget, a tiny BERT under a
step budget) on a Gutenberg book, stopped mid-pretraining and continued, evaluated on MRPC and CoNLL-2003 NER as
feature extractor and finetuned, and the budgeted entry reproduced from the steps it reached."""
from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

from ptm_jax.errors import ConfigError


def _head(path, n: int) -> str:
    with open(path, encoding="utf-8") as f:
        return "".join(next(f) for _ in range(n))


def _config(tmp_path, shared_data) -> str:
    """Two entries on the first 2,500 lines of Frankenstein (Gutenberg 84); MRPC's first 32 train and 40 dev
    pairs (../shared/data/glue); CoNLL-2003's first 400 lines of eng.train and 300 of eng.testa."""
    (tmp_path / "corpus.txt").write_text(_head(shared_data / "corpus" / "gutenberg" / "84-0.txt", 2500))
    (tmp_path / "glue" / "MRPC").mkdir(parents=True)
    for split, n in (("train", 33), ("dev", 41)):
        src = shared_data / "glue" / "MRPC" / f"{split}.tsv"
        (tmp_path / "glue" / "MRPC" / f"{split}.tsv").write_text(_head(src, n))
    (tmp_path / "conll").mkdir()
    for name, n in (("eng.train", 400), ("eng.testa", 300)):
        (tmp_path / "conll" / name).write_text(_head(shared_data / "conll2003" / name, n))
    path = tmp_path / "compare_test.toml"
    path.write_text(f"""
name = "compare_test"
output_dir = "{tmp_path / 'cmp'}"
corpus = "{tmp_path / 'corpus.txt'}"
budget = "w2v: 1 s of training steps; bert: 12 steps"
budget_s = 1.0
[probe]
data_dir = "{shared_data / 'conll2003'}"
tasks = ["pos", "ner"]
train_sentences = 40
dev_sentences = 20
steps = 20
[glue]
data_dir = "{tmp_path / 'glue'}"
tasks = ["mrpc"]
train_subset = 24
feature = ["features.head=textcnn", "finetune.epochs=1", "finetune.batch_size=8", "finetune.max_seq_length=32",
           "train.log_every=1"]
finetune = ["finetune.epochs=1", "finetune.batch_size=8", "finetune.max_seq_length=64", "train.log_every=1"]
[conll]
data_dir = "{tmp_path / 'conll'}"
train_subset = 16
feature = ["finetune.epochs=1", "finetune.batch_size=8", "finetune.max_seq_length=48", "train.log_every=1"]
finetune = ["finetune.epochs=1", "finetune.batch_size=8", "finetune.max_seq_length=64", "train.log_every=1"]
[[entries]]
name = "w2v"
preset = "word2vec_tiny"
direction = "window"
note = "skip-gram"
overrides = ["train.steps=100000", "train.checkpoint_every=100000", "train.eval_every=100000", "train.log_every=3"]
[[entries]]
name = "bert"
preset = "bert_tiny"
direction = "bidirectional"
note = "masked LM"
budget_s = 0
overrides = ["train.steps=12", "train.checkpoint_every=6", "train.eval_every=6", "train.log_every=3"]
""")
    return str(path)


def test_compare_budget_stop_resume_glue_feature_and_finetune_columns_and_a_reproduced_entry(tmp_path, shared_data,
                                                                                               capsys):
    from ptm_jax.evaluate.compare import compare, load_compare_config
    from ptm_jax.evaluate.compare_stages import pretrain_entry
    from ptm_jax.evaluate.report import build_report
    from ptm_jax.export.params import load_params
    from ptm_jax.train.metrics import read_metrics

    cfg = _config(tmp_path, shared_data)
    out = tmp_path / "cmp"
    stopped = compare(cfg, stop_after=3)  # a real stop: checkpoint at step 3 of the first entry, command ends
    assert stopped == {"stopped": "w2v", "step": 3}
    assert (out / "w2v" / "pretrain" / "checkpoints" / "3").is_dir() and not (out / "bert").exists()
    spent = json.loads((out / "w2v" / "budget.json").read_text())
    # the stop at step 3 was the caller's, before the budget ran out (events, not seconds: a slow machine changes
    # the steps reached, never the outcome's kind)
    assert not spent["done"] and spent["spent_s"] > 0.0 and spent["steps"] == 3  # steps 2-3 timed
    assert "budget reached" not in capsys.readouterr().out

    result = compare(cfg)  # continues: w2v resumes from step 3 until 1 s is spent, bert runs its 12 steps
    rows = {r["entry"]: r for r in result["rows"]}
    budget = json.loads((out / "w2v" / "budget.json").read_text())
    reached = budget["steps"]
    assert budget["done"] and budget["calls"] == 2 and 3 < reached < 100000
    # stopped by the budget, at the first step that ended with the budget spent: the stop's evaluation and
    # checkpoint are not counted (spent_s is the clock when that step ended)
    assert budget["spent_s"] >= budget["budget_s"] == 1.0
    logged = re.findall(r"budget reached at step (\d+) \(([\d.]+) s of training\)", capsys.readouterr().out)
    assert [int(step) for step, _ in logged] == [reached]  # the value logged when the stop happened is the one kept
    assert float(logged[0][1]) == pytest.approx(budget["spent_s"], abs=0.051)
    assert rows["w2v"]["steps"] == reached and rows["w2v"]["budget"] == "1 s" and rows["bert"]["steps"] == 12
    train_steps = [r["step"] for r in read_metrics(out / "w2v" / "pretrain" / "metrics.jsonl")
                   if r["split"] == "train"]
    assert train_steps == list(range(3, reached + 1, 3))  # resumed at 3: no step trained twice, none skipped
    assert rows["w2v"]["representation"] == "static" and rows["bert"]["representation"] == "contextual"
    assert rows["w2v"]["train_flops"] and rows["w2v"]["flops_source"] == rows["bert"]["flops_source"] == "formula"
    for name, r in rows.items():
        probe = json.loads((out / name / "probe.json").read_text())
        assert probe["train_sentences"] == 40 and probe["dev_sentences"] == 20
        assert r["probe_pos_acc"] == max(probe["tasks"]["pos"]["accuracy"])
        glue = json.loads((out / name / "glue-feature" / "finetune-mrpc" / "summary.json").read_text())
        assert glue["train_rows"] == 24 and glue["step"] == 3 and "f1" in glue["final_eval"]
        assert r["feature_mrpc"] == glue["final_eval"]["f1"] and 0.0 <= r["feature_mrpc"] <= 1.0
        tagged = json.loads((out / name / "conll-feature" / "finetune-conll2003" / "summary.json").read_text())
        assert tagged["train_rows"] == 16 and tagged["step"] == 2
        assert (tagged["task"], tagged["head"]) == ("conll2003", "bilstm")  # the tagger over frozen features
        assert r["feature_conll2003"] == tagged["final_eval"]["f1"] and 0.0 <= r["feature_conll2003"] <= 1.0
    assert rows["w2v"]["finetune_mrpc"] == "n/a (no classifier)" and not (out / "w2v" / "glue-finetune").exists()
    assert rows["w2v"]["finetune_conll2003"] == "n/a (no tagger)" and not (out / "w2v" / "conll-finetune").exists()
    tuned = json.loads((out / "bert" / "glue-finetune" / "finetune-mrpc" / "summary.json").read_text())
    assert rows["bert"]["finetune_mrpc"] == tuned["final_eval"]["f1"] and tuned["step"] == 3
    tuned = json.loads((out / "bert" / "conll-finetune" / "finetune-conll2003" / "summary.json").read_text())
    assert rows["bert"]["finetune_conll2003"] == tuned["final_eval"]["f1"] and tuned["step"] == 2
    base = result["baseline"]  # the majority label of the 24 training pairs, scored on the 40 dev pairs
    assert base["feature_mrpc"] in (0.0, pytest.approx(2 * 25 / (2 * 25 + 15), abs=1e-4))
    md = (out / "compare.md").read_text()
    assert md.count("\n") == 5 and base["feature_conll2003"] == base["finetune_conll2003"] == 0.0
    assert "| MRPC F1 (feature) | CoNLL-2003 NER F1 (feature) | MRPC F1 (finetune) | CoNLL-2003 NER F1 (finetune) |" \
        in md
    assert "| w2v | static | window (no order) | skip-gram | 1 s |" in md and "n/a (no classifier)" in md
    assert (out / "compare.png").read_bytes()[:4] == b"\x89PNG"

    stamp = (out / "bert" / "glue-finetune" / "finetune-mrpc" / "summary.json").stat().st_mtime_ns
    again = compare(cfg)  # everything finished: nothing retrained or re-evaluated, same table
    assert again["rows"] == result["rows"]
    assert (out / "bert" / "glue-finetune" / "finetune-mrpc" / "summary.json").stat().st_mtime_ns == stamp
    assert json.loads((out / "w2v" / "budget.json").read_text())["calls"] == 2

    # the budgeted entry reproduced from the steps it reached (what --steps-from does): the same parameters. The
    # new folder starts with the first one's tokenizer and token cache (what a rerun would build the same)
    cmp = load_compare_config(cfg)
    cmp["output_dir"] = str(tmp_path / "again")
    for part in ("tokenizer", "cache"):
        shutil.copytree(out / "w2v" / part, tmp_path / "again" / "w2v" / part)
    summary = pretrain_entry(cmp, cmp["entries"][0], target_steps=reached)
    assert summary["step"] == reached and not summary["stopped"]
    first, _, _, _ = load_params(str(out / "w2v" / "pretrain"))
    second, _, _, _ = load_params(str(tmp_path / "again" / "w2v" / "pretrain"))
    for a, b in zip(*(sorted(_leaves(t)) for t in (first, second))):
        assert a[0] == b[0]
        np.testing.assert_array_equal(a[1], b[1])

    page = build_report(out)  # the report of a comparison holds its table
    assert "comparison" in page and f"{rows['bert']['probe_pos_acc']:.4g}" in page and "MRPC F1 (finetune)" in page


def _leaves(tree, prefix=""):
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _leaves(v, f"{prefix}/{k}")
    else:
        yield prefix, np.asarray(tree)


def test_compare_config_errors_name_the_field(tmp_path):
    from ptm_jax.evaluate.compare import load_compare_config

    bad = tmp_path / "bad.toml"
    bad.write_text('output_dir = "x"\nentries = []\n')
    with pytest.raises(ConfigError, match="corpus"):
        load_compare_config(bad)
    bad.write_text('output_dir = "x"\ncorpus = "embedded"\n[[entries]]\nname = "a"\n')
    with pytest.raises(ConfigError, match=r"entries\[0\] needs a name and a preset"):
        load_compare_config(bad)
    bad.write_text('output_dir = "x"\ncorpus = "embedded"\n[[entries]]\nname = "a"\npreset = "bert_tiny"\n'
                   'direction = "sideways"\n')
    with pytest.raises(ConfigError, match=r"entries\[0\] \(a\) direction='sideways': write one of unidirectional"):
        load_compare_config(bad)
    bad.write_text('output_dir = "x"\ncorpus = "embedded"\n[glue]\ndata_dir = "g"\ntasks = ["sst3"]\n'
                   '[[entries]]\nname = "a"\npreset = "bert_tiny"\ndirection = "bidirectional"\n')
    with pytest.raises(ConfigError, match=r"\[glue\] task 'sst3' is not a GLUE task"):
        load_compare_config(bad)
    bad.write_text('output_dir = "x"\ncorpus = "embedded"\n[conll]\ndata = "c"\n'
                   '[[entries]]\nname = "a"\npreset = "bert_tiny"\ndirection = "bidirectional"\n')
    with pytest.raises(ConfigError, match=r"\[conll\] needs data_dir .*; unknown: \['data'\]"):
        load_compare_config(bad)


def test_compare_includes_a_flair_entry_read_as_contextual_features(tmp_path, shared_data):
    """The Flair family in a comparison as the registry describes it: pretrained, probed on its word embeddings
    (one layer), its embeddings under the CoNLL BiLSTM tagger, no finetuned cell (no tagger of its own)."""
    from ptm_jax.evaluate.compare import compare

    (tmp_path / "corpus.txt").write_text(_head(shared_data / "corpus" / "gutenberg" / "84-0.txt", 600))
    (tmp_path / "conll").mkdir()
    for name, n in (("eng.train", 300), ("eng.testa", 200)):
        (tmp_path / "conll" / name).write_text(_head(shared_data / "conll2003" / name, n))
    path = tmp_path / "compare_flair.toml"
    path.write_text(f"""
name = "compare_flair"
output_dir = "{tmp_path / 'cmp'}"
corpus = "{tmp_path / 'corpus.txt'}"
budget = "6 steps"
budget_s = 0
[probe]
data_dir = "{shared_data / 'conll2003'}"
tasks = ["ner"]
train_sentences = 24
dev_sentences = 12
steps = 10
[conll]
data_dir = "{tmp_path / 'conll'}"
train_subset = 12
feature = ["finetune.epochs=1", "finetune.batch_size=8", "finetune.max_seq_length=40", "tagging.head=crf"]
[[entries]]
name = "flair"
preset = "flair_tiny"
direction = "bidirectional"
note = "two one-way character LMs"
overrides = ["train.steps=6", "train.checkpoint_every=6", "train.eval_every=6", "train.log_every=3"]
""")
    result = compare(str(path))
    row = result["rows"][0]
    assert row["family"] == "flair" and row["representation"] == "contextual" and row["steps"] == 6
    probe = json.loads((tmp_path / "cmp" / "flair" / "probe.json").read_text())
    assert len(probe["tasks"]["ner"]["f1"]) == 1 and row["probe_ner_f1"] == probe["tasks"]["ner"]["f1"][0]
    tagged = json.loads((tmp_path / "cmp" / "flair" / "conll-feature" / "finetune-conll2003" / "summary.json")
                        .read_text())
    assert "crf output" in tagged["description"] and 0.0 <= row["feature_conll2003"] <= 1.0
    assert row["finetune_conll2003"] == "n/a (no tagger)"
