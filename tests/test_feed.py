"""parallel/feed.Prefetcher: the same global batches, in order, with a background thread (depth >= 1) or built in
the consumer's thread (depth 0, train.prefetch_batches=0); errors of the source reach the consumer; closing it
tears the source down on the prefetch thread. And a script that reads a few batches of an objective's tf.data
stream outside ``fit`` and ends exits (data/numpy_streams.py)."""
import os
import subprocess
import sys
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


_READ_AND_END = """
import sys, types
from pathlib import Path
from ptm_jax.config import DataConfig, RunConfig, TokenizerConfig, TrainConfig
from ptm_jax.data.cache import build_or_load_cache
from ptm_jax.data.word_vocab import build_word_vocab
from ptm_jax.families.word2vec import FAMILY, Word2VecConfig, Word2VecDataConfig
corpus, out = Path(sys.argv[1]), Path(sys.argv[2])
vocab = build_word_vocab(corpus.read_text(encoding="utf-8").splitlines(), out, min_count=5, lower_case=True)
cache = build_or_load_cache(DataConfig(corpus=str(corpus), format="lines"), vocab, out / "cache")
cfg = RunConfig(objective="cbow", model=Word2VecConfig(vocab_size=vocab.vocab_size, dim=16),
                data=Word2VecDataConfig(window=5, sample=1e-3, negative=5, seed=1), tokenizer=TokenizerConfig(),
                train=TrainConfig(batch_size=512, steps=10, optimizer="sgd"))
obj = FAMILY.pretraining.objectives["cbow"](cfg, types.SimpleNamespace(tokenizer=vocab, train=cache, eval=None))
stream = obj.train_batches(0, 512, 0, 1)
for _ in range(3):
    batch = next(stream)  # a batch held to the end, as a script does (the hang needed one)
print("rows", len(batch["center"]), flush=True)
"""


def test_a_script_that_reads_some_tfdata_batches_and_ends_exits(shared_data, tmp_path):
    """The stream is left open, its tf.data map (Python, tf.numpy_function) still prefetching. Without the exit
    hook of data/numpy_streams.py the process hung at interpreter exit (tf.data's iterator destructor waiting
    for a map call that waited for the GIL) until this test's timeout."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "USE_TF": "0"}
    done = subprocess.run([sys.executable, "-c", _READ_AND_END, str(shared_data / "corpus/tinyshakespeare/input.txt"),
                           str(tmp_path)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "rows 512" in done.stdout
