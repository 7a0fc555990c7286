"""Where the test suite's time goes: a pytest plugin that writes one JSON line per test, and a summary of them.

Per test (its setup, call and teardown together, so a module fixture counts in the first test that uses it): wall
seconds, the process's CPU seconds, the CPU seconds of the subprocesses it waited for, the subprocesses it started,
and from ``jax.monitoring`` the XLA compiles of this process (count and seconds, and those under 1 s, which the
persistent compilation cache never keeps), that cache's hits and misses, and the seconds spent tracing and
lowering. The compiles inside subprocesses are not counted (their CPU time is).

    PYTHONPATH=$PWD:benchmarks PTM_SUITE_PROFILE=/tmp/prof python -m pytest -p suite_profile -n 2 --dist loadfile
    python benchmarks/suite_profile.py /tmp/prof            # by file, slowest first, and the totals
    python benchmarks/suite_profile.py /tmp/prof --tests 20  # the slowest 20 tests

Each xdist worker writes ``<dir>/<worker>.jsonl``; a run's summary reads every file in the folder.

With ``PTM_SUITE_PROFILE_PROGRAMS=1`` each worker also writes ``<dir>/<worker>.programs.jsonl``: one line per
program handed to XLA (``jax._src.compiler.compile_or_get_cached``, so persistent-cache hits are included at their
cost), with its name, seconds, the test, a hash of its StableHLO text and a hash of that text with every dense
constant blanked. ``--programs`` then says how much of the compile time went to programs compiled before in the
run (the same text: what a shared cache could still save) and to programs that differ from an earlier one only in
their constants (what passing those constants as arguments could save: learning-rate schedules, dropout rates).

    PTM_SUITE_PROFILE_PROGRAMS=1 PYTHONPATH=$PWD:benchmarks PTM_SUITE_PROFILE=/tmp/prof python -m pytest ...
    python benchmarks/suite_profile.py /tmp/prof --programs
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

EVENTS = {"/jax/core/compile/backend_compile_duration": "compile_s",
          "/jax/core/compile/jaxpr_trace_duration": "trace_s",
          "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s"}
SHORT_COMPILE_S = 1.0  # JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS in tests/conftest.py
COUNTS = {"/jax/compilation_cache/cache_hits": "cache_hits", "/jax/compilation_cache/cache_misses": "cache_misses"}


class _Counters:
    def __init__(self):
        self.values: dict[str, float] = defaultdict(float)
        self.subprocesses = 0
        self.installed = False

    def install(self) -> None:
        """Listeners on jax.monitoring (once jax is imported) and a count of subprocess.Popen starts."""
        if self.installed or "jax" not in sys.modules:
            return
        from jax import monitoring

        def on_duration(event: str, seconds: float, **_) -> None:
            if event in EVENTS:
                self.values[EVENTS[event]] += seconds
                if event == "/jax/core/compile/backend_compile_duration":
                    self.values["compiles"] += 1
                    if seconds < SHORT_COMPILE_S:  # below the persistent cache's threshold: never cached
                        self.values["short_compiles"] += 1
                        self.values["short_compile_s"] += seconds

        def on_event(event: str, **_) -> None:
            if event in COUNTS:
                self.values[COUNTS[event]] += 1

        monitoring.register_event_duration_secs_listener(on_duration)
        monitoring.register_event_listener(on_event)
        self.installed = True


COUNTERS = _Counters()
_popen_init = subprocess.Popen.__init__


def _counting_popen_init(self, *args, **kwargs):
    COUNTERS.subprocesses += 1
    _popen_init(self, *args, **kwargs)


class SuiteProfile:
    def __init__(self, folder: Path, worker: str):
        folder.mkdir(parents=True, exist_ok=True)
        self.out = open(folder / f"{worker}.jsonl", "a", buffering=1)
        self.worker = worker

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        COUNTERS.install()
        before = dict(COUNTERS.values)
        subs = COUNTERS.subprocesses
        t0, c0, ch0 = time.perf_counter(), time.process_time(), os.times()
        yield
        COUNTERS.install()  # jax may have been imported by this test
        ch1 = os.times()
        row = {"nodeid": item.nodeid, "worker": self.worker, "wall_s": time.perf_counter() - t0,
               "cpu_s": time.process_time() - c0,
               "children_cpu_s": (ch1.children_user + ch1.children_system) - (ch0.children_user + ch0.children_system),
               "subprocesses": COUNTERS.subprocesses - subs}
        for key in (*EVENTS.values(), *COUNTS.values(), "compiles", "short_compiles", "short_compile_s"):
            row[key] = COUNTERS.values.get(key, 0.0) - before.get(key, 0.0)
        self.out.write(json.dumps(row) + "\n")


_DENSE = re.compile(r"dense<[^>]*>")


def record_programs(path: Path):
    """Wraps jax's one entry to XLA compilation (or its persistent cache) to write a line per program to ``path``.
    Returns the function that undoes it."""
    from jax._src import compiler

    compile_or_get_cached = compiler.compile_or_get_cached
    out = open(path, "a", buffering=1)

    def recorded(backend, computation, *args, **kwargs):
        start, t0 = time.time(), time.perf_counter()
        try:
            return compile_or_get_cached(backend, computation, *args, **kwargs)
        finally:
            seconds = time.perf_counter() - t0
            text = computation.operation.get_asm(enable_debug_info=False)
            out.write(json.dumps({
                "name": str(computation.operation.attributes["sym_name"]).strip('"'), "s": seconds, "t": start,
                "test": os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0],
                "text": hashlib.sha1(text.encode()).hexdigest(),
                "shape": hashlib.sha1(_DENSE.sub("C", text).encode()).hexdigest()}) + "\n")

    compiler.compile_or_get_cached = recorded

    def undo() -> None:
        compiler.compile_or_get_cached = compile_or_get_cached
        out.close()

    return undo


def pytest_configure(config):
    folder = os.environ.get("PTM_SUITE_PROFILE")
    if not folder:
        return
    subprocess.Popen.__init__ = _counting_popen_init
    worker = getattr(config, "workerinput", {}).get("workerid", "main")
    config.pluginmanager.register(SuiteProfile(Path(folder), worker), "suite_profile_writer")
    if os.environ.get("PTM_SUITE_PROFILE_PROGRAMS") == "1":
        record_programs(Path(folder) / f"{worker}.programs.jsonl")


# ---------------------------------------------------------------------------------------------- summary

def read_rows(folder: Path, suffix: str = ".jsonl") -> list[dict]:
    """The per-test rows (``.jsonl``, not the programs files) or, with ``suffix=".programs.jsonl"``, the programs."""
    files = [f for f in sorted(folder.glob("*" + suffix))
             if suffix != ".jsonl" or not f.name.endswith(".programs.jsonl")]
    return [json.loads(line) for f in files for line in f.read_text().splitlines()]


def programs_summary(rows: list[dict], top: int = 12) -> str:
    """Compile seconds of the run: in all, to programs whose text was compiled before (in either worker), and to
    programs that match an earlier one once their constants are blanked; by program name. Rows are taken in the
    order they started (``t``), so a program both workers compiled counts as new where it was compiled first."""
    rows = sorted(rows, key=lambda r: r.get("t", 0.0))
    seen_text: set[str] = set()
    seen_shape: set[str] = set()
    by_name: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in rows:
        kind = "again" if r["text"] in seen_text else "constants" if r["shape"] in seen_shape else "new"
        seen_text.add(r["text"])
        seen_shape.add(r["shape"])
        for key in ("all", kind):
            by_name[r["name"]][key + "_s"] += r["s"]
            by_name[r["name"]][key + "_n"] += 1
    total = {k: sum(v[k] for v in by_name.values()) for k in ("all_s", "all_n", "again_s", "again_n",
                                                               "constants_s", "constants_n")}
    lines = [f"{'programs':>8} {'seconds':>8} {'again':>13} {'constants only':>15}  name"]
    for name, v in sorted(by_name.items(), key=lambda kv: -kv[1]["all_s"])[:top] + [("all", total)]:
        lines.append(f"{v['all_n']:8.0f} {v['all_s']:8.1f} {v['again_n']:5.0f} {v['again_s']:7.1f} "
                     f"{v['constants_n']:6.0f} {v['constants_s']:8.1f}  {name}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--tests", type=int, default=0, help="list the N slowest tests instead of files")
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--programs", action="store_true",
                    help="the compile seconds of repeated programs (PTM_SUITE_PROFILE_PROGRAMS=1 runs)")
    args = ap.parse_args(argv)
    if args.programs:
        print(programs_summary(read_rows(args.folder, ".programs.jsonl")))
        return 0
    rows = read_rows(args.folder)
    keys = ["wall_s", "cpu_s", "children_cpu_s", "compile_s", "compiles", "cache_hits", "cache_misses", "trace_s",
            "lower_s", "subprocesses"]
    if args.tests:
        print(f"{'wall s':>8} {'cpu s':>7} {'sub cpu':>7} {'compile s':>9} {'compiles':>8} {'hits':>5} {'subp':>4}  test")
        for r in sorted(rows, key=lambda r: -r["wall_s"])[:args.tests]:
            print(f"{r['wall_s']:8.1f} {r['cpu_s']:7.1f} {r['children_cpu_s']:7.1f} {r['compile_s']:9.1f} "
                  f"{r['compiles']:8.0f} {r['cache_hits']:5.0f} {r['subprocesses']:4d}  {r['nodeid']}")
        return 0
    files: dict[str, dict] = defaultdict(lambda: defaultdict(float))
    for r in rows:
        f = files[r["nodeid"].split("::")[0]]
        f["tests"] += 1
        for k in keys:
            f[k] += r[k]
        f["worker"] = r["worker"]
    total = {k: sum(f[k] for f in files.values()) for k in ["tests", *keys]}
    print(f"{'wall s':>8} {'cpu s':>7} {'sub cpu':>7} {'compile s':>9} {'compiles':>8} {'hits':>5} {'miss':>5} "
          f"{'trace s':>7} {'lower s':>7} {'subp':>4} {'tests':>5}  file (worker)")
    for name, f in sorted(files.items(), key=lambda kv: -kv[1]["wall_s"])[:args.files]:
        print(f"{f['wall_s']:8.1f} {f['cpu_s']:7.1f} {f['children_cpu_s']:7.1f} {f['compile_s']:9.1f} "
              f"{f['compiles']:8.0f} {f['cache_hits']:5.0f} {f['cache_misses']:5.0f} {f['trace_s']:7.1f} "
              f"{f['lower_s']:7.1f} {f['subprocesses']:4.0f} {f['tests']:5.0f}  {name} ({f['worker']})")
    print(f"{total['wall_s']:8.1f} {total['cpu_s']:7.1f} {total['children_cpu_s']:7.1f} {total['compile_s']:9.1f} "
          f"{total['compiles']:8.0f} {total['cache_hits']:5.0f} {total['cache_misses']:5.0f} {total['trace_s']:7.1f} "
          f"{total['lower_s']:7.1f} {total['subprocesses']:4.0f} {total['tests']:5.0f}  all ({len(files)} files)")
    by_worker: dict[str, float] = defaultdict(float)
    for r in rows:
        by_worker[r["worker"]] += r["wall_s"]
    short = sum(r.get("short_compile_s", 0.0) for r in rows)
    print(f"compiles under {SHORT_COMPILE_S:g} s (never cached): {sum(r.get('short_compiles', 0) for r in rows):.0f}, "
          f"{short:.1f} s of the {total['compile_s']:.1f} s")
    print("wall s by worker:", {w: round(s) for w, s in sorted(by_worker.items())})
    return 0


if __name__ == "__main__":
    sys.exit(main())
