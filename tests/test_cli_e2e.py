"""End to end through the `ptm` CLI in real subprocesses: the offline embedded run, and bad input."""
import json
import re
import os
import subprocess
import sys

import pytest
from xla_env import xla_flags

from conftest import REPO


def ptm(*args, cwd=None, timeout=600):
    env = dict(os.environ, PYTHONPATH=str(REPO), XLA_FLAGS=xla_flags(8),
               JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2", USE_TF="0", HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "ptm_jax.cli", *args], cwd=cwd or REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_embedded_run_pretrains_finetunes_and_evaluates_offline(tmp_path):
    out = tmp_path / "run"
    from ptm_jax.config_loading import load_config

    assert load_config("bert_small").finetune.scratch_baseline  # the main job prints its from-scratch figure
    args = ("run", "-c", "bert_tiny", f"output_dir={str(out)!r}", "train.steps=12", "finetune.epochs=0.1",
            "finetune.scratch_baseline=true")
    r = ptm(*args)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "always predicting the most frequent token" in r.stdout
    assert "finetune [embedded]: pydoc-source" in r.stdout
    summary = json.loads((out / "summary.json").read_text())
    pre, fin, fresh = summary["pretrain"], summary["finetune"], summary["from_scratch"]
    assert pre["step"] == 12 and 0.0 <= pre["eval"]["mlm_accuracy"] <= 1.0
    assert 0.0 <= pre["baseline"]["majority_accuracy"] <= 1.0 and pre["corpus"]["documents"] > 50
    assert fin["best"]["step"] > 0 and 0.0 <= fin["best"]["metrics"]["accuracy"] <= 1.0
    # the same network from random initialisation, finetuned the same way, printed beside the finetuned figure
    assert (fin["from_scratch"], fresh["from_scratch"]) == (False, True) and fresh["steps"] == fin["steps"]
    acc, base = fin["final_eval"]["accuracy"], fresh["final_eval"]["accuracy"]
    assert (f"dev accuracy after the last step (step {fin['step']}): {acc:.4f}  |  the same network from random "
            f"initialisation, same finetuning: {base:.4f} (pretraining added {acc - base:+.4f})") in r.stdout
    assert (out / "pretrain" / "curves.png").stat().st_size > 1000
    assert (out / "finetune-embedded" / "best" / "ptm.json").exists()
    assert (out / "finetune-embedded-from-scratch" / "best" / "ptm.json").exists()
    assert list((out / "pretrain" / "tb").iterdir()), "TensorBoard event files"
    # a second run resumes: every stage is complete, nothing is retrained
    r2 = ptm(*args)
    assert r2.returncode == 0 and "already at step 12" in r2.stdout + r2.stderr


BAD_FILES = {
    "non_utf8.txt": b"good line.\nbad \xff\xfe bytes here.\n",
    "empty.txt": b"",
    "binary.txt": b"\x00\x01\x02\x03" * 100,
}


@pytest.mark.parametrize("name,expect", [("non_utf8.txt", r"(non_utf8\.txt:2\b|line 2)"), ("empty.txt", "empty"),
                                         ("binary.txt", "binary")])
def test_bad_corpus_files_give_a_clear_error_naming_the_file(tmp_path, name, expect):
    import re

    bad = tmp_path / name
    bad.write_bytes(BAD_FILES[name])
    r = ptm("data", "-c", "bert_tiny", f"data.corpus={str(bad)!r}", f"output_dir={str(tmp_path / 'o')!r}")
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and name in r.stderr and re.search(expect, r.stderr, re.I), r.stderr
    assert not (tmp_path / "o" / "cache").exists() or not any((tmp_path / "o" / "cache").rglob("COMPLETE"))


def test_ten_megabyte_single_line_and_missing_path_and_bad_value(tmp_path):
    big = tmp_path / "one_line.txt"
    big.write_bytes(b"word " * (2 * 1024 * 1024))
    r = ptm("data", "-c", "bert_tiny", f"data.corpus={str(big)!r}", f"output_dir={str(tmp_path / 'o')!r}")
    assert r.returncode == 2 and "Traceback" not in r.stderr and re.search(r"one_line\.txt(:1\b|.*line 1)", r.stderr)
    r = ptm("data", "-c", "bert_tiny", "data.corpus='/no/such/dir/*.txt'", f"output_dir={str(tmp_path / 'o')!r}")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "/no/such/dir" in r.stderr
    r = ptm("pretrain", "-c", "bert_tiny", "train.batch_size=-3")
    assert r.returncode == 2 and "train.batch_size" in r.stderr and "Traceback" not in r.stderr
    r = ptm("pretrain", "-c", "bert_tiny", "data.masked_lm_probability=0.2")
    assert r.returncode == 2 and "data.masked_lm_prob" in r.stderr
