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

Backend: ``gs://`` goes through fsspec/gcsfs, not TensorFlow's GCS file system. etils picks ``tf.io.gfile``
whenever TensorFlow is importable, but TensorFlow's GCS client has its endpoints compiled in
(``https://www.googleapis.com/storage/v1/``) and so cannot be tested against a local emulator; gcsfs honours
``STORAGE_EMULATOR_HOST`` and uses the same Application Default Credentials (the TPU VM's service account).
We set ``EPATH_USE_TF=0`` (an etils switch, etils/epath/gpath.py ``_epath_use_tf``) unless the user set it,
and turn off gcsfs's listing cache: another process's files must be seen at once (GCS reads are strongly
consistent, a cached listing is not). Orbax writes arrays through tensorstore's own GCS driver
(``TENSORSTORE_GCS_HTTP_URL`` points it elsewhere) and everything else through epath, i.e. through here.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Sequence, Union

from etils import epath

os.environ.setdefault("EPATH_USE_TF", "0")  # read (and cached) by etils at the first gs:// operation
try:  # fsspec applies conf[protocol] as default kwargs when it builds the gcsfs file system
    import fsspec.config as _fsspec_config

    _fsspec_config.conf.setdefault("gs", {}).setdefault("use_listings_cache", False)
except ImportError:  # pragma: no cover - fsspec comes with etils[epath]
    pass

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


def absolute(p: PathLike) -> epath.Path:
    """The absolute path (``epath.Path.absolute`` would turn ``gs://b/x`` into ``<cwd>/gs:/b/x``)."""
    return path(p) if is_remote(p) else epath.Path(os.path.abspath(os.fspath(p)))


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
    """Writes the marker that commits ``directory``: call it after every other file is written. Its content
    is a fresh token, so a local copy can tell a re-published directory from the one it copied."""
    write_text_atomic(path(directory) / name, f"ok {uuid.uuid4().hex}\n")


def is_complete(directory: PathLike, name: str = MARKER) -> bool:
    return (path(directory) / name).exists()


def user_cache_dir(kind: str) -> Path:
    """The per-user cache folder for ``kind`` (compiled kernels, the embedded corpus): $XDG_CACHE_HOME/ptm_jax/kind,
    else ~/.cache/ptm_jax/kind. Created on use by the writer."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ptm_jax" / kind


def scratch_dir() -> Path:
    """Local disk for copies of remote files: $PTM_LOCAL_SCRATCH, else <tmp>/ptm_jax-scratch."""
    root = Path(os.environ.get("PTM_LOCAL_SCRATCH") or Path(tempfile.gettempdir()) / "ptm_jax-scratch")
    root.mkdir(parents=True, exist_ok=True)
    return root


def local_copy(directory: PathLike, marker: str | None = MARKER, only: Sequence[str] | None = None) -> Path:
    """A local directory with the contents of ``directory``: the directory itself when local, else a copy in
    ``scratch_dir()`` made once and re-made when the remote marker's token differs from the copy's (the
    directory was published again). With ``marker`` set, the remote directory must be complete; without it
    the copy is made afresh on each call. ``only``: copy just these files of the directory's top level (the
    tokenizer files of a params directory, without its weights)."""
    src = path(directory)
    if not is_remote(src):
        return Path(os.fspath(src))
    token = None
    if marker is not None:
        try:
            token = (src / marker).read_text()
        except FileNotFoundError:
            raise FileNotFoundError(f"{src} is not complete (no {marker} marker)") from None
    key = hashlib.sha256(f"{src} {sorted(only) if only is not None else ''}".encode()).hexdigest()[:16]
    dst = scratch_dir() / f"{src.name}-{key}"
    if token is not None and (dst / marker).is_file() and (dst / marker).read_text() == token:
        return dst
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", dir=dst.parent))
    try:
        if only is None:
            _download(src, tmp, skip=marker)
        else:
            for name in only:
                (tmp / name).write_bytes((src / name).read_bytes())
        if token is not None:
            (tmp / marker).write_text(token)
        _put_in_place(tmp, dst, marker, token)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dst


def _current(dst: Path, marker: str | None, token: str | None) -> bool:
    if token is None:  # no marker: any copy of the same source (made at the same moment by another process)
        return dst.is_dir()
    try:
        return (dst / marker).read_text() == token
    except OSError:
        return False


def _put_in_place(tmp: Path, dst: Path, marker: str | None, token: str | None) -> None:
    """Renames the finished copy ``tmp`` to ``dst``. Several processes of one host may race here: a current copy
    that another process put there first is kept (never removed under a reader), a stale one is moved aside."""
    for _ in range(3):
        try:
            os.replace(tmp, dst)  # fails while dst is a non-empty folder
            return
        except OSError:
            if _current(dst, marker, token):
                shutil.rmtree(tmp, ignore_errors=True)
                return
            old = dst.with_name(f".{dst.name}.old-{os.getpid()}")
            try:
                os.replace(dst, old)  # the stale copy goes aside (another process may have moved it already)
            except OSError:
                pass
            shutil.rmtree(old, ignore_errors=True)
    raise OSError(f"cannot put the local copy {tmp} in place at {dst}")


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
