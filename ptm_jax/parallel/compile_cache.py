"""JAX's persistent compilation cache, on by default for multi-host runs, so that a restart on the same slice
loads its compiled programs instead of compiling them again on every host while the slice is billed.

``PTM_COMPILE_CACHE`` chooses:
  auto (default)  on when the run has several processes, at ``<output_dir>/compile_cache``: a place every host
                  reads (a ``gs://`` output_dir, or a filesystem mounted on every node). JAX writes cache entries
                  from process 0 only (``jax._src.compiler._cache_write``) and every process reads them, so a
                  per-host scratch disk would leave every other host compiling.
  a path          on, there (local path or ``gs://...``), whatever the process count; also for ``ptm compile``.
  off             never.
``JAX_COMPILATION_CACHE_DIR`` set in the environment wins (JAX reads it itself). Programs that compile in under a
second are not stored (JAX's ``jax_persistent_cache_min_compile_time_secs``). The cache key covers the program,
the devices and the compiler (jaxlib, libtpu) versions, so a changed config, slice or version compiles anew.
The restart times with and without it: docs/scaling.md, "Compilation cache".
"""
from __future__ import annotations

import logging
import os

import jax

log = logging.getLogger(__name__)
_OFF = ("off", "0", "false", "no", "none")


def cache_dir(output_dir: str | None, process_count: int, setting: str | None = None) -> str | None:
    """Where the cache goes for this run, or None (off): the rule of the module docstring."""
    setting = (os.environ.get("PTM_COMPILE_CACHE", "auto") if setting is None else setting).strip()
    if not setting or setting.lower() in _OFF:
        return None
    if setting.lower() == "auto":
        if process_count <= 1 or not output_dir:
            return None
        return str(output_dir).rstrip("/") + "/compile_cache"
    return setting


def enable(output_dir: str | None) -> str | None:
    """Turns the persistent cache on where ``cache_dir`` says; returns the directory in use (None: off)."""
    configured = jax.config.jax_compilation_cache_dir
    if configured:  # JAX_COMPILATION_CACHE_DIR, or set by the caller
        log.info("compilation cache: %s (JAX_COMPILATION_CACHE_DIR)", configured)
        return configured
    path = cache_dir(output_dir, jax.process_count())
    if path is None:
        return None
    from ptm_jax import fs  # gs:// through gcsfs (JAX opens the directory with etils.epath)

    if not fs.is_remote(path):
        path = os.path.abspath(path)
        os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", path)
    log.info("compilation cache: %s (persistent; a restart with the same program and devices loads it instead "
             "of compiling)", path)
    return path
