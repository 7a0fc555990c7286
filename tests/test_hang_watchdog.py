"""A multi-process hang is caught by a timeout that names the process that did not arrive.

Two real processes join ``jax.distributed`` on 127.0.0.1. Both pass one barrier; then process 1 stalls: it does
not go on to the second barrier until process 0 has reported its error (a file process 0 writes). Process 0 must
fail with ``DistributedError`` when the barrier's deadline passes, naming process 1, instead of waiting forever.
The checks are of events and their order, not of seconds: the coordination service's deadline error, and process
0's error written while process 1 was still stalled.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from xla_env import xla_flags

REPO = Path(__file__).resolve().parent.parent

WORKER = textwrap.dedent("""
    import os, sys, time
    import jax
    from ptm_jax.parallel.distributed import barrier, initialize
    from ptm_jax.errors import DistributedError
    pid, reported = int(sys.argv[1]), sys.argv[3]
    initialize(f"127.0.0.1:{sys.argv[2]}", 2, pid, timeout_s=60)
    barrier("start", timeout_s=60)
    print(f"process {pid} passed start", flush=True)
    if pid == 1:  # stalls: does not reach the second barrier before process 0 has reported its error
        for _ in range(6000):
            if os.path.exists(reported):
                print("process 1 still stalled when process 0 reported", flush=True)
                break
            time.sleep(0.02)
        os._exit(0)
    try:
        barrier("after_start", timeout_s=3)
    except DistributedError as e:
        print(f"ERROR: {e}", flush=True)
        open(reported, "w").close()
        os._exit(3)
    print("no error", flush=True)
    open(reported, "w").close()
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
    reported = tmp_path / "process0_reported"
    procs = [subprocess.Popen([sys.executable, str(script), str(i), str(port), str(reported)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert "process 0 passed start" in outs[0] and "process 1 passed start" in outs[1], outs
    assert procs[0].returncode == 3, outs[0][-3000:]
    line = next(ln for ln in outs[0].splitlines() if ln.startswith("ERROR: "))
    # the barrier's own deadline fired (not a lost peer or another error), while process 1 was still stalled
    assert "DEADLINE_EXCEEDED" in line and "timed out after 3 s" in line, line
    assert "process 1 still stalled when process 0 reported" in outs[1], outs[1][-3000:]
    assert "barrier 'after_start'" in line and "process(es) 1 did not arrive" in line, line
