"""The order in which the suite's two xdist workers take the test files: the heaviest first.

With ``--dist loadfile`` each file goes whole to the next free worker, in the order of the work queue. xdist's
default queue puts the files with the most tests first, so a file of a few long tests (several real processes, a
TPU compile) could start last and leave the other worker idle while it ran. Heaviest first (longest processing time
first) ends the two workers within about one light file of each other. tests/conftest.py sorts the collected items
by ``file_rank`` and turns xdist's reordering off; within a file the order is pytest's own.

``FILE_COST_S``: CPU seconds of each heavy file (the worker's and its subprocesses'), from
``benchmarks/suite_profile.py`` over a whole run (docs/benchmarks.md, "The main job and the test suite from a
fresh clone"). Files not listed follow the listed ones, those with more tests first (xdist's own rule), then in
collection order. The figures only order the files: a stale figure costs balance, never a check."""
from __future__ import annotations

FILE_COST_S: dict[str, float] = {
    # 2026-12-02, the shared 2-core VM (load average 28-40); ">=": the file did not run to its end there
    "tests/test_conformance.py": 294.0,  # >=: 6 of its 8 objectives, four fits each
    "tests/test_multihost_run.py": 291.0,  # >=: its 2- and 4-process runs hit their 560 s timeout at that load
    "tests/test_resume.py": 225.0,
    "tests/test_one_row_shards.py": 222.0,
    "tests/test_gcs_run.py": 152.0,  # >=: its 2-process run failed to connect (Gloo timeout) at that load
    "tests/test_job_conformance_lineage.py": 150.0,
    "tests/test_tpu_compile.py": 140.0,  # >=: the v5e compile process when its 1,800 s timeout stopped it
    "tests/test_conformance_lineage.py": 125.0,
    "tests/test_preemption.py": 104.0,
}


def file_rank(items) -> dict[str, tuple]:
    """Sort key of each file of ``items``: listed files by cost (heaviest first), then the others by their number
    of tests (most first), then the first position in the collection."""
    first: dict[str, int] = {}
    count: dict[str, int] = {}
    for i, item in enumerate(items):
        path = item.nodeid.split("::")[0]
        first.setdefault(path, i)
        count[path] = count.get(path, 0) + 1
    return {path: (0, -FILE_COST_S[path], i) if path in FILE_COST_S else (1, -count[path], i)
            for path, i in first.items()}


def heaviest_first(items) -> None:
    """Sorts ``items`` in place: whole files, heaviest first; a file's own tests keep their order."""
    rank = file_rank(items)
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])
