"""tf.data datasets read as numpy batches by generators that cannot hang the interpreter's exit.

Every family's examples are built in Python inside tf.data (``tf.numpy_function``). A tf.data iterator still
alive when the interpreter exits is destroyed during finalisation, and its destructor waits for the in-flight
map calls, which wait for a GIL that finalisation no longer hands to other threads: the process hangs (gdb: the
main thread in ``PrefetchDatasetOp::Dataset::Iterator::~Iterator``, a tf.data thread in the map). ``fit`` never
leaves one alive (its prefetch thread closes its source, parallel/feed.py); a script that reads a few batches of
an objective's ``train_batches`` and ends did, until each stream here was closed by an ``atexit`` hook, which
runs before finalisation, if it is still open then (tests/test_feed.py runs such a script).
"""
from __future__ import annotations

import atexit
import threading
import weakref
from typing import Any, Iterator

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


@atexit.register
def _close_open_streams() -> None:
    with _lock:
        streams = list(_open)
    for stream in streams:
        try:
            stream.close()
        except ValueError:  # being read by another thread at this moment: that thread owns its teardown
            pass
