"""The XLA flags of the test run, in one place: conftest.py sets them for the pytest processes, and the tests
that start ``ptm`` in subprocesses pass ``xla_flags(n)`` on.

``--xla_backend_optimization_level=0`` (LLVM -O0 in place of -O2): the tiny models of the suite spend most of
their time in compiling, not in running (the suite's profile: 2,371 of the workers' 2,997 CPU-s in XLA
compilation). ``python -m pytest -n 0`` on a compile-bound selection (tests/test_job_conformance.py
``-k "task-bert or consert-gpt"``: two tiny pretrainings and two finetunings with their evaluations) and on the
most compute-bound file (tests/test_real_checkpoint.py, the real MiniLM's inference), alternating, 2 pairs on the
shared 2-core VM (load average 7-10): the first 115.7 and 105.4 user CPU-s at level 1, 81.8 and 94.6 at level 0
(wall 231 and 228 s against 136 and 134 s); the second 72.5 and 67.2 at level 1, 70.4 and 87.6 at level 0. Level 1
had replaced the default after a measurement on an older XLA (tests/test_conformance.py's mlm runs: 37.8 s at the
default level, 26.0 s at 1, 27.6 s at 0). Numerics are XLA's at any level: every comparison in the suite is
between two runs under the same flags or against a reference with a tolerance. The library's own default is
untouched: users' runs compile at XLA's default level.
"""
from __future__ import annotations

OPTIMIZATION = "--xla_backend_optimization_level=0"


def xla_flags(devices: int = 8) -> str:
    """XLA_FLAGS for a test process with ``devices`` virtual CPU devices."""
    return f"--xla_force_host_platform_device_count={devices} {OPTIMIZATION}"
