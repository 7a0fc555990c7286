"""benchmarks/suite_flags.py: what each side of a paired run puts into the environment of the pytest processes it
starts, and its one-line errors for sides it cannot run."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import suite_flags  # noqa: E402


def test_an_env_side_sets_each_assignment_and_keeps_an_equals_sign_in_a_value(monkeypatch):
    monkeypatch.setenv("KEEP_ME", "1")
    env = suite_flags.side_env("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0; PTM_X=a=b", "env")
    assert env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
    assert env["PTM_X"] == "a=b"
    assert env["KEEP_ME"] == "1"


def test_a_level_side_replaces_the_level_already_in_xla_flags_and_keeps_the_other_flags(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=2")
    flags = suite_flags.side_env("0", "level")["XLA_FLAGS"].split()
    assert flags == ["--xla_force_host_platform_device_count=8", "--xla_backend_optimization_level=0"]


def test_a_workers_side_runs_pytest_with_its_worker_count_and_the_others_with_two(monkeypatch):
    monkeypatch.setenv("KEEP_ME", "1")
    assert suite_flags.side_env("3", "workers")["KEEP_ME"] == "1"
    three = suite_flags.pytest_command("3", "workers", ["tests/a.py"])
    assert three[three.index("-n") + 1] == "3" and three[-1] == "tests/a.py"
    for side, kind in (("A=1", "env"), ("0", "level")):
        command = suite_flags.pytest_command(side, kind, ["tests/a.py"])
        assert command[command.index("-n") + 1] == "2"
        assert command[:3] == [sys.executable, "-m", "pytest"] and "--dist" in command


def test_sides_alternate_a_b_b_a():
    assert suite_flags.order(("x", "y"), 3) == ["x", "y", "y", "x", "x", "y"]


@pytest.mark.parametrize("args, message", [
    (["--env", "A=1;B", "C=2"], "--env takes NAME=VALUE assignments separated by ';' (got 'B' in 'A=1;B')"),
    (["--env", "A=1", ";"], "--env side ';' sets no variable"),
    (["--levels", "1"], "--levels must be two integers separated by a comma, e.g. 1,0 (got '1')"),
    (["--workers", "2,0"], "--workers must be two positive integers separated by a comma, e.g. 2,3 (got '2,0')"),
])
def test_a_side_it_cannot_run_exits_1_with_one_line_saying_what_to_write_before_any_run(args, message, tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "suite_flags.py"), *args,
                          "--logs", str(tmp_path / "logs"), "tests/test_suite_flags.py"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip() == f"suite_flags: {message}"
    assert not (tmp_path / "logs").exists()
