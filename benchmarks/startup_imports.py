"""Process start-up: the imports every training process pays before its first step, with and without the two
import guards of ptm_jax (``ptm_jax/__init__.py``: no Keras 3 behind ``import tensorflow``; ``train/metrics.py``:
no PyTorch behind tensorboardX).

Each pair runs both children back to back in a fresh interpreter, in alternating order; the figures are the median
and range of wall and CPU seconds over the pairs. Usage::

    python benchmarks/startup_imports.py --pairs 5
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

BEFORE = """
import jax, tensorflow, tensorboardX
"""
AFTER = """
import ptm_jax, jax, tensorflow
from ptm_jax.train.metrics import _summary_writer_class
_summary_writer_class()
"""


def timed(code: str, env: dict) -> tuple[float, float, str]:
    t0, c0 = time.perf_counter(), os.times()
    done = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(sorted(m for m in ('keras', 'torch', "
                           "'sklearn', 'matplotlib') if m in sys.modules))"],
                          env=env, capture_output=True, text=True, check=True)
    c1 = os.times()
    cpu = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
    return time.perf_counter() - t0, cpu, done.stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=5)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    env.update(JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2")
    results: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
    loaded = {}
    for i in range(args.pairs):
        order = [("before", BEFORE), ("after", AFTER)]
        for name, code in order if i % 2 == 0 else order[::-1]:
            wall, cpu, mods = timed(code, env)
            results[name].append((wall, cpu))
            loaded[name] = mods
    for name, rows in results.items():
        walls, cpus = [w for w, _ in rows], [c for _, c in rows]
        print(f"{name:6s} wall median {statistics.median(walls):5.2f} s [{min(walls):.2f}-{max(walls):.2f}]  "
              f"cpu median {statistics.median(cpus):5.2f} s  also imported: {loaded[name]}")
    saved = [b[0] - a[0] for b, a in zip(results["before"], results["after"])]
    print(f"{args.pairs} pairs: wall saved per process start, median {statistics.median(saved):.2f} s; "
          f"{sum(s <= 0 for s in saved)} pairs saved nothing")


if __name__ == "__main__":
    main()
