"""The test suite (or some of its files) under two XLA flag settings, in alternating paired runs.

Each run is the README's pytest invocation (``python -m pytest -n 2 --dist loadfile``) on the given test files in
a fresh process tree with an empty compilation cache of its own (tests/conftest.py keys the cache folder by xdist's
run id), with ``--xla_backend_optimization_level=<level>`` in ``XLA_FLAGS``: tests/xla_env.py passes that level on to
every ``ptm`` process the tests start. The order is A B B A A B ... so that a drift of the machine's load falls on
both sides alike. Per run: wall seconds, CPU seconds of the whole tree (user + system of every waited-for
descendant) and pytest's summary line; then the median of each side and the paired differences.

    python benchmarks/suite_flags.py --levels 1,0 --pairs 2 tests/test_resume.py tests/test_elmo.py

The two sides must pass and skip the same tests: a run with a failure counts in no median, and a failed run or
passing runs with different summaries make the script exit with status 1.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = re.compile(r"^=*\s*(\d+ (?:passed|failed).*?) in [\d.]+s", re.M)


def run_once(level: int, files: list[str], log: Path) -> dict:
    """One pytest run of ``files`` at LLVM level ``level``; its wall and CPU seconds and its summary."""
    env = dict(os.environ)
    flags = re.sub(r"--xla_backend_optimization_level=\d+", "", env.get("XLA_FLAGS", ""))
    env["XLA_FLAGS"] = f"{flags} --xla_backend_optimization_level={level}".strip()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with log.open("w") as out:
        code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile",
                                "-p", "no:cacheprovider", *files], cwd=ROOT, env=env, stdout=out,
                               stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    found = SUMMARY.findall(log.read_text(errors="replace"))
    return {"level": level, "wall": wall, "cpu": cpu, "exit": code, "summary": found[-1] if found else "(none)"}


def order(levels: tuple[int, int], pairs: int) -> list[int]:
    """A B B A A B B A ...: each pair's first side alternates."""
    a, b = levels
    return [x for i in range(pairs) for x in ((a, b) if i % 2 == 0 else (b, a))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="1,0", help="the two LLVM levels, e.g. 1,0")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--logs", default="runs/suite_flags", help="folder for each run's pytest output")
    ap.add_argument("files", nargs="+", help="test files (paths from the repository root)")
    args = ap.parse_args()
    try:
        a, b = (int(x) for x in args.levels.split(","))
    except ValueError:
        sys.exit(f"suite_flags: --levels must be two integers separated by a comma, e.g. 1,0 (got {args.levels!r})")
    missing = [f for f in args.files if not (ROOT / f).exists()]
    if missing:
        sys.exit(f"suite_flags: no such test file: {', '.join(missing)} (give paths from {ROOT})")
    logs = ROOT / args.logs
    logs.mkdir(parents=True, exist_ok=True)
    runs = []
    for i, level in enumerate(order((a, b), args.pairs)):
        r = run_once(level, args.files, logs / f"run{i}_O{level}.txt")
        runs.append(r)
        print(f"run {i}: O{level} wall {r['wall']:.1f} s, cpu {r['cpu']:.1f} s, exit {r['exit']}: {r['summary']}",
              flush=True)
    ok = [r for r in runs if r["exit"] == 0]
    for level in (a, b):
        side = [r for r in ok if r["level"] == level]
        if side:
            print(f"O{level}: {len(side)} passing runs, median wall {statistics.median(r['wall'] for r in side):.1f} s,"
                  f" median cpu {statistics.median(r['cpu'] for r in side):.1f} s")
    summaries = {r["summary"] for r in ok}
    if len(summaries) > 1:
        print(f"the passing runs' summaries differ: {sorted(summaries)}")
    diffs = []
    for i in range(args.pairs):
        pair = {r["level"]: r for r in runs[2 * i:2 * i + 2]}
        if all(r["exit"] == 0 for r in pair.values()):
            diffs.append(round(pair[a]["wall"] - pair[b]["wall"], 1))
    print(f"{args.pairs} pairs, {len(runs) - len(ok)} failed runs; wall of O{a} minus O{b}, pair by pair: {diffs}")
    if len(ok) < len(runs) or len(summaries) > 1:
        sys.exit(f"suite_flags: the runs are not comparable (logs in {logs})")


if __name__ == "__main__":
    main()
