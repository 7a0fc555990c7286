"""A failed install fails the test gate: `.ci/run` and the README's test command, typed as a user types it, both exit
non-zero when pip cannot install, and pytest never starts.

Each runs for real in a copy of the checkout's files that the command reads (README.md, pyproject.toml, .ci/run, requirements/):
a real venv is created, and a real ``pip install -r requirements/test.lock`` fails because its package index refuses every
connection (``PIP_INDEX_URL`` at a local port where nothing listens; no other index, find-links or config). No
package is installed. Bash does not stop a ``set -e`` script at a failure inside an ``a && b && c`` list, so
.ci/run runs the README's steps one a line (tests/test_readme.py keeps them equal to the README's command)."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import REPO
from test_readme import _commands


def _refusing_index() -> str:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there, connections are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/simple"


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """The files the README command and .ci/run read, as a fresh clone has them (one copy for both tests: the
    second reuses the venv the first created, which saves one ensurepip)."""
    root = tmp_path_factory.mktemp("clone") / "ptm_jax"
    (root / ".ci").mkdir(parents=True)
    for name in ("README.md", "pyproject.toml", ".ci/run"):
        shutil.copy2(REPO / name, root / name)
    shutil.copytree(REPO / "requirements", root / "requirements")
    return root


def _env() -> dict[str, str]:
    """This environment without any pip setting (a find-links folder or a config file could supply packages), with
    an index that refuses connections and no retries."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    return {**env, "PIP_INDEX_URL": _refusing_index(), "PIP_RETRIES": "0", "PIP_CONFIG_FILE": os.devnull,
            "PIP_NO_CACHE_DIR": "1"}


def test_ci_run_exits_non_zero_when_an_install_fails_and_never_starts_pytest(checkout):
    root = checkout
    done = subprocess.run(["bash", str(root / ".ci/run")], cwd=root.parent, env=_env(), capture_output=True,
                          text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-3000:]
    assert "Connection refused" in out or "Could not find a version" in out, out[-3000:]  # pip's own failure
    assert "test session starts" not in out, "pytest ran after a failed install"
    assert f"exit status {done.returncode}" in done.stdout  # the script reports the failed step's status
    assert (root / ".venv" / "bin" / "pip").is_file() and not (root / ".venv" / "libtpu").exists()


def test_the_readme_command_typed_by_hand_exits_non_zero_when_an_install_fails(checkout):
    """As typed at a prompt: no `set -e`, the list stops at the failing pip and its status is pip's."""
    root = checkout
    done = subprocess.run(["bash", "-c", _commands()[1]], cwd=root, env=_env(), capture_output=True, text=True,
                          timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-3000:]
    assert "test session starts" not in out and not (root / ".venv" / "transformers5").exists()
