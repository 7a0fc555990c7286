"""benchmarks/feature_heads.py's CoNLL report: the CRF-against-softmax table reads each run's kept (best dev)
evaluation, recorded or from its stage's best.json, and its test F1."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def feature_heads():
    spec = importlib.util.spec_from_file_location("feature_heads", REPO / "benchmarks" / "feature_heads.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_crf_against_softmax_table_uses_the_kept_dev_evaluation_and_its_test_f1(tmp_path):
    fh = feature_heads()
    stage = tmp_path / "run_crf_seed1" / "finetune-conll2003"
    stage.mkdir(parents=True)
    (stage / "best.json").write_text(json.dumps({"step": 126, "value": 0.6, "metrics": {"f1": 0.60}}))

    def run(last, best, test, out=None):
        record = {"final_eval": {"f1": last}, "test_eval": {"f1": test},
                  "overrides": ["finetune.task=conll2003", f"output_dir={out}"]}
        if best is not None:
            record["best_eval"] = {"step": 188, "metrics": {"f1": best}}
        return record

    runs = {"bilstm/w": run(0.50, 0.52, 0.40), "bilstm/w/seed1": run(0.54, 0.54, 0.44),
            "bilstm/w/crf": run(0.61, 0.62, 0.50),
            "bilstm/w/crf/seed1": run(0.58, None, 0.52, tmp_path / "run_crf_seed1"),  # its best.json: 0.60
            "bilstm/e": run(0.10, 0.10, 0.05)}  # no CRF arm: no row
    arms = {"bilstm/w": ["bilstm/w", "bilstm/w/seed1"], "bilstm/w/crf": ["bilstm/w/crf", "bilstm/w/crf/seed1"],
            "bilstm/e": ["bilstm/e"]}
    assert fh.best_eval(runs["bilstm/w/crf/seed1"])["step"] == 126
    lines = fh.tagging_head_table(runs, arms, test=True).splitlines()
    assert lines[0] == ("| source | dev softmax | dev CRF | dev CRF - softmax | test softmax | test CRF | "
                        "test CRF - softmax |")
    assert lines[2:] == ["| bilstm/w | 53.00 | 61.00 | +8.00 | 42.00 | 51.00 | +9.00 |"]
    assert fh.tagging_head_table(runs, arms).splitlines()[2] == "| bilstm/w | 52.00 | 59.50 | +7.50 |"
