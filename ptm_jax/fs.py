"""One file-system layer for every path the toolkit reads or writes: local disk and ``gs://`` alike.

Built on ``etils.epath`` (the layer orbax itself uses), so ``output_dir=gs://bucket/run`` keeps its scheme
everywhere (``pathlib.Path("gs://b/x")`` would silently become the local folder ``gs:/b/x``).

Commit rules (object stores have no atomic directory rename):
- a single file is written whole: locally through a temporary sibling and ``os.replace``; on an object store
  an object upload is already all-or-nothing;
- a directory is complete when its marker file (``COMPLETE`` unless named otherwise) exists; the marker is
  written last, and readers treat a directory without it as absent.

Libraries that need a real local file (memory-mapped token caches, the Rust and C++ tokenizers) work on a
local copy: ``local_copy`` downloads a remote directory once into ``scratch_dir()`` (keyed by its URL), and
``upload_tree`` publishes a locally built directory, marker last.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Union

from etils import epath

PathLike = Union[str, os.PathLike]
MARKER = "COMPLETE"
_REMOTE_SCHEMES = ("gs://", "s3://", "hf://")


def path(p: PathLike) -> epath.Path:
    """The path as an ``epath.Path`` (local paths stay local; ``gs://`` stays a bucket path)."""
    return p if isinstance(p, epath.Path) else epath.Path(p)


def is_remote(p: PathLike) -> bool:
    return str(p).startswith(_REMOTE_SCHEMES)


def to_str(p: PathLike) -> str:
    """The string form to hand to other libraries (orbax takes ``gs://`` strings as they are)."""
    return os.fspath(p) if not isinstance(p, str) else p


def exists(p: PathLike) -> bool:
    return path(p).exists()


def makedirs(p: PathLike) -> epath.Path:
    d = path(p)
    d.mkdir(parents=True, exist_ok=True)
    return d


def read_text(p: PathLike) -> str:
    return path(p).read_text()


def read_bytes(p: PathLike) -> bytes:
    return path(p).read_bytes()


def write_bytes_atomic(p: PathLike, data: bytes) -> None:
    """Writes the whole file or nothing: a reader never sees a half-written file."""
    target = path(p)
    if is_remote(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)  # an object upload is all-or-nothing
        return
    local = Path(os.fspath(target))
    local.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{local.name}.", suffix=".tmp", dir=local.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, local)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(p: PathLike, text: str) -> None:
    write_bytes_atomic(p, text.encode("utf-8"))


def rmtree(p: PathLike) -> None:
    d = path(p)
    if d.exists():
        d.rmtree() if d.is_dir() else d.unlink()


def mark_complete(directory: PathLike, name: str = MARKER) -> None:
    """Writes the marker that commits ``directory``: call it after every other file is written."""
    write_text_atomic(path(directory) / name, "ok\n")


def is_complete(directory: PathLike, name: str = MARKER) -> bool:
    return (path(directory) / name).exists()


def scratch_dir() -> Path:
    """Local disk for copies of remote files: $PTM_LOCAL_SCRATCH, else <tmp>/ptm_jax-scratch."""
    root = Path(os.environ.get("PTM_LOCAL_SCRATCH") or Path(tempfile.gettempdir()) / "ptm_jax-scratch")
    root.mkdir(parents=True, exist_ok=True)
    return root


def local_copy(directory: PathLike, marker: str | None = MARKER) -> Path:
    """A local directory with the contents of ``directory``: the directory itself when local, else a copy in
    ``scratch_dir()`` made once (re-made when the remote marker is newer than the copy's). With ``marker``
    set, the remote directory must be complete."""
    src = path(directory)
    if not is_remote(src):
        return Path(os.fspath(src))
    if marker is not None and not is_complete(src, marker):
        raise FileNotFoundError(f"{src} is not complete (no {marker} marker)")
    key = hashlib.sha256(str(src).encode()).hexdigest()[:16]
    dst = scratch_dir() / f"{src.name}-{key}"
    if marker is not None and (dst / marker).is_file():
        return dst
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", dir=dst.parent))
    try:
        _download(src, tmp, skip=marker)
        if marker is not None:
            (tmp / marker).write_text("ok\n")
        if dst.exists():
            shutil.rmtree(dst)
        os.replace(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dst


def _download(src: epath.Path, dst: Path, skip: str | None) -> None:
    for child in src.iterdir():
        if child.name == skip:
            continue
        if child.is_dir():
            (dst / child.name).mkdir()
            _download(child, dst / child.name, skip=None)
        else:
            (dst / child.name).write_bytes(child.read_bytes())


def upload_tree(local: PathLike, directory: PathLike, marker: str | None = MARKER) -> epath.Path:
    """Copies the local directory ``local`` to ``directory`` (local or remote); the marker goes last."""
    src, dst = Path(os.fspath(local)), path(directory)
    for f in sorted(src.rglob("*")):
        if f.is_file() and f.name != marker:
            target = dst / f.relative_to(src).as_posix()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(f.read_bytes())
    if marker is not None:
        mark_complete(dst, marker)
    return dst
