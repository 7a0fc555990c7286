"""Which rows of a global batch a process holds, from the batch sharding (ptm_jax.parallel.feed): the shares
that ``local_batches`` asks the objectives for, on host-ordered meshes (GPU clusters) and on meshes whose
processes hold non-contiguous rows (TPU pods). The multi-process runs themselves are in
tests/test_multihost_run.py."""
from __future__ import annotations

import jax
import numpy as np

from ptm_jax.config import MeshConfig
from ptm_jax.parallel.feed import local_batches, process_rows, row_shares
from ptm_jax.parallel.mesh import interleave_processes, make_mesh


def test_a_host_ordered_block_is_the_usual_process_share():
    # process 1 of 4 on a 32-row batch: rows 8..15 -> share 1 of 4, what the objectives always got
    assert row_shares(np.arange(8, 16), 32) == (4, [1])
    assert row_shares(np.arange(32), 32) == (1, [0])


def test_tpu_like_rows_become_aligned_blocks():
    # process 0 of a v5e-256 by JAX's device order: rows [0, 1, 16, 17] of a 32-row slice -> blocks 0 and 8
    # of 16 blocks of 2 rows
    assert row_shares(np.array([0, 1, 16, 17]), 32) == (16, [0, 8])
    # one row per device, every 4th row
    assert row_shares(np.array([2, 6, 10, 14]), 16) == (16, [2, 6, 10, 14])
    # runs of unequal length are cut into the largest blocks that align with all of them
    assert row_shares(np.array([0, 1, 2, 3, 8, 9]), 16) == (8, [0, 1, 4])


def test_one_process_holds_every_row_and_reads_its_objective_stream_as_is():
    def open_share(i, n, batch=16, batches=2):
        per = batch // n
        return iter([{"row": np.arange(k * batch + i * per, k * batch + (i + 1) * per)} for k in range(batches)])

    mesh = make_mesh(MeshConfig(data=-1))
    assert process_rows(mesh, 16).tolist() == list(range(16))
    rows = [b["row"].tolist() for b in local_batches(open_share, mesh, 16)]
    assert rows == [list(range(16)), list(range(16, 32))]
    # one process: the interleaved device order is JAX's own
    assert [d.id for d in interleave_processes(jax.devices())] == [d.id for d in jax.devices()]
