"""Output folders written whole or not at all: staged beside their place, then renamed into it.

On a local disk the folder is written as ``.<name>.partial`` beside ``<name>`` and renamed in; on an object store
(gs://) it is written in place and committed by ``fs.MARKER``. Used by params directories (``export/params.py``),
Hugging Face folders (``export/hf_files.py``) and feature-head models."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import jax

from ptm_jax import fs
from ptm_jax.errors import ConfigError


def _barrier(name: str) -> None:
    from ptm_jax.parallel.distributed import barrier

    barrier(name)


def staging_dir(out: Path, overwrite: bool, shared: bool = False) -> Path:
    """``.<name>.partial`` beside ``out``, empty. ``shared``: every process calls this and gets the same
    path; process 0 makes it."""
    out = fs.path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise ConfigError(f"{out} already exists and is not empty; choose another output path or remove it")
    if fs.is_remote(out):  # no directory rename on an object store: write in place, the marker commits it
        if not shared or jax.process_index() == 0:
            fs.rmtree(out / fs.MARKER)  # readers treat ``out`` as absent from here on
            fs.rmtree(out)
        if shared:
            _barrier("ptm_params_stage")
        return out
    stage = out.parent / f".{out.name}.partial"
    if not shared or jax.process_index() == 0:
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir(parents=True)
    if shared:
        _barrier("ptm_params_stage")
    return stage


def commit_dir(stage: Path, out: Path, shared: bool = False) -> None:
    """Renames the finished staging folder into place (the old ``out``, if any, is removed first).
    ``shared``: every process calls this after its last write; process 0 renames once all have arrived, and
    all return after it has."""
    out = fs.path(out)
    if shared:
        _barrier("ptm_params_written")
    if fs.is_remote(out):
        if not shared or jax.process_index() == 0:
            fs.mark_complete(out)
    elif not shared or jax.process_index() == 0:
        if out.exists():
            old = out.parent / f".{out.name}.old"
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out, old)
            os.replace(stage, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(stage, out)
    if shared:
        _barrier("ptm_params_committed")
