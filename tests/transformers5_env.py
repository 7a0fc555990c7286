"""Where transformers 5 is, for the tests that load ptm_jax's exports in it and import what it saves.

transformers 5 is PyTorch only and the test extra pins 4.57 (the last with Flax classes), so version 5 lives in a
folder of its own that the README's test command fills (``pip install --target .venv/transformers5``) and only the
check processes (tests/transformers5_check.py) put first on their path, on the same torch; as libtpu does
(tests/libtpu_env.py). ``PTM_TRANSFORMERS5_PYTHON`` names the python of another environment instead."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRANSFORMERS5 = "PTM_TRANSFORMERS5_PYTHON"
TRANSFORMERS5_DIR = REPO / ".venv" / "transformers5"
TRANSFORMERS5_MISSING = (
    "transformers 5 is not installed: `pip install --target .venv/transformers5 -r "
    f"requirements/transformers5.lock` (the README's test command does), or set {TRANSFORMERS5} to the python of "
    "an environment with transformers>=5, torch, "
    "sentencepiece and protobuf")


def transformers5() -> tuple[str, dict[str, str]] | None:
    """(python, environment) of a transformers 5 process, or None when there is none."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XLA_FLAGS")}
    if os.environ.get(TRANSFORMERS5):
        return os.environ[TRANSFORMERS5], env
    if (TRANSFORMERS5_DIR / "transformers").is_dir():
        return sys.executable, {**env, "PYTHONPATH": str(TRANSFORMERS5_DIR)}
    return None


def run_transformers5_check(python: str, env: dict[str, str], spec: Path) -> list[dict]:
    """Runs tests/transformers5_check.py on ``spec`` and returns its report lines."""
    p = subprocess.run([python, str(Path(__file__).with_name("transformers5_check.py")), str(spec)],
                       capture_output=True, text=True, timeout=1200, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
