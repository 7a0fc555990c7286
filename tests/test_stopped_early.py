"""launch/stopped_early.py, which the SLURM and TPU launchers ask whether to start a command again: it resolves
output_dir from the ptm command line as ptm does, reads every stage's summary.json written since the segment
started, and answers yes for an early stop in any stage (pretrain, finetune, or both inside `ptm run`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "launch"))

from stopped_early import main, output_dir_of, stopped_early  # noqa: E402


def _summary(path: Path, body: dict, age_s: float = 0.0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body))
    t = time.time() - age_s
    os.utime(path, (t, t))


def test_early_stop_in_any_stage_since_the_segment_started(tmp_path):
    out = tmp_path / "run"
    start = time.time()
    _summary(out / "pretrain/summary.json", {"stage": "pretrain", "preempted": True}, age_s=3600)  # older run
    _summary(out / "finetune-sst2/summary.json", {"stage": "finetune", "preempted": False})
    assert stopped_early(str(out), start) == []
    _summary(out / "finetune-sst2/summary.json", {"stage": "finetune", "preempted": True})
    assert stopped_early(str(out), start) == [str(out / "finetune-sst2/summary.json")]
    _summary(out / "summary.json", {"pretrain": {"preempted": True, "step": 40}})  # `ptm run`, nested
    assert str(out / "summary.json") in stopped_early(str(out), start)
    assert stopped_early(str(tmp_path / "absent"), start) == []


def test_output_dir_is_resolved_like_ptm_and_the_exit_status_answers(tmp_path):
    out = tmp_path / "o"
    args = ["pretrain", "-c", "bert_tiny", f"output_dir={out}", "train.steps=5"]
    assert output_dir_of(args) == str(out)
    assert output_dir_of(["run", "-c", "bert_tiny", "--output-dir", str(out), "--task", "sst2"]) == str(out)
    since = time.time()
    assert main([str(since), "--", *args]) == 1
    _summary(out / "pretrain/summary.json", {"preempted": True})
    assert main([str(since), "--", *args]) == 0
    cmd = tmp_path / "ptm.cmd"
    cmd.write_text(f"pretrain -c bert_tiny output_dir=\\'{out}\\' train.steps=5\n")  # as printf %q writes it
    done = subprocess.run([sys.executable, str(REPO / "launch/stopped_early.py"), str(since), "--command-file",
                           str(cmd)], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and f"stopped early: {out}/pretrain/summary.json" in done.stdout, done.stderr
    assert main(["not-enough"]) == 2
    assert main([str(since), "--", "pretrain", "-c", "no_such_preset"]) == 3  # cannot tell: never "finished"
