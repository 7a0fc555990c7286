"""ptm compare: a real two-entry comparison (word2vec skip-gram, NNLM) stopped mid-pretraining and continued."""
from __future__ import annotations

import json

import pytest

from ptm_jax.errors import ConfigError


def _config(tmp_path, shared_data) -> str:
    path = tmp_path / "compare_test.toml"
    path.write_text(f"""
name = "compare_test"
output_dir = "{tmp_path / 'cmp'}"
corpus = "embedded"
budget = "12 steps per entry"
[probe]
data_dir = "{shared_data / 'conll2003'}"
tasks = ["pos", "ner"]
train_sentences = 40
dev_sentences = 20
steps = 20
[[entries]]
name = "w2v"
preset = "word2vec_tiny"
direction = "window (both sides)"
overrides = ["train.steps=12", "train.checkpoint_every=6", "train.eval_every=6", "train.log_every=3"]
[[entries]]
name = "nnlm"
preset = "nnlm_tiny"
direction = "left-to-right"
overrides = ["train.steps=12", "train.checkpoint_every=6", "train.eval_every=6", "train.log_every=3"]
""")
    return str(path)


def test_compare_stopped_run_resumes_skips_finished_stages_and_tables_every_entry(tmp_path, shared_data):
    from ptm_jax.evaluate.compare import compare
    from ptm_jax.evaluate.report import build_report
    from ptm_jax.train.metrics import read_metrics

    cfg = _config(tmp_path, shared_data)
    out = tmp_path / "cmp"
    stopped = compare(cfg, stop_after=6)  # a real stop: checkpoint at step 6 of the first entry, command ends
    assert stopped == {"stopped": "w2v", "step": 6}
    assert (out / "w2v" / "pretrain" / "checkpoints" / "6").is_dir() and not (out / "nnlm").exists()

    result = compare(cfg)  # continues: w2v resumes from step 6, nnlm runs, both are probed
    rows = {r["entry"]: r for r in result["rows"]}
    assert set(rows) == {"w2v", "nnlm"} and all(r["steps"] == 12 for r in rows.values())
    train_steps = [r["step"] for r in read_metrics(out / "w2v" / "pretrain" / "metrics.jsonl")
                   if r["split"] == "train"]
    assert train_steps == [3, 6, 9, 12]  # resumed at 6: no step trained twice, none skipped
    assert json.loads((out / "w2v" / "wall.json").read_text())["calls"] == 2
    assert rows["w2v"]["representation"] == "static" and rows["w2v"]["direction"] == "window (both sides)"
    for name, r in rows.items():
        probe = json.loads((out / name / "probe.json").read_text())
        assert probe["train_sentences"] == 40 and probe["dev_sentences"] == 20
        assert r["feature_pos_acc"] == max(probe["tasks"]["pos"]["accuracy"])
        assert 0.0 <= r["feature_ner_f1"] <= 1.0
        assert r["feature_pos_acc"] > probe["tasks"]["pos"]["majority_baseline"] - 0.2
    md = (out / "compare.md").read_text()
    assert md.count("\n") == 4 and "| w2v | word2vec | skipgram | static |" in md
    assert (out / "compare.png").read_bytes()[:4] == b"\x89PNG"

    probe_mtime = (out / "nnlm" / "probe.json").stat().st_mtime_ns
    again = compare(cfg)  # everything finished: nothing retrained or re-probed, same table
    assert again["rows"] == result["rows"]
    assert (out / "nnlm" / "probe.json").stat().st_mtime_ns == probe_mtime
    assert json.loads((out / "w2v" / "wall.json").read_text())["calls"] == 2

    page = build_report(out)  # the report of a comparison holds its table
    assert "comparison" in page and f"{rows['nnlm']['feature_pos_acc']:.4g}" in page


def test_compare_config_errors_name_the_field(tmp_path):
    from ptm_jax.evaluate.compare import load_compare_config

    bad = tmp_path / "bad.toml"
    bad.write_text('output_dir = "x"\nentries = []\n')
    with pytest.raises(ConfigError, match="corpus"):
        load_compare_config(bad)
    bad.write_text('output_dir = "x"\ncorpus = "embedded"\n[[entries]]\nname = "a"\n')
    with pytest.raises(ConfigError, match=r"entries\[0\] needs a name and a preset"):
        load_compare_config(bad)
