"""Restart time with and without the persistent compilation cache (ptm_jax/parallel/compile_cache.py): the whole
`ptm compile` process (start-up, tracing, compilation or a cache load, the memory report), run as a fresh process
each time, as a restarted host runs it.

One priming run fills a fresh cache; then ``--pairs`` rounds each run once without the cache
(``PTM_COMPILE_CACHE=off``) and once with it, interleaved (A, B, A, B, ...). Prints every run's wall time and the
compile time ``ptm compile`` reports, whether JAX read the entry back (its warning when it cannot), the medians
and spreads, and the cache's size.

  python benchmarks/compile_cache_restart.py --device-type v5e:2x2 -c bert_tiny --pairs 2   # TPU compiler
  python benchmarks/compile_cache_restart.py --device-type cpu --mesh 4,1,1 -c bert_tiny     # CPU devices

For a TPU topology, libtpu must be importable (PYTHONPATH=.venv/libtpu), as for `ptm compile`.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def one_run(cmd: list[str], cache: str) -> dict:
    env = {**os.environ, "PTM_COMPILE_CACHE": cache, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    text = out.stdout + out.stderr
    m = re.search(r"compile time\s+([\d.]+) s", text)
    unread = re.search(r"Error reading persistent compilation cache entry[^\n]*", text)
    return {"cache": cache != "off", "wall_s": round(wall, 2), "compile_s": float(m.group(1)) if m else None,
            "rc": out.returncode, "cache_read_error": unread.group(0)[:240] if unread else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", default="bert_tiny")
    ap.add_argument("--device-type", default="v5e:2x2")
    ap.add_argument("--mesh", default=None)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    cmd = [sys.executable, "-m", "ptm_jax.cli", "compile", "-c", args.config, "--device-type", args.device_type,
           *(["--mesh", args.mesh] if args.mesh else ["mesh.data=-1"]), *args.overrides]
    cache = tempfile.mkdtemp(prefix="ptm-compile-cache-")
    try:
        prime = one_run(cmd, cache)
        print(json.dumps({"priming": True, **prime}), flush=True)
        runs = []
        for _ in range(args.pairs):
            for setting in ("off", cache):
                r = one_run(cmd, setting)
                runs.append(r)
                print(json.dumps(r), flush=True)
        size = sum(f.stat().st_size for f in Path(cache).rglob("*") if f.is_file())
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    for with_cache in (False, True):
        walls = [r["wall_s"] for r in runs if r["cache"] == with_cache]
        comp = [r["compile_s"] for r in runs if r["cache"] == with_cache and r["compile_s"] is not None]
        print(f"{'with' if with_cache else 'without'} cache: wall median {statistics.median(walls):.1f} s "
              f"(min {min(walls):.1f}, max {max(walls):.1f}); compile median "
              f"{statistics.median(comp) if comp else float('nan'):.1f} s; {len(walls)} runs")
    print(f"cache size {size / 2**20:.1f} MiB; command: {' '.join(cmd[1:])}; load average {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
