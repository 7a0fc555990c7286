"""The README test command's installs, timed as CI runs them, as written and with extra ``pip install`` options.

Each run clones this repository's HEAD into a fresh temporary folder (``git clone``, as CI's clean clone) and runs
the README test command's steps there, one after the other under ``bash -e``, up to but not including pytest
(the venv, then every ``pip install``); side B inserts ``--pip-args`` after each ``pip install``. The order is
A B B A ... so that a drift of the machine's load falls on both sides alike. pip's own wheel cache is the
machine's, the same for both sides. Per run: wall seconds of the installs; then the median of each side and the
paired differences. The clones are removed.

    python benchmarks/install_time.py --pairs 1 --pip-args=--no-compile
"""
from __future__ import annotations

import argparse
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def install_steps(readme: str) -> list[str]:
    """The README test command's steps before pytest: its ``a && b && ...`` list split at the ``&&``s."""
    commands = re.findall(r"```bash\n(python3 -m venv .*?)\n```", readme)
    tests = [c for c in commands if "pytest" in c]
    if len(tests) != 1:
        sys.exit(f"install_time: expected one README command that runs pytest, found {len(tests)}")
    steps = [s.strip() for s in tests[0].split("&&")]
    return [s for s in steps if "pytest" not in s]


def with_pip_args(steps: list[str], pip_args: str) -> list[str]:
    """``pip_args`` inserted after every ``pip install`` of ``steps``."""
    return [s.replace("pip install ", f"pip install {pip_args} ", 1) if s.startswith("pip install ") else s
            for s in steps]


def run_once(steps: list[str]) -> float:
    """Wall seconds of ``steps`` in a fresh clone of HEAD (the clone is removed)."""
    with tempfile.TemporaryDirectory(prefix="install_time_") as tmp:
        clone = Path(tmp) / "repo"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        script = "set -e\n" + "\n".join(steps) + "\n"
        start = time.perf_counter()
        done = subprocess.run(["bash", "-c", script], cwd=clone, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode:
            sys.exit(f"install_time: a step failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
        return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pip-args", required=True, help="options side B adds to every pip install, e.g. --no-compile")
    ap.add_argument("--pairs", type=int, default=1)
    args = ap.parse_args()
    a = install_steps((ROOT / "README.md").read_text())
    b = with_pip_args(a, args.pip_args)
    print("A: as written\nB: pip install " + " ".join(shlex.quote(x) for x in shlex.split(args.pip_args)), flush=True)
    walls: dict[str, list[float]] = {"A": [], "B": []}
    for i in range(args.pairs):
        for side in ("A", "B") if i % 2 == 0 else ("B", "A"):
            walls[side].append(run_once(a if side == "A" else b))
            print(f"pair {i}: {side} {walls[side][-1]:.1f} s", flush=True)
    for side, w in walls.items():
        print(f"{side}: median {statistics.median(w):.1f} s over {len(w)} runs")
    print("A minus B, pair by pair:", [round(x - y, 1) for x, y in zip(walls["A"], walls["B"])])


if __name__ == "__main__":
    main()
