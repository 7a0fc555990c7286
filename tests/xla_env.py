"""The XLA flags of the test run, in one place: conftest.py sets them for the pytest processes, and the tests
that start ``ptm`` in subprocesses pass ``xla_flags(n)`` on.

``--xla_backend_optimization_level=1`` (LLVM -O1 in place of -O2): the tiny models of the suite spend most of
their time in compilation, not in running. Measured on tests/test_conformance.py's mlm runs: 37.8 s at the
default level, 26.0 s at 1 (27.6 s at 0, where the MiniLM inference of tests/test_real_checkpoint.py slowed
from 16.4 s to 21.6 s; at 1 it takes 17.3 s). Numerics are XLA's at either level: every comparison in the
suite is between two runs under the same flags or against a reference with a tolerance.
"""
from __future__ import annotations

OPTIMIZATION = "--xla_backend_optimization_level=1"


def xla_flags(devices: int = 8) -> str:
    """XLA_FLAGS for a test process with ``devices`` virtual CPU devices."""
    return f"--xla_force_host_platform_device_count={devices} {OPTIMIZATION}"
