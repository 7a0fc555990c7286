"""A multi-process hang is caught by a timeout that names the process that did not arrive.

Two real processes join ``jax.distributed`` on 127.0.0.1. Both pass one barrier; then process 1 stalls
(it sleeps instead of reaching the second barrier). Process 0 must fail with ``DistributedError`` within the
barrier timeout, naming process 1, instead of waiting forever.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from xla_env import xla_flags

REPO = Path(__file__).resolve().parent.parent

WORKER = textwrap.dedent("""
    import os, sys, time
    import jax
    from ptm_jax.parallel.distributed import barrier, initialize
    from ptm_jax.errors import DistributedError
    pid = int(sys.argv[1])
    initialize(f"127.0.0.1:{sys.argv[2]}", 2, pid, timeout_s=60)
    barrier("start", timeout_s=60)
    print(f"process {pid} passed start", flush=True)
    if pid == 1:
        time.sleep(12)  # stalls: never reaches the second barrier in time
        os._exit(0)
    t0 = time.time()
    try:
        barrier("after_start", timeout_s=3)
    except DistributedError as e:
        print(f"ERROR after {time.time() - t0:.1f}s: {e}", flush=True)
        os._exit(3)
    print("no error", flush=True)
    os._exit(0)
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_barrier_timeout_names_the_process_that_did_not_arrive(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(1),
           "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}
    port = _free_port()
    t0 = time.time()
    procs = [subprocess.Popen([sys.executable, str(script), str(i), str(port)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for i in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    elapsed = time.time() - t0
    assert "process 0 passed start" in outs[0] and "process 1 passed start" in outs[1], outs
    assert procs[0].returncode == 3, outs[0][-3000:]
    line = next(ln for ln in outs[0].splitlines() if ln.startswith("ERROR after"))
    waited = float(line.split("after ")[1].split("s:")[0])
    assert 2.5 <= waited < 30.0, line  # the 3 s timeout fired; it did not wait for process 1's 12 s sleep
    assert "barrier 'after_start'" in line and "process(es) 1 did not arrive" in line, line
    assert elapsed < 110, elapsed
