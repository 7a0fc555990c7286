"""The C++ sources beside this module (``rows_cpu.cc``: the fused CPU kernel of the sparse SGD step, an XLA FFI
custom call; ``examples_cpu.cc``: the packed examples of a batch), compiled at first use and loaded with ctypes.

A library is built with the system's C++ compiler (``$CXX``, else ``g++``, ``c++`` or ``clang++``), with JAX's
FFI headers and this folder on the include path (``jax.ffi.include_dir()``; ``rows_math.h``), ``-O3
-march=native`` (without ``-march=native`` if that fails), into a cache folder: ``$PTM_KERNEL_CACHE``, else
``$XDG_CACHE_HOME/ptm_jax/kernels``, else ``~/.cache/ptm_jax/kernels``. The key covers the source, the headers
beside it, the JAX version, the compiler's version and the CPU's flags, so a changed source, header, toolchain or
machine builds anew; a finished library is moved into place
atomically, so concurrent processes (test workers, hosts sharing a home) share one. No compiler, or a failed
build, is not an error here: ``library`` returns None and why, and the callers fall back (``cpu_kernel.py``: the
XLA path; ``data.py``: the numpy examples).
"""
from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

from ptm_jax import fs

HERE = Path(__file__).resolve().parent


def cache_dir() -> Path:
    root = os.environ.get("PTM_KERNEL_CACHE")
    if root:
        return Path(root)
    return fs.user_cache_dir("kernels")


def compilers() -> list[str]:
    names = [os.environ["CXX"]] if os.environ.get("CXX") else []
    return [p for p in (shutil.which(n) for n in names + ["g++", "c++", "clang++"]) if p]


def _cpu_flags() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return platform.machine() + platform.processor()
    lines = [ln for ln in text.splitlines() if ln.startswith(("flags", "Features", "model name"))]
    return "\n".join(sorted(set(lines)))


def build(source: Path, compiler: str) -> Path:
    """The shared library of ``source`` built by ``compiler`` (cached); a RuntimeError with the compiler's output
    if it does not build."""
    import jax

    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60).stdout
    headers = [h.read_text() for h in sorted(source.parent.glob("*.h"))]  # what the source may include
    parts = [source.read_text(), *headers, jax.__version__, version, _cpu_flags()]
    key = hashlib.sha256("\n".join(parts).encode())
    out = cache_dir() / key.hexdigest()[:16] / f"lib{source.stem}.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    base = [compiler, "-O3", "-std=c++17", "-shared", "-fPIC", "-fopenmp-simd", "-I", jax.ffi.include_dir(),
            "-I", str(source.parent), str(source)]
    errors = []
    for extra in (["-march=native"], []):
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
        os.close(fd)
        try:
            run = subprocess.run(base + extra + ["-o", tmp], capture_output=True, text=True, timeout=600)
            if run.returncode == 0:
                os.replace(tmp, out)
                return out
            errors.append(f"{' '.join(base + extra)}: {run.stderr.strip()[-2000:]}")
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    raise RuntimeError("\n".join(errors))


@functools.cache
def library(name: str):
    """(ctypes.CDLL, '') of the source ``name`` beside this module, or (None, why not); once per process."""
    import ctypes

    found = compilers()
    if not found:
        return None, "no C++ compiler found (set $CXX, or install g++)"
    errors = []
    for compiler in found:
        try:
            return ctypes.cdll.LoadLibrary(str(build(HERE / name, compiler))), ""
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            errors.append(f"{compiler}: {e}")
    return None, f"{name} did not build: " + "; ".join(errors)
