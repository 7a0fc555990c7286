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
    # a whole run of 09321f2 (2026-12-02, the 2-core VM, two workers, load average about 4 from the workers' own
    # subprocesses): 9,244 CPU-s over 135 files; every file of 60 CPU-s or more
    "tests/test_job_conformance.py": 882.0,
    "tests/test_multihost_run.py": 620.0,
    "tests/test_conformance.py": 499.0,
    "tests/test_tpu_compile.py": 377.0,
    "tests/test_job_conformance_lineage.py": 364.0,
    "tests/test_conformance_lineage.py": 339.0,
    "tests/test_lora.py": 291.0,
    "tests/test_gcs_run.py": 283.0,
    "tests/test_flops.py": 265.0,
    "tests/test_one_row_shards.py": 216.0,
    "tests/test_compare.py": 191.0,
    "tests/test_consert.py": 191.0,
    "tests/test_multi_step.py": 185.0,
    "tests/test_cost_model.py": 181.0,
    "tests/test_ernie_finetune.py": 168.0,
    "tests/test_mesh_equivalence_families.py": 167.0,
    "tests/test_mtdnn.py": 163.0,
    "tests/test_pretrain_parity.py": 160.0,
    "tests/test_bench.py": 155.0,
    "tests/test_cli_e2e.py": 148.0,
    "tests/test_launch_scripts.py": 147.0,
    "tests/test_preemption.py": 146.0,
    "tests/test_resume.py": 142.0,
    "tests/test_transfo_xl.py": 141.0,
    "tests/test_finetune_tasks.py": 120.0,
    "tests/test_feature_tasks.py": 119.0,
    "tests/test_multiprocess.py": 118.0,
    "tests/test_hf_cli.py": 116.0,
    "tests/test_mesh_equivalence.py": 108.0,
    "tests/test_numerical_health.py": 107.0,
    "tests/test_ulmfit.py": 105.0,
    "tests/test_xlnet_memory.py": 72.0,
    "tests/test_startup_scale.py": 66.0,
    "tests/test_squad_xlnet.py": 64.0,
    "tests/test_family_finetuning.py": 63.0,
    "tests/test_row_streams.py": 63.0,
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
