"""The stored NSP pairing plan (data/pretraining/plan_store.py, nsp_arrays.py): vectorised planning equals the
per-document reference, records read by example id equal the replayed stream, the files are the same bytes
whoever builds them, and BERT's stream over a stored plan resumes and changes process count without changing
its examples."""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ptm_jax.data.pretraining import nsp, nsp_arrays, plan_store
from ptm_jax.data.pretraining.source import ArraySource
from ptm_jax.errors import DataError
from ptm_jax.families.bert.config import BertDataConfig

REPO = Path(__file__).resolve().parent.parent
FIELDS = ("doc", "a_first", "a_last", "b_doc", "b_first", "b_last", "is_random_next")


def random_source(num_docs: int, seed: int = 0, max_sentences: int = 30) -> ArraySource:
    rng = np.random.default_rng(seed)
    return ArraySource([[rng.integers(5, 200, int(rng.integers(1, 25)))
                         for _ in range(int(rng.integers(1, max_sentences)))] for _ in range(num_docs)])


def stream(source, cfg, seed, n, shuffle_block):
    out, total = [], 0
    for rec in nsp.iter_plan(source, cfg, seed, shuffle_block=shuffle_block):
        out.append(rec)
        total += len(rec)
        if total >= n:
            break
    return np.concatenate(out)[:n]


@pytest.mark.parametrize("max_seq_length,short_seq_prob", [(128, 0.1), (16, 0.5), (8, 1.0)])
def test_vectorised_planning_equals_plan_document_for_every_document(max_seq_length, short_seq_prob):
    source = random_source(50, seed=max_seq_length)
    table = nsp_arrays.SentenceTable(source)
    for seed, epoch in ((1, 0), (99, 7)):
        kw = dict(epoch=epoch, seed=seed, max_num_tokens=max_seq_length - 3, short_seq_prob=short_seq_prob)
        got = nsp_arrays.plan_documents(source, table, np.arange(50), **kw)
        ref = np.asarray([r[:7] for d in range(50) for r in nsp.plan_document(source, d, **kw)])
        assert len(got) == len(ref) > 50
        assert np.array_equal(np.stack([got[f] for f in FIELDS], 1), ref)


def test_vectorised_planning_replans_a_document_that_runs_out_of_draws():
    # one document: every "random next" draws another document 10 times in vain (the reference's loop), far more
    # draws than are taken up front, so the document is planned again one chunk at a time
    source = ArraySource([[np.arange(3) + 5 for _ in range(12)]])
    table = nsp_arrays.SentenceTable(source)
    kw = dict(epoch=0, seed=4, max_num_tokens=5, short_seq_prob=0.0)
    got = nsp_arrays.plan_documents(source, table, np.arange(1), **kw)
    ref = np.asarray([r[:7] for r in nsp.plan_document(source, 0, **kw)])
    assert ref[:, 6].sum() >= 4  # several random-next instances
    assert np.array_equal(np.stack([got[f] for f in FIELDS], 1), ref)


def test_records_by_example_id_equal_the_replayed_stream_over_two_cycles_of_passes():
    source, cfg = random_source(37, seed=5), BertDataConfig(max_seq_length=32)
    plan = plan_store.memory_plan(source, cfg, 5, chunk_docs=8, shuffle_block=100)
    assert plan.passes == nsp.PLAN_PASSES and len(plan.chunks) == 5
    n = 2 * plan.cycle + 333
    ref = stream(source, cfg, 5, n, shuffle_block=100)
    got = plan.records(np.arange(n))
    for name in ("index", "epoch") + FIELDS:
        assert np.array_equal(got[name], ref[name]), name
    assert got["epoch"][2 * plan.cycle] == 2 * nsp.PLAN_PASSES  # pass 20 is planned pass 0 again
    ids = np.random.default_rng(0).integers(0, n, 400)
    assert np.array_equal(plan.records(ids), got[ids])
    far = plan.records(4 * 10**8 + np.arange(2))  # cycle c of the passes is cycle 0 again
    near = got[4 * 10**8 % plan.cycle + np.arange(2)]
    assert all(np.array_equal(far[f], near[f]) for f in FIELDS)
    assert far["epoch"][0] == 4 * 10**8 // plan.cycle * nsp.PLAN_PASSES + near["epoch"][0]


_BUILD = """
import sys, numpy as np
sys.path.insert(0, {repo!r})
from tests.test_plan_store import random_source
from ptm_jax.data.pretraining import plan_store
from ptm_jax.families.bert.config import BertDataConfig
p, n = int(sys.argv[1]), int(sys.argv[2])
built = plan_store.build_plan(random_source(45, seed=3), BertDataConfig(max_seq_length=24), 7, sys.argv[3], "k", p, n,
                              chunk_docs=8)
print(built)
"""


def _build(directory: Path, count: int) -> list[int]:
    code = _BUILD.format(repo=str(REPO))
    procs = [subprocess.Popen([sys.executable, "-c", code, str(p), str(count), str(directory)], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for p in range(count)]
    outs = [proc.communicate(timeout=300) for proc in procs]
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, err[-3000:]
    return [int(out.split()[-1]) for out, _ in outs]


def test_plan_built_by_three_processes_is_byte_identical_to_one_built_by_one(tmp_path):
    assert _build(tmp_path / "three", 3) == [2, 2, 2]  # 6 chunks of 8 documents: c % 3 == p
    assert _build(tmp_path / "one", 1) == [6]
    names = sorted(p.name for p in (tmp_path / "one").iterdir())
    assert names == [plan_store.chunk_name(c, 6) for c in range(6)]
    assert sorted(p.name for p in (tmp_path / "three").iterdir()) == names
    for name in names:
        for f in (plan_store.RECORDS, plan_store.COUNTS, plan_store.META):
            assert (tmp_path / "one" / name / f).read_bytes() == (tmp_path / "three" / name / f).read_bytes()
    # a second build finds every chunk complete and builds nothing
    assert _build(tmp_path / "three", 2) == [0, 0]
    stored = plan_store.open_plan(tmp_path / "one", 45, 7, "k", chunk_docs=8)
    memory = plan_store.memory_plan(random_source(45, seed=3), BertDataConfig(max_seq_length=24), 7, chunk_docs=8)
    ids = np.arange(0, 3 * memory.cycle, 7)
    assert np.array_equal(stored.records(ids), memory.records(ids))


def test_open_plan_names_the_chunk_built_for_other_inputs(tmp_path):
    source, cfg = random_source(20, seed=2), BertDataConfig(max_seq_length=24)
    plan_store.build_plan(source, cfg, 1, tmp_path, "key-a", chunk_docs=8)
    with pytest.raises(DataError, match=r"chunk-000000-of-000003: built for other inputs"):
        plan_store.open_plan(tmp_path, 20, 1, "key-b", chunk_docs=8)
    (tmp_path / plan_store.chunk_name(1, 3) / plan_store.RECORDS).write_bytes(b"\0" * 10)
    with pytest.raises(DataError, match=r"chunk-000001-of-000003/records.bin: 10 bytes"):
        plan_store.open_plan(tmp_path, 20, 1, "key-a", chunk_docs=8)
    os.remove(tmp_path / plan_store.chunk_name(1, 3) / "COMPLETE")
    with pytest.raises(DataError, match=r"chunk-000001-of-000003: pairing plan chunk not built"):
        plan_store.open_plan(tmp_path, 20, 1, "key-a", chunk_docs=8)


def test_stream_over_a_stored_plan_resumes_and_moves_to_another_process_count_with_the_same_examples(tmp_path):
    from ptm_jax.families.bert.mlm_nsp_data import local_batches

    source, cfg, g = random_source(30, seed=9), BertDataConfig(max_seq_length=32), 24
    plan = plan_store.build_or_open(source, cfg, 3, tmp_path, "tokens-key", chunk_docs=8)
    assert json.loads(next(tmp_path.rglob("meta.json")).read_text())["passes"] == nsp.PLAN_PASSES
    kw = dict(seed=3, global_batch=g, vocab_size=300, epochs=None)
    steps = plan.cycle // g + 3  # past the end of the cycle of passes

    def take(start_step, p, count, n, plan=plan):
        return list(itertools.islice(local_batches(source, cfg, start_index=start_step * g, process_index=p,
                                                   process_count=count, plan=plan, **kw), n))

    whole = take(0, 0, 1, steps)
    assert [int(b["index"][0]) for b in whole] == [s * g for s in range(steps)]
    in_memory = take(0, 0, 1, steps, plan=None)  # the same stream planned in memory
    for a, b in zip(whole, in_memory):
        assert all(np.array_equal(a[k], b[k]) for k in a)
    cut = steps - 4
    resumed = take(cut, 0, 1, 4)
    parts = [take(cut, p, 4, 4) for p in range(4)]  # continued on 4 processes
    for s in range(4):
        ref = whole[cut + s]
        assert np.array_equal(resumed[s]["a_ids"], ref["a_ids"]) and np.array_equal(resumed[s]["index"], ref["index"])
        assert np.array_equal(np.concatenate([p[s]["index"] for p in parts]), ref["index"])
        assert np.array_equal(np.concatenate([p[s]["b_ids"] for p in parts]), ref["b_ids"])
        assert np.array_equal(np.concatenate([p[s]["is_random_next"] for p in parts]), ref["is_random_next"])


def test_masking_words_of_several_runs_of_examples_are_each_examples_own():
    # a process with few rows builds several consecutive local batches at once (numpy_streams.GROUP_ROWS), and a
    # TPU host's rows are several blocks: its example indices are runs of any lengths, and each example must
    # still get the words it gets alone
    import tensorflow as tf

    from ptm_jax.data.pretraining import masking

    alone = masking.philox_words(7, tf.constant(np.arange(100, 120)), 8, 0).numpy()
    runs = np.concatenate([np.arange(100, 104), np.arange(110, 114), np.arange(116, 120)])
    assert np.array_equal(masking.philox_words(7, tf.constant(runs), 8, 0).numpy(), alone[runs - 100])
    assert masking.philox_words(7, tf.constant(np.zeros(0, np.int64)), 8, 0).shape == (0, 8)
    uneven = np.array([101, 102, 105, 106, 107])
    assert np.array_equal(masking.philox_words(7, tf.constant(uneven), 8, 0).numpy(), alone[uneven - 100])
