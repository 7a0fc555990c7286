"""Splash attention compiled by the real TPU compiler (libtpu) for a v5e 2x2 slice on this CPU machine.

libtpu is kept out of the test environment; the worker (tests/splash_tpu_worker.py) runs in its own process
with libtpu on PYTHONPATH (tests/libtpu_env.py). Without it the test skips and says so."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from libtpu_env import MISSING, REPO, compile_env, libtpu_dir



def test_splash_attention_compiles_for_a_tpu_slice_as_mosaic_kernels():
    if libtpu_dir() is None:
        pytest.skip(MISSING)
    env = compile_env()
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "splash_tpu_worker.py")], capture_output=True,
                          text=True, env=env, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["device_kind"].startswith("TPU v5")
    assert report["auto"] == "splash"  # causal, 2048 tokens, on TPU
    # forward and fused backward kernels; XLA's path has none
    assert report["splash"]["mosaic_calls"] >= 2 and report["xla"]["mosaic_calls"] == 0
    # the [B/2, N/2, T, T] float32 scores (32 MiB per device) are never materialised by the kernel
    assert report["splash"]["temp_bytes"] < report["xla"]["temp_bytes"] / 4
