"""Host batches -> global jax.Arrays on the mesh, with host-to-device prefetch on a background thread.

Each process passes only its own rows; ``jax.make_array_from_process_local_data`` assembles the global
array without gathering anything to one host.
"""
from __future__ import annotations

import queue
import threading
from typing import Any, Iterator

import jax
import numpy as np
from jax.sharding import Mesh

from ptm_jax.parallel.rules import batch_sharding


def to_global(batch: dict[str, np.ndarray], mesh: Mesh, keys: list[str] | None = None) -> dict[str, jax.Array]:
    keys = keys or list(batch)
    out = {}
    for k in keys:
        local = np.asarray(batch[k])
        sharding = batch_sharding(mesh, local.ndim)
        global_shape = (local.shape[0] * jax.process_count(),) + local.shape[1:]
        out[k] = jax.make_array_from_process_local_data(sharding, local, global_shape)
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
    (``depth=0``: built in the consumer's thread when asked for, ``train.prefetch_batches=0``)."""

    _END = object()

    def __init__(self, batches: Iterator[dict[str, np.ndarray]], mesh: Mesh, keys: list[str], depth: int = 2):
        self._stop = threading.Event()
        self._inline = None
        if depth <= 0:
            self._inline = ((b, to_global(b, mesh, keys)) for b in batches)
            return
        self._q: queue.Queue = queue.Queue(maxsize=depth)

        def work():
            try:
                for b in batches:
                    item = (b, to_global(b, mesh, keys))
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
