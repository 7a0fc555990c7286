"""parallel/feed.Prefetcher: the same global batches, in order, with a background thread (depth >= 1) or built in
the consumer's thread (depth 0, train.prefetch_batches=0); errors of the source reach the consumer; closing it
tears the source down on the prefetch thread."""
import threading

import jax
import numpy as np
import pytest

from ptm_jax.config import MeshConfig
from ptm_jax.parallel.feed import Prefetcher
from ptm_jax.parallel.mesh import make_mesh


def _batches(n):
    for i in range(n):
        yield {"input_ids": np.full((8, 4), i, np.int32), "labels": np.arange(8, dtype=np.int32) + i}


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_every_batch_arrives_in_order_and_sharded(depth):
    mesh = make_mesh(MeshConfig(8, 1, 1))
    got = list(Prefetcher(_batches(5), mesh, ["input_ids", "labels"], depth=depth))
    assert len(got) == 5
    for i, (host, glob) in enumerate(got):
        assert (host["input_ids"] == i).all()
        np.testing.assert_array_equal(np.asarray(glob["labels"]), np.arange(8) + i)
        assert len(glob["input_ids"].sharding.device_set) == 8


@pytest.mark.parametrize("depth", [0, 2])
def test_an_error_of_the_source_reaches_the_consumer(depth):
    def broken():
        yield from _batches(2)
        raise ValueError("corpus.txt line 7: bad bytes")

    feed = Prefetcher(broken(), make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1]), ["input_ids", "labels"],
                      depth=depth)
    assert next(feed)[0]["input_ids"][0, 0] == 0 and next(feed)[0]["input_ids"][0, 0] == 1
    with pytest.raises(ValueError, match="line 7"):
        next(feed)
    feed.close()


def test_close_tears_the_source_down_on_the_prefetch_thread_not_the_consumers():
    """A source's teardown (a tf.data iterator's can take seconds) runs in the prefetch thread once close() is
    called: the consumer is not the one that waits for it."""
    closed_in = []
    closed = threading.Event()

    def endless():
        try:
            i = 0
            while True:
                yield {"input_ids": np.full((8, 4), i, np.int32), "labels": np.arange(8, dtype=np.int32)}
                i += 1
        finally:
            closed_in.append(threading.current_thread().name)
            closed.set()

    source = endless()  # the caller keeps a reference, as train/loop.py's fit does until it returns
    feed = Prefetcher(source, make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1]), ["input_ids", "labels"],
                      depth=2)
    assert [int(next(feed)[0]["input_ids"][0, 0]) for _ in range(3)] == [0, 1, 2]
    assert not closed.is_set()
    feed.close()
    assert closed.wait(timeout=10)
    assert closed_in == ["ptm-prefetch"]
