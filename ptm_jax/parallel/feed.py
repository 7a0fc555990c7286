"""Host batches -> global jax.Arrays on the mesh, with host-to-device prefetch on a background thread.

Each process passes only its own rows; ``jax.make_array_from_process_local_data`` assembles the global
array without gathering anything to one host.

Which rows a process owns comes from the batch sharding itself (``process_rows``: the rows its devices hold,
from ``Sharding.devices_indices_map``), never from the process index. On GPU clusters these are one
contiguous block (process p: rows [p*B/P, (p+1)*B/P)); on TPU meshes they are not (by JAX's device order,
process 0 of a v5e-256 holds rows [0, 1, 16, 17] of a 512-row batch). ``make_array_from_process_local_data``
places a process's local rows on its shards in ascending global order (jax/_src/array.py, ``local_slice``),
so ``local_batches`` builds exactly those rows, in that order, from the objectives' streams: global row r of
every batch holds global example r, whatever the mesh, and ``gather_rows`` (``process_allgather``: a
reshard to replicated, rows in global order) returns the rows in example order. An objective that reads any
rows in one stream (``objectives/base.py`` ``ReadsRows``: BERT, ERNIE 1.0, GPT, XLNet, NNLM) gets the host's rows
at once; for the others a host runs one stream per block of its rows.
"""
from __future__ import annotations

import math
import queue
import threading
from typing import Any, Callable, Iterator

import jax
import numpy as np
from jax.sharding import Mesh

from ptm_jax.data.pretraining.source import row_runs
from ptm_jax.parallel.rules import batch_sharding, group_sharding


def process_rows(mesh: Mesh, global_rows: int, process_index: int | None = None) -> np.ndarray:
    """Global batch rows that ``process_index``'s devices hold (default: this process), ascending: the order
    in which ``jax.make_array_from_process_local_data`` fills them from a process's local rows. Rows held by
    several devices (replicated over ``tensor``) count once."""
    me = jax.process_index() if process_index is None else process_index
    rows: set[int] = set()
    for device, index in batch_sharding(mesh, 1).devices_indices_map((global_rows,)).items():
        if device.process_index == me:
            rows.update(range(*index[0].indices(global_rows)))
    return np.array(sorted(rows), np.int64)


def row_shares(rows: np.ndarray, global_rows: int) -> tuple[int, list[int]]:
    """``rows`` as equal aligned blocks of a global batch: ``(count, indices)`` such that blocks ``indices`` of
    ``count`` equal blocks, concatenated, are exactly ``rows``. A host-ordered mesh gives one block:
    ``(process_count, [process_index])``, the objectives' usual share."""
    rows = np.asarray(rows, np.int64)
    if rows.size == 0:
        raise ValueError("this process holds no rows of the batch")
    runs = row_runs(rows)
    size = math.gcd(global_rows, *(first for first, _ in runs), *(count for _, count in runs))
    indices = [int(r) // size for r in rows[::size]]
    assert np.array_equal(np.concatenate([np.arange(i * size, (i + 1) * size) for i in indices]), rows)
    return global_rows // size, indices


def local_batches(open_share: Callable[[int, int], Iterator[dict[str, np.ndarray]]], mesh: Mesh,
                  global_rows: int, axis: int = 0, exact: bool = True,
                  open_rows: Callable[[np.ndarray], Iterator[dict[str, np.ndarray]]] | None = None
                  ) -> Iterator[dict[str, np.ndarray]]:
    """This process's rows of successive global batches, in the order ``to_global`` places them.
    ``open_share(index, count)``: the objective's stream of share ``index`` of ``count`` (its
    ``train_batches``/``eval_batches`` with that process index and count). One share (host-ordered meshes)
    is the objective's stream itself; several are read in one stream by ``open_rows(rows)`` where given (a
    ``ReadsRows`` objective's ``train_row_batches``), else in step and concatenated along ``axis``, the rows'
    (1 for stacked batches, ``train_groups``).

    ``exact=False`` (training: the loss is a sum over the rows, so which device holds which example does not
    matter): a host whose rows are several blocks runs one stream, share r of H (H hosts, r its rank by first
    row), and its devices hold those examples. Every global batch still holds exactly its examples, whatever
    the number of hosts; only rows inside it move. ``exact=True`` (evaluation) keeps row r = example r."""
    rows = process_rows(mesh, global_rows)
    if exact:
        return rows_batches(open_share, rows, global_rows, axis, open_rows=open_rows)
    firsts = sorted(int(process_rows(mesh, global_rows, q)[0]) for q in range(jax.process_count()))
    return rows_batches(open_share, rows, global_rows, axis, share=(firsts.index(int(rows[0])), len(firsts)))


def rows_batches(open_share: Callable[[int, int], Iterator[dict[str, np.ndarray]]], rows: np.ndarray,
                 global_rows: int, axis: int = 0, share: tuple[int, int] | None = None,
                 open_rows: Callable[[np.ndarray], Iterator[dict[str, np.ndarray]]] | None = None
                 ) -> Iterator[dict[str, np.ndarray]]:
    """``local_batches`` for the global rows ``rows`` (ascending) of every batch; ``share=(r, H)``: one stream,
    share r of H, for rows that may hold any examples of the batch (``exact=False``); ``open_rows``: one
    stream of exactly ``rows``."""
    count, indices = row_shares(rows, global_rows)
    if len(indices) == 1:
        yield from open_share(indices[0], count)
        return
    if open_rows is not None and share is None:
        yield from open_rows(rows)
        return
    if share is not None:
        if global_rows % share[1] or global_rows // share[1] != len(rows):
            raise ValueError(f"{len(rows)} rows of {global_rows} are not one share of {share[1]} hosts")
        yield from open_share(*share)
        return
    for parts in zip(*[open_share(i, count) for i in indices]):
        yield {k: np.concatenate([p[k] for p in parts], axis=axis) for k in parts[0]}


def to_global(batch: dict[str, np.ndarray], mesh: Mesh, keys: list[str] | None = None,
              global_rows: int | None = None, stacked: bool = False) -> dict[str, jax.Array]:
    """This process's rows (``local_batches``) -> global arrays of ``global_rows`` rows (default: local rows x
    process count, right when no two processes hold the same rows). ``stacked``: each feature is a stack of
    batches, [k, rows, ...] (``train/multi_step.py``), and the rows are its second axis."""
    keys = keys or list(batch)
    lead = 1 if stacked else 0
    place = group_sharding if stacked else batch_sharding
    if jax.process_count() == 1 and (global_rows is None or global_rows == np.shape(batch[keys[0]])[lead]):
        # one process holds every row: one batched transfer (about half the host time of a call per feature)
        local = {k: np.asarray(batch[k]) for k in keys}
        return jax.device_put(local, {k: place(mesh, v.ndim) for k, v in local.items()})
    out = {}
    for k in keys:
        local = np.asarray(batch[k])
        rows = global_rows if global_rows is not None else local.shape[lead] * jax.process_count()
        shape = local.shape[:lead] + (rows,) + local.shape[lead + 1:]
        out[k] = jax.make_array_from_process_local_data(place(mesh, local.ndim), local, shape)
    return out


def host_value(x: Any) -> Any:
    """A replicated (or fully addressable) jax.Array -> numpy, on every process; pytrees map leafwise."""

    def one(a):
        if isinstance(a, jax.Array) and not a.is_fully_addressable:
            return np.asarray(a.addressable_data(0))
        return np.asarray(jax.device_get(a))

    return jax.tree.map(one, x)


def gather_rows(x: Any) -> Any:
    """A batch-sharded global jax.Array -> the full numpy array on every process (for eval predictions)."""
    from jax.experimental import multihost_utils

    def one(a):
        if isinstance(a, jax.Array) and not a.is_fully_addressable:
            return np.asarray(multihost_utils.process_allgather(a, tiled=True))
        return np.asarray(jax.device_get(a))

    return jax.tree.map(one, x)


class Prefetcher:
    """Iterates (host_batch, global_batch) pairs, ``depth`` batches ahead of the consumer on a background thread
    (``depth=0``: built in the consumer's thread when asked for, ``train.prefetch_batches=0``).

    ``close()`` stops the thread, and the thread closes the source (``batches.close()``, where it has one) on its
    way out: the teardown of a tf.data iterator waits for its in-flight map calls and its autotuner, 0.2 s to 9 s
    measured at the end of a word2vec ``fit`` (docs/benchmarks.md), which the consumer no longer waits for."""

    _END = object()

    def __init__(self, batches: Iterator[dict[str, np.ndarray]], mesh: Mesh, keys: list[str], depth: int = 2,
                 global_rows: int | None = None, stacked: bool = False):
        self._stop = threading.Event()
        self._inline = None
        if depth <= 0:
            self._inline = ((b, to_global(b, mesh, keys, global_rows, stacked)) for b in batches)
            return
        self._q: queue.Queue = queue.Queue(maxsize=depth)

        def work():
            try:
                for b in batches:
                    item = (b, to_global(b, mesh, keys, global_rows, stacked))
                    while not self._stop.is_set():
                        try:
                            self._q.put(item, timeout=0.1)
                            break
                        except queue.Full:
                            continue
                    if self._stop.is_set():
                        return
                self._q.put(self._END)
            except BaseException as e:  # surfaced in the consumer thread
                self._q.put(e)
            finally:
                close = getattr(batches, "close", None)
                if close is not None:
                    close()  # the source's teardown, off the consumer's thread

        self._thread = threading.Thread(target=work, daemon=True, name="ptm-prefetch")
        self._thread.start()

    def __iter__(self):
        return self

    def __next__(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        if self._inline is not None:
            return next(self._inline)
        item = self._q.get()
        if item is self._END:
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
