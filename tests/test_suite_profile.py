"""benchmarks/suite_profile.py's record of the programs a run compiles: two programs that differ only in a constant
share their blanked text and not their text; the summary counts a repeated program as "again" and a
constants-only variant as "constants", with their seconds."""
from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import suite_profile  # noqa: E402


def test_recorded_programs_that_differ_only_in_a_constant_share_their_blanked_text(tmp_path):
    path = tmp_path / "w.programs.jsonl"
    x = np.arange(5.0, dtype=np.float32)  # a host array: no program of its own
    undo = suite_profile.record_programs(path)
    try:
        jax.jit(lambda v: v * 3.0 + 1.0)(x).block_until_ready()
        jax.jit(lambda v: v * 7.0 + 1.0)(x).block_until_ready()
        jax.jit(lambda v: jnp.sin(v))(x).block_until_ready()
    finally:
        undo()
    rows = suite_profile.read_rows(tmp_path, ".programs.jsonl")
    assert [r["name"] for r in rows] == ["jit__lambda"] * 3
    assert rows[0]["text"] != rows[1]["text"] and rows[0]["shape"] == rows[1]["shape"]
    assert rows[2]["shape"] != rows[0]["shape"]
    assert all(r["s"] > 0 for r in rows) and rows[0]["t"] <= rows[1]["t"] <= rows[2]["t"]
    assert suite_profile.read_rows(tmp_path) == []  # the per-test reader leaves the programs file alone


def test_programs_summary_counts_repeats_and_constants_only_variants_in_the_order_they_started():
    rows = [{"name": "jit_step", "s": 0.5, "text": "a", "shape": "A", "t": 3.0},  # again: a cache hit's cost
            {"name": "jit_step", "s": 4.0, "text": "a", "shape": "A", "t": 1.0},  # first (the other worker's file)
            {"name": "jit_step", "s": 3.0, "text": "b", "shape": "A", "t": 2.0},  # constants only
            {"name": "jit_init", "s": 2.0, "text": "c", "shape": "C", "t": 4.0}]
    lines = suite_profile.programs_summary(rows).splitlines()
    step = next(line for line in lines if line.endswith("jit_step")).split()
    assert [float(v) for v in step[:6]] == [3, 7.5, 1, 0.5, 1, 3.0]
    total = lines[-1].split()
    assert total[-1] == "all" and [float(v) for v in total[:6]] == [4, 9.5, 1, 0.5, 1, 3.0]
