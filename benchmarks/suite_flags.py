"""The test suite (or some of its files) under two settings, in alternating paired runs.

Each run is the README's pytest invocation (``python -m pytest -n 2 --dist loadfile``) on the given test files in
a fresh process tree with an empty compilation cache of its own (tests/conftest.py keys the cache folder by xdist's
run id). A side is either an LLVM level (``--levels``: ``--xla_backend_optimization_level=<level>`` in
``XLA_FLAGS``, which tests/xla_env.py passes on to every ``ptm`` process the tests start) or environment
variables (``--env``: ``NAME=VALUE`` assignments separated by ``;``, which the pytest processes and every
process they start inherit) or the number of xdist workers (``--workers``: the ``-n`` of each side's runs, 2 in
the others). The order is A B B A A B ... so that a drift of the machine's load falls on both
sides alike. Per run: wall seconds, CPU seconds of the whole tree (user + system of every waited-for descendant)
and pytest's summary line; then the median of each side and the paired differences.

    python benchmarks/suite_flags.py --levels 1,0 --pairs 2 tests/test_resume.py tests/test_elmo.py
    python benchmarks/suite_flags.py --env JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=1 \
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 --pairs 2 tests/test_resume.py
    python benchmarks/suite_flags.py --workers 2,3 --pairs 1 tests

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


def side_env(side: str, kind: str) -> dict:
    """The environment of one side: this process's, with the level put into ``XLA_FLAGS`` (``kind`` "level") or
    the ``NAME=VALUE;...`` assignments applied (``kind`` "env"); unchanged for ``kind`` "workers"."""
    env = dict(os.environ)
    if kind == "level":
        flags = re.sub(r"--xla_backend_optimization_level=\d+", "", env.get("XLA_FLAGS", ""))
        env["XLA_FLAGS"] = f"{flags} --xla_backend_optimization_level={side}".strip()
    elif kind == "env":
        env.update(assignments(side))
    return env


def assignments(side: str) -> dict:
    """``NAME=VALUE;NAME=VALUE`` -> a dict; a clear exit on anything else."""
    out = {}
    for item in filter(None, (x.strip() for x in side.split(";"))):
        name, eq, value = item.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            sys.exit(f"suite_flags: --env takes NAME=VALUE assignments separated by ';' (got {item!r} in {side!r})")
        out[name] = value
    if not out:
        sys.exit(f"suite_flags: --env side {side!r} sets no variable")
    return out


def pytest_command(side: str, kind: str, files: list[str]) -> list[str]:
    """The README's pytest invocation on ``files``, with the side's worker count (``kind`` "workers") or 2."""
    workers = side if kind == "workers" else "2"
    return [sys.executable, "-m", "pytest", "-q", "-n", workers, "--dist", "loadfile", "-p", "no:cacheprovider",
            *files]


def run_once(side: str, kind: str, files: list[str], log: Path) -> dict:
    """One pytest run of ``files`` with one side's setting; its wall and CPU seconds and its summary."""
    env = side_env(side, kind)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with log.open("w") as out:
        code = subprocess.call(pytest_command(side, kind, files), cwd=ROOT, env=env, stdout=out,
                               stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    found = SUMMARY.findall(log.read_text(errors="replace"))
    return {"side": side, "wall": wall, "cpu": cpu, "exit": code, "summary": found[-1] if found else "(none)"}


def order(sides: tuple[str, str], pairs: int) -> list[str]:
    """A B B A A B B A ...: each pair's first side alternates."""
    a, b = sides
    return [x for i in range(pairs) for x in ((a, b) if i % 2 == 0 else (b, a))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--levels", help="the two LLVM levels, e.g. 1,0")
    which.add_argument("--env", nargs=2, metavar=("A", "B"),
                       help="the two sides' environment variables, each NAME=VALUE[;NAME=VALUE...]")
    which.add_argument("--workers", help="the two sides' numbers of xdist workers (pytest -n), e.g. 2,3")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--logs", default="runs/suite_flags", help="folder for each run's pytest output")
    ap.add_argument("files", nargs="+", help="test files or folders (paths from the repository root)")
    args = ap.parse_args()
    if args.levels is not None:
        kind, sides = "level", args.levels.split(",")
        if len(sides) != 2 or not all(x.strip().isdigit() for x in sides):
            sys.exit(f"suite_flags: --levels must be two integers separated by a comma, e.g. 1,0 (got {args.levels!r})")
        a, b = (x.strip() for x in sides)
    elif args.workers is not None:
        kind, sides = "workers", args.workers.split(",")
        if len(sides) != 2 or not all(x.strip().isdigit() and int(x) > 0 for x in sides):
            sys.exit(f"suite_flags: --workers must be two positive integers separated by a comma, e.g. 2,3 "
                     f"(got {args.workers!r})")
        a, b = (x.strip() for x in sides)
    else:
        kind, (a, b) = "env", args.env
        assignments(a), assignments(b)  # checked before any run
    label = {a: "A", b: "B"} if a != b else {a: "A"}
    missing = [f for f in args.files if not (ROOT / f).exists()]
    if missing:
        sys.exit(f"suite_flags: no such test file: {', '.join(missing)} (give paths from {ROOT})")
    logs = ROOT / args.logs
    logs.mkdir(parents=True, exist_ok=True)
    runs = []
    print(f"A: {a}\nB: {b}", flush=True)
    for i, side in enumerate(order((a, b), args.pairs)):
        r = run_once(side, kind, args.files, logs / f"run{i}_{label[side]}.txt")
        runs.append(r)
        print(f"run {i}: {label[side]} wall {r['wall']:.1f} s, cpu {r['cpu']:.1f} s, exit {r['exit']}: {r['summary']}",
              flush=True)
    ok = [r for r in runs if r["exit"] == 0]
    for name in (a, b):
        side = [r for r in ok if r["side"] == name]
        if side:
            wall = statistics.median(r["wall"] for r in side)
            print(f"{label[name]}: {len(side)} passing runs, median wall {wall:.1f} s,"
                  f" median cpu {statistics.median(r['cpu'] for r in side):.1f} s")
    summaries = {r["summary"] for r in ok}
    if len(summaries) > 1:
        print(f"the passing runs' summaries differ: {sorted(summaries)}")
    diffs = []
    for i in range(args.pairs):
        pair = {r["side"]: r for r in runs[2 * i:2 * i + 2]}
        if all(r["exit"] == 0 for r in pair.values()):
            diffs.append(round(pair[a]["wall"] - pair[b]["wall"], 1))
    print(f"{args.pairs} pairs, {len(runs) - len(ok)} failed runs; wall of A minus B, pair by pair: {diffs}")
    if len(ok) < len(runs) or len(summaries) > 1:
        sys.exit(f"suite_flags: the runs are not comparable (logs in {logs})")


if __name__ == "__main__":
    main()
