"""The fused CPU kernel of the sparse SGD step (``rows_cpu.cc``, an XLA FFI custom call): gather, scores,
sigmoid, row gradients and scatter of one batch in one pass, with the XLA path's batch semantics (the gradients
at the tables before the batch, the duplicate cap, the non-finite skip), for word2vec and fastText.

It is built at first use with the system's C++ compiler into a cache folder (``native.py``). Where no compiler
works, ``available()`` is False and says why once in a warning; ``model.kernel='auto'`` then runs the XLA path,
``model.kernel='cpu'`` is a ConfigError.

Where it runs (``applies``): the CPU backend and a one-device mesh, so the tables are whole in one process's
memory; on accelerators or sharded tables the XLA path (``train/step.py``) is the portable one.
"""
from __future__ import annotations

import functools
import logging
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.errors import ConfigError
from ptm_jax.families.word2vec import native

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("rows_cpu.cc")
TARGET = "ptm_embedding_rows_cpu"
MODES = {"skipgram": 0, "cbow": 1, "fasttext_skipgram": 2, "fasttext_cbow": 3}


@functools.cache
def _load() -> tuple[bool, str]:
    """(registered, why not): builds the library (``native.library``) and registers the FFI target once."""
    lib, why = native.library(SOURCE.name)
    if lib is None:
        return False, why
    try:
        jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.PtmEmbeddingRowsCpu), platform="cpu")
    except (AttributeError, ValueError, RuntimeError) as e:
        return False, f"the kernel did not register: {e}"
    return True, ""


def available() -> bool:
    ok, why = _load()
    if not ok:
        _warn_once(why)
    return ok


@functools.cache
def _warn_once(why: str) -> None:
    log.warning("the fused CPU kernel of word2vec/fastText is not available, the XLA path runs instead: %s", why)


def applies(kernel: str, needed_by: str = "model.kernel='cpu'", fix: str = "use model.kernel='auto'") -> bool:
    """Whether the step being traced runs the kernel under ``model.kernel`` = ``kernel``: 'auto' where it
    applies and builds, 'cpu' where it applies (else a ConfigError saying that ``needed_by`` needs it, and
    ``fix``), 'xla' never."""
    if kernel == "xla":
        return False
    mesh = jax.sharding.get_abstract_mesh()
    devices = int(np.prod(mesh.axis_sizes)) if mesh.axis_sizes else 1
    where = jax.default_backend() == "cpu" and devices == 1
    if kernel == "cpu":
        if not where:
            raise ConfigError(f"{needed_by} needs the CPU backend and a one-device mesh (the fused CPU kernel; "
                              f"here: backend {jax.default_backend()!r}, {devices} devices); {fix}")
        if not available():
            raise ConfigError(f"{needed_by}: {_load()[1]}; {fix}")
        return True
    return where and available()


def register_subwords(ids: np.ndarray, lengths: np.ndarray) -> int:
    """Gives the kernel fastText's subword table (``families/fasttext/subwords.py``: ``ids`` [vocab, width],
    ``lengths`` [vocab]), which its sequential updates read the units from, and returns the table's key for
    ``fused_step(subwords=)``: a hash of the contents, so the same table has the same key in every process and
    every trace (registering it again replaces it with the same arrays)."""
    import ctypes
    import hashlib

    ok, why = _load()
    if not ok:
        raise ConfigError(f"the fused CPU kernel is not available: {why}; use model.kernel='xla'")
    ids = np.ascontiguousarray(ids, np.int32)
    lengths = np.ascontiguousarray(lengths, np.int32)
    if ids.ndim != 2 or lengths.shape != ids.shape[:1] or not ids.size:
        raise ValueError(f"a subword table is ids [vocab, width] and lengths [vocab]; got {ids.shape}, "
                         f"{lengths.shape}")
    digest = hashlib.blake2b(ids.tobytes(), digest_size=8, key=str(ids.shape).encode())
    digest.update(lengths.tobytes())
    key = int.from_bytes(digest.digest(), "little") & (2 ** 62 - 1) or 1
    lib, _ = native.library(SOURCE.name)
    fn = lib.ptm_register_subwords
    fn.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    if fn(key, ids.ctypes.data, ids.shape[0], ids.shape[1], lengths.ctypes.data):
        raise ValueError(f"the kernel refused a subword table of shape {ids.shape}")
    return key


def _or_dummy(batch: dict, key: str, dtype, rows: int, ndim: int = 2) -> jax.Array:
    if key in batch:
        return batch[key]
    return jnp.zeros((rows,) + (1,) * (ndim - 1), dtype)


def fused_step(mode: str, tables: dict[str, jax.Array], batch: dict, step_size: jax.Array, *, block: int,
               cap: float, sequential: bool = False, parts: int = 1,
               subwords: int = 0) -> tuple[dict[str, jax.Array], jax.Array, dict, jax.Array]:
    """One sparse SGD step by the kernel: (updated tables, the summed loss, {table: squared norm of its capped
    gradient rows}, finite); ``sequential`` in ``parts`` parts (``model.sequential_parts``).
    ``tables``: 'input' and, where present, 'output' and 'hs_output'; ``batch``: the
    packed features (word2vec ``data.py``; fastText's batched updates add ``units``, ``unit_row``,
    ``unit_weight``, while its sequential ones read the units from the subword table of key ``subwords``,
    ``register_subwords``). The tables are updated in place when the caller donates them."""
    ok, why = _load()
    if not ok:
        raise ConfigError(f"the fused CPU kernel is not available: {why}; use model.kernel='xla'")
    rows = batch["center"].shape[0]
    d = tables["input"].shape[1]
    dummy = jnp.zeros((1, d), jnp.float32)
    has_out, has_hs = "output" in tables, "hs_output" in tables
    args = [tables["input"], tables.get("output", dummy), tables.get("hs_output", dummy),
            batch["center"], batch["center_weight"].astype(jnp.float32),
            _or_dummy(batch, "negatives", jnp.int32, rows), _or_dummy(batch, "negative_weight", jnp.float32, rows),
            _or_dummy(batch, "path", jnp.int32, rows), _or_dummy(batch, "code", jnp.float32, rows),
            _or_dummy(batch, "path_weight", jnp.float32, rows),
            batch["pair_input"], batch["pair_row"], batch["pair_weight"],
            _or_dummy(batch, "units", jnp.int32, rows), _or_dummy(batch, "unit_row", jnp.int32, rows),
            _or_dummy(batch, "unit_weight", jnp.float32, rows), jnp.asarray(step_size, jnp.float32)]
    out_types = [jax.ShapeDtypeStruct(a.shape, jnp.float32) for a in args[:3]]
    out_types.append(jax.ShapeDtypeStruct((5,), jnp.float32))
    call = jax.ffi.ffi_call(TARGET, out_types, input_output_aliases={0: 0, 1: 1, 2: 2}, has_side_effect=False)
    new_in, new_out, new_hs, stats = call(*args, mode=np.int64(MODES[mode]), block=np.int64(block),
                                          cap=np.float32(cap), has_out=has_out, has_hs=has_hs,
                                          sequential=bool(sequential), parts=np.int64(parts),
                                          subwords=np.int64(subwords))
    new = {"input": new_in}
    sq = {"input": stats[1]}
    if has_out:
        new["output"], sq["output"] = new_out, stats[2]
    if has_hs:
        new["hs_output"], sq["hs_output"] = new_hs, stats[3]
    return new, stats[0], sq, stats[4] > 0
