"""The XLA flags of the test run, in one place: conftest.py sets them for the pytest processes, and the tests
that start ``ptm`` in subprocesses pass ``xla_flags(n)`` on.

``--xla_backend_optimization_level=0`` (LLVM -O0 in place of XLA's default -O2): the tiny models of the suite spend
most of their time in compilation, not in running. Paired runs of ``benchmarks/suite_flags.py --levels 1,0
--pairs 2`` (A B B A, each run with an empty compilation cache): tests/test_conformance.py, test_one_row_shards.py
and test_flops.py took a median 148.7 s at 0 against 181.7 s at 1 (both pairs 30-36 s apart); seven files of
real-model runs (MiniLM inference, the pretraining, ULMFiT and ELMo parities, resume, mesh equivalence, the
lineage jobs) 219.8 s against 238.6 s (15 and 23 s apart). Level 1 had replaced the default at 37.8 -> 26.0 s
for the conformance ``mlm`` fixture. Numerics are XLA's at any level: every comparison in the suite is between
two runs under the same flags or against a reference with a tolerance. A level already in ``XLA_FLAGS`` wins, for
the pytest processes and the ``ptm`` processes they start alike.

``--xla_cpu_use_fusion_emitters=false``: XLA CPU emits its fusions with the elemental IR emitter instead of its
newer MLIR fusion emitters, which compile the suite's tiny programs more slowly. Paired runs of
``benchmarks/suite_flags.py --env XLA_FLAGS=--xla_cpu_use_fusion_emitters=true
XLA_FLAGS=--xla_cpu_use_fusion_emitters=false --pairs 2`` over the compile-heavy files above and four of the
real-model files (78 passed in each run): a median 180.1 s with the flag against 251.8 s without (the pairs 74.4
and 69.0 s apart); CPU 337.6 against 463.8 s. The same rule holds: a value already in ``XLA_FLAGS`` wins and is
passed on.

``--xla_cpu_parallel_codegen_split_count=1 --xla_cpu_use_xnnpack=false`` (jaxlib's defaults: 32 and true): XLA CPU
emits each program as one LLVM module instead of splitting it into up to 32 compiled in parallel, and leaves dots
to its own emitter instead of rewriting them into XNNPACK calls. On the suite's tiny programs each split module and
each rewrite costs more compile time than it returns. Paired runs (70 passed in each; idle 2-core VM)::

    python benchmarks/suite_flags.py --pairs 2 \
        --env "XLA_FLAGS=--xla_cpu_parallel_codegen_split_count=32 --xla_cpu_use_xnnpack=true" \
              "XLA_FLAGS=--xla_cpu_parallel_codegen_split_count=1 --xla_cpu_use_xnnpack=false" \
        tests/test_conformance.py tests/test_one_row_shards.py tests/test_flops.py tests/test_resume.py \
        tests/test_cli_e2e.py

a median 159.3 s against 174.0 s of wall, both pairs in favour (by 22.9 and 6.6 s); CPU 298.5 against 315.4 s.

``--xla_cpu_enable_concurrency_optimized_scheduler=false`` (jaxlib's default: true): XLA CPU schedules each program
with its default scheduler instead of the one that orders operations for concurrent execution. The same five files,
``--env XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=true
XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=false --pairs 2`` on top of the flags above: a median
145.7 s against 149.7 s, both pairs in favour (by 4.4 and 3.5 s); CPU 274.4 against 284.5 s.
"""
from __future__ import annotations

import os
import re

DEFAULTS = {"--xla_backend_optimization_level": "0", "--xla_cpu_use_fusion_emitters": "false",
            "--xla_cpu_parallel_codegen_split_count": "1", "--xla_cpu_use_xnnpack": "false",
            "--xla_cpu_enable_concurrency_optimized_scheduler": "false"}
"""The test processes' XLA flags and their values when ``XLA_FLAGS`` does not set them."""


def _resolved(name: str) -> str:
    """``name=value``: the value the run was started with (in ``XLA_FLAGS``, as benchmarks/suite_flags.py passes
    it), else the default; the pytest processes and their ``ptm`` subprocesses then compile alike."""
    found = re.search(rf"{re.escape(name)}=(\S+)", os.environ.get("XLA_FLAGS", ""))
    return f"{name}={found.group(1) if found else DEFAULTS[name]}"


TEST_FLAGS = [_resolved(name) for name in DEFAULTS]


def xla_flags(devices: int = 8, fusion_emitters: bool | None = None) -> str:
    """XLA_FLAGS for a test process with ``devices`` virtual CPU devices. ``fusion_emitters=True`` gives a process
    XLA CPU's default emitters, for the checks of bit-equality between differently structured programs that hold
    under jaxlib's default codegen (a user's CPU run) but not under the elemental emitter: tests/test_multi_step.py's
    ``ptm pretrain`` at 3 steps a call against 1 (fastText's groups, the NNLM with Adam) differed there in the last
    bits (0.08% and 30% of the values of the first parameter array compared)."""
    flags = [f"--xla_force_host_platform_device_count={devices}", *TEST_FLAGS]
    if fusion_emitters is not None:
        flags = [f for f in flags if not f.startswith("--xla_cpu_use_fusion_emitters=")]
        flags.append(f"--xla_cpu_use_fusion_emitters={str(fusion_emitters).lower()}")
    return " ".join(flags)
