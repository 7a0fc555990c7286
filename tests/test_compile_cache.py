"""Where JAX's persistent compilation cache goes (ptm_jax/parallel/compile_cache.py) and the versions line every
start logs (ptm_jax/versions.py). That a 2-process run stores its programs there: tests/test_multiprocess.py."""
from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys

from ptm_jax import versions
from ptm_jax.parallel.compile_cache import cache_dir


def test_on_by_default_for_multi_host_runs_at_a_path_every_host_reads():
    assert cache_dir("gs://b/runs/x", 64, "auto") == "gs://b/runs/x/compile_cache"
    assert cache_dir("gs://b/runs/x/", 2, "") is None  # empty: off
    assert cache_dir("/shared/runs/x", 2, "auto") == "/shared/runs/x/compile_cache"
    assert cache_dir("runs/x", 1, "auto") is None, "one process: off unless asked for"
    assert cache_dir("runs/x", 1, "/scratch/jax-cache") == "/scratch/jax-cache"
    assert cache_dir("gs://b/runs/x", 64, "gs://b/cache") == "gs://b/cache"
    for off in ("off", "0", "false", "none"):
        assert cache_dir("gs://b/runs/x", 64, off) is None


def test_an_explicit_path_turns_the_cache_on_for_ptm_compile_of_one_process(tmp_path):
    code = ("import jax; from ptm_jax.parallel import compile_cache; "
            f"print(compile_cache.enable('unused'), jax.config.jax_compilation_cache_dir)")
    env_out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**{k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"},
                                  "PTM_COMPILE_CACHE": str(tmp_path / "c"), "JAX_PLATFORMS": "cpu",
                                  "PYTHONPATH": str(versions.REPO)}, cwd=str(tmp_path), timeout=120)
    assert env_out.stdout.split() == [str(tmp_path / "c")] * 2, env_out.stderr[-2000:]
    assert (tmp_path / "c").is_dir()


def test_versions_line_names_the_pinned_libraries_and_the_commit():
    line = versions.line()
    assert line.startswith(f"versions: python {sys.version.split()[0]}, jax {importlib.metadata.version('jax')}")
    for name in ("jaxlib", "flax", "optax", "orbax-checkpoint"):
        assert f"{name} {importlib.metadata.version(name)}" in line
    git = subprocess.run(["git", "-C", str(versions.REPO), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                         text=True)
    if git.returncode == 0:
        assert f"commit {git.stdout.strip()}" in line
