"""How many streams a host runs for its rows (ptm_jax.parallel.feed.rows_batches): on a TPU-like mesh a host's
rows are several blocks; evaluation reads one stream per block (row r = example r), training reads one stream of
a whole share (the rows may hold any examples of their global batch)."""
from __future__ import annotations

import itertools

import numpy as np

from ptm_jax.parallel.feed import rows_batches

G, HOSTS = 32, 4


def host_rows(h: int) -> np.ndarray:
    # 8 devices of 4 rows: host h holds devices h and h + 4 (two blocks, half a batch apart)
    return np.concatenate([np.arange(4 * h, 4 * h + 4), np.arange(16 + 4 * h, 16 + 4 * h + 4)])


def counting_streams(opened: list):
    def open_share(i: int, n: int):
        opened.append((i, n))
        rows = G // n
        return ({"example_id": s * G + i * rows + np.arange(rows)} for s in itertools.count())

    return open_share


def test_evaluation_reads_a_stream_per_block_and_training_one_stream_per_host():
    exact, train = [], []
    for h in range(HOSTS):
        opened: list = []
        batches = list(itertools.islice(rows_batches(counting_streams(opened), host_rows(h), G), 3))
        assert opened == [(h, 8), (h + 4, 8)]
        assert [b["example_id"].tolist() for b in batches] == [(s * G + host_rows(h)).tolist() for s in range(3)]
        exact.append(batches)
        opened = []
        batches = list(itertools.islice(rows_batches(counting_streams(opened), host_rows(h), G, share=(h, HOSTS)), 3))
        assert opened == [(h, HOSTS)]
        train.append(batches)
    for s in range(3):  # every global batch holds exactly its examples either way
        want = list(range(s * G, (s + 1) * G))
        assert sorted(np.concatenate([t[s]["example_id"] for t in train]).tolist()) == want
        assert sorted(np.concatenate([e[s]["example_id"] for e in exact]).tolist()) == want
