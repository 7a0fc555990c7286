"""One stream of a host's rows (``objectives/base.py`` ``ReadsRows``): on a TPU mesh a host's devices hold several
blocks of each global batch; BERT, ERNIE 1.0 (knowledge masking and dialogue LM), GPT, XLNet and NNLM read them in
one stream, which must give exactly the examples and features of one stream per block (the exact row-to-example
mapping), for training from any start and for evaluation, and a loop fed through ``parallel/feed.py`` must use
it."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from ptm_jax.config_loading import load_config
from ptm_jax.objectives.base import ReadsRows
from ptm_jax.objectives.registry import build_objective
from ptm_jax.parallel import feed
from ptm_jax.train.stages import prepare_corpus

G = 16
# host 0 of 4 on a TPU-like mesh of 8 devices of 2 rows: devices 0, 1 and 4, 5, two blocks half a batch apart
ROWS = np.array([0, 1, 2, 3, 8, 9, 10, 11])

PRESETS = {  # held-out documents (dialogues for ernie_dlm) enough for a few evaluation batches
    "bert_tiny": ["data.eval_documents=2"],
    "gpt_tiny": ["data.eval_documents=2"],
    "ernie_tiny": ["data.eval_documents=2"],
    "ernie_dlm": ["objective=ernie_dlm", "data.eval_documents=40"],
    "xlnet_tiny": ["data.eval_documents=2"],
    "nnlm_tiny": ["data.eval_documents=2"],
}


@pytest.fixture(scope="module", params=sorted(PRESETS))
def objective(request, shared_data, tmp_path_factory):
    name = request.param
    preset = "ernie_tiny" if name == "ernie_dlm" else name
    out = tmp_path_factory.mktemp(name)
    cfg = load_config(preset, [f"data.corpus={shared_data / 'corpus/tinyshakespeare/input.txt'}", f"output_dir={out}",
                               *PRESETS[name]])
    obj = build_objective(cfg, prepare_corpus(cfg))
    assert isinstance(obj, ReadsRows)
    return obj


def take(stream, n: int | None) -> list[dict[str, np.ndarray]]:
    try:
        return list(itertools.islice(stream, n))
    finally:
        stream.close()


def assert_same(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want) and got
    for g, w in zip(got, want):
        assert sorted(g) == sorted(w)
        for k in w:
            np.testing.assert_array_equal(g[k], w[k], err_msg=k)


def rows_of(batches: list[dict], rows: np.ndarray) -> list[dict]:
    return [{k: v[rows] for k, v in b.items()} for b in batches]


@pytest.mark.parametrize("start", [0, 7 * G])
def test_one_stream_of_a_hosts_blocks_gives_those_rows_of_the_one_process_batches(objective, start):
    want = rows_of(take(objective.train_batches(start, G, 0, 1), 3), ROWS)
    opened = []

    def open_share(i, n):
        opened.append((i, n))
        return objective.train_batches(start, G, i, n)

    # as the loop feeds a ReadsRows objective: one stream of the host's rows, no per-block stream opened
    got = take(feed.rows_batches(open_share, ROWS, G, open_rows=lambda r: objective.train_row_batches(start, G, r)),
               3)
    assert opened == []
    assert_same(got, want)
    assert [b["example_id"].tolist() for b in got] == [(start + s * G + ROWS).tolist() for s in range(3)]


def test_evaluation_rows_of_a_hosts_blocks_equal_a_stream_per_block(objective):
    want = take(feed.rows_batches(lambda i, n: objective.eval_batches(G, i, n), ROWS, G), None)
    assert_same(take(objective.eval_row_batches(G, ROWS), None), want)
    assert_same(want, rows_of(take(objective.eval_batches(G, 0, 1), None), ROWS))


def test_rows_that_are_not_ascending_rows_of_the_batch_are_refused(objective):
    from ptm_jax.errors import ConfigError

    for bad in (np.array([3, 1]), np.array([0, G]), np.array([], np.int64)):
        with pytest.raises(ConfigError, match="ascending distinct row indices"):
            next(objective.train_row_batches(0, G, bad))
