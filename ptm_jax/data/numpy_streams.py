"""tf.data datasets read as numpy batches by generators that cannot hang the interpreter's exit.

Every family's examples are built in Python inside tf.data (``tf.numpy_function``). A tf.data iterator still
alive when the interpreter exits is destroyed during finalisation, and its destructor waits for the in-flight
map calls, which wait for a GIL that finalisation no longer hands to other threads: the process hangs (gdb: the
main thread in ``PrefetchDatasetOp::Dataset::Iterator::~Iterator``, a tf.data thread in the map). ``fit`` never
leaves one alive (its prefetch thread closes its source, parallel/feed.py); a script that reads a few batches of
an objective's ``train_batches`` and ends did, until each stream here was closed by an ``atexit`` hook, which
runs before finalisation, if it is still open then (tests/test_feed.py runs such a script).

A process with few rows per batch (many hosts) has its datasets build ``steps_per_item`` batches per element and
splits them here (``numpy_steps``), so a step's fixed cost is spread over ``GROUP_ROWS`` rows.
"""
from __future__ import annotations

import atexit
import threading
import weakref
from typing import Any, Iterator

import numpy as np

_open: weakref.WeakSet = weakref.WeakSet()
_lock = threading.Lock()


def numpy_batches(dataset: Any) -> Iterator[Any]:
    """The elements of a ``tf.data.Dataset`` as numpy (``as_numpy_iterator``), as a generator that is closed,
    and its tf.data iterator torn down, at exit if nobody closed it before."""
    stream = _stream(dataset)
    with _lock:
        _open.add(stream)
    return stream


def _stream(dataset: Any) -> Iterator[Any]:
    iterator = dataset.as_numpy_iterator()
    try:
        yield from iterator
    finally:
        del iterator  # the tf.data iterator is torn down here, in the closing thread


GROUP_ROWS = 512
"""Rows built per feature call: a process with fewer rows per batch builds ``GROUP_ROWS // rows`` consecutive
batches at once and splits them after (``steps_per_item``), so the fixed cost of a tf.data element and of the
TensorFlow feature graph is spread over as many rows whatever the number of processes."""


def steps_per_item(rows: int) -> int:
    return max(1, GROUP_ROWS // rows)


def numpy_steps(batches: Iterator[dict[str, np.ndarray]], rows: int) -> Iterator[dict[str, np.ndarray]]:
    """Numpy items of one or several consecutive local batches (a dataset that groups ``steps_per_item``
    batches per element) as local batches of ``rows`` rows (views, no copies): splitting in Python costs
    microseconds where a tf.data element costs about a millisecond."""
    try:
        for item in batches:
            n = len(next(iter(item.values())))
            if n == rows:
                yield item
                continue
            for lo in range(0, n, rows):
                yield {k: v[lo:lo + rows] for k, v in item.items()}
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()  # the tf.data iterator is torn down in the closing thread (data/numpy_streams.py)


@atexit.register
def _close_open_streams() -> None:
    with _lock:
        streams = list(_open)
    for stream in streams:
        try:
            stream.close()
        except ValueError:  # being read by another thread at this moment: that thread owns its teardown
            pass
