"""What an operator sees: a `ptm` run whose output is not a terminal prints plain log
lines every train.log_every steps (step, loss, the objective's metrics, learning rate, examples/s, ETA) and no
progress-bar redraws, and a default run prints no TensorFlow/absl start-up lines."""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import pytest
from xla_env import xla_flags

from conftest import REPO
from ptm_jax import logs
from ptm_jax.train.metrics import format_line, use_progress_bar

LINE = re.compile(r"^step (\d+)/(\d+) \| (.*) \| lr (\S+) \| (\S+) examples/s \| ETA (\S+)$")
NOISE = re.compile(r"absl|InitializeLog|oneDNN|tensorflow|cpu_feature_guard|I0000|W0000|E0000")


def ptm_env(**extra) -> dict[str, str]:
    """The test environment minus the quieting variables conftest sets: a user's default shell."""
    env = dict(os.environ, PYTHONPATH=str(REPO), XLA_FLAGS=xla_flags(8),
               JAX_PLATFORMS="cpu", **extra)
    for key in ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS", "PTM_VERBOSE"):
        env.pop(key, None)
    return env


@pytest.fixture(scope="module")
def pretrain_run(tmp_path_factory):
    """A real bert_tiny pretraining run (tf.data input, so TensorFlow is imported) with its output piped:
    train.progress_bar=true, yet stdout/stderr are not terminals."""
    tmp = tmp_path_factory.mktemp("log_lines")
    corpus = tmp / "corpus.txt"
    words = "cat dog park river stone cloud music paper tree house road light".split()
    corpus.write_text("\n\n".join("\n".join(f"The {words[(d + i) % 12]} saw {d * 7 + i} {words[(d * i) % 12]}s."
                                           for i in range(6)) for d in range(80)) + "\n")
    r = subprocess.run([sys.executable, "-m", "ptm_jax.cli", "pretrain", "-c", "bert_tiny",
                        f"data.corpus={str(corpus)!r}", f"output_dir={str(tmp / 'run')!r}", "train.steps=6",
                        "train.log_every=2", "train.eval_every=6", "train.eval_batches=1",
                        "data.eval_documents=24",
                        "train.progress_bar=true"],
                       cwd=REPO, env=ptm_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def test_piped_run_prints_one_plain_line_per_logged_step(pretrain_run):
    out = pretrain_run.stdout
    assert "\r" not in out + pretrain_run.stderr  # no progress-bar redraws
    lines = [m for m in map(LINE.match, out.splitlines()) if m]
    assert [(int(m[1]), int(m[2])) for m in lines] == [(2, 6), (4, 6), (6, 6)], out
    for m in lines:
        fields = dict(f.split(" ", 1) for f in m[3].split(" | "))
        assert {"loss", "mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy"} <= set(fields), m[0]
        assert math.isfinite(float(fields["loss"])) and 0.0 <= float(fields["mlm_accuracy"]) <= 1.0
        assert 0.0 < float(m[4]) <= 1e-3 and float(m[5]) > 0  # bert_tiny: learning_rate 1e-3, warmup 5
        assert re.fullmatch(r"\d+:\d\d:\d\d", m[6]), m[6]
    assert lines[-1][6] == "0:00:00"  # the last step: nothing left
    assert re.search(r"^step 6: eval mlm_accuracy=", out, re.M)


def test_default_run_prints_no_tensorflow_or_absl_lines(pretrain_run):
    noise = [line for line in (pretrain_run.stdout + pretrain_run.stderr).splitlines() if NOISE.search(line)]
    assert not noise, noise
    # the toolkit's own lines are all that stderr holds: its logging records ("LEVEL logger: message")
    assert all(re.match(r"^(INFO|WARNING|ERROR) ptm_jax\.", line) for line in pretrain_run.stderr.splitlines()), \
        pretrain_run.stderr


def test_verbose_flag_lets_tensorflow_start_up_lines_through():
    """`ptm -v`'s start-up path before a bare TensorFlow import: the notice the default run hides is there."""
    code = ("import sys; from ptm_jax import logs; logs.quiet_startup(logs.wants_verbose(sys.argv[1:])); "
            "import tensorflow")
    loud = subprocess.run([sys.executable, "-c", code, "-v", "pretrain"], env=ptm_env(), capture_output=True,
                          text=True, timeout=300)
    assert loud.returncode == 0, loud.stderr
    assert "InitializeLog" in loud.stderr  # absl's notice before its logging starts
    # and TensorFlow's own start-up line, which depends on the CPU: the oneDNN notice or the CPU-feature notice
    assert "oneDNN custom operations are on" in loud.stderr or "cpu_feature_guard" in loud.stderr, loud.stderr
    assert logs.wants_verbose(["-v", "pretrain"]) and not logs.wants_verbose(["pretrain", "-v"])
    assert logs.wants_verbose(["eval"]) is False


def test_line_format_and_bar_only_on_a_terminal(tmp_path):
    line = format_line(20, 100, {"loss": 0.693147, "accuracy": 0.5, "learning_rate": 1e-4, "grad_norm": 1.0,
                                 "grad_norm/layer_0": 0.5, "nonfinite_total": 0.0, "tokens_per_sec": 8192.0,
                                 "examples_per_sec": 64.0}, 65.4)
    assert line == "step 20/100 | loss 0.6931 | accuracy 0.5 | lr 0.0001 | 64.0 examples/s | ETA 0:01:05"
    assert format_line(1, 2, {"loss": 1.0}, math.inf).endswith("| loss 1.0000 | ETA ?")
    with open(tmp_path / "log.txt", "w") as f:
        assert not use_progress_bar(True, f)  # a file (SLURM log) gets lines
    assert not use_progress_bar(False, sys.stderr)
