#!/usr/bin/env python3
"""Start N cooperating processes of one command on this machine (JAX multi-process, no cluster manager).

    python launch/local_multiprocess.py -n 2 --devices-per-process 4 -- \
        ptm pretrain -c bert_tiny output_dir=runs/mp

Each process ``i`` gets ``--coordinator HOST:PORT --num-processes N --process-id i`` appended to the command
(the flags ``ptm`` passes to ``jax.distributed.initialize``) and the same values as ``PTM_COORDINATOR``,
``PTM_NUM_PROCESSES``, ``PTM_PROCESS_ID`` in its environment. ``--devices-per-process K`` makes each process
see K virtual CPU devices (``--xla_force_host_platform_device_count``), so a 2 x 4 run has the same 8-device
mesh as a 1 x 8 run. A leading ``ptm`` word runs ``python -m ptm_jax.cli`` with this interpreter, so an
uninstalled checkout works.

Every output line is prefixed with ``[pI]``. If one process fails, the others are stopped (SIGTERM, then
SIGKILL after ``--grace`` seconds) and the launcher exits with the failing process's status. SIGTERM/SIGINT
sent to the launcher is forwarded to every process (``ptm`` then checkpoints at the next step boundary and
exits 0). This follows the JAX multi-process model (jax.readthedocs.io "Multi-process environments"): one
controller per process, all processes running the same program.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parent.parent
_DEVICE_FLAG = re.compile(r"--xla_force_host_platform_device_count=\d+")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free now (the OS picks it); the coordinator binds it a moment later."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def resolve_command(command: list[str]) -> list[str]:
    """``ptm ...`` -> ``<this python> -m ptm_jax.cli ...``; anything else runs as given."""
    if not command:
        raise SystemExit("local_multiprocess: no command given after '--'")
    if command[0] == "ptm":
        return [sys.executable, "-m", "ptm_jax.cli", *command[1:]]
    return list(command)


def process_env(base: dict[str, str], index: int, num: int, coordinator: str,
                devices_per_process: int | None, platform: str | None) -> dict[str, str]:
    env = dict(base)
    env.update(PTM_COORDINATOR=coordinator, PTM_NUM_PROCESSES=str(num), PTM_PROCESS_ID=str(index))
    if devices_per_process is not None:
        flags = _DEVICE_FLAG.sub("", env.get("XLA_FLAGS", "")).strip()
        env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices_per_process}".strip()
    if platform:
        env["JAX_PLATFORMS"] = platform
    # the checkout on the path, so `python -m ptm_jax.cli` works without an install
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(REPO) not in paths:
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), *paths])
    return env


def _pump(stream: IO[bytes], prefix: str, sink: IO[str], log: IO[str] | None, lock: threading.Lock) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace").rstrip("\n")
        with lock:
            sink.write(f"{prefix} {line}\n")
            sink.flush()
            if log is not None:
                log.write(line + "\n")
                log.flush()
    stream.close()


def _stop(procs: list[subprocess.Popen], grace: float) -> None:
    """SIGTERM every live process, SIGKILL whatever is left after ``grace`` seconds."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.time() + grace
    for p in procs:
        try:
            p.wait(timeout=max(deadline - time.time(), 0.1))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def launch(command: list[str], num_processes: int, *, devices_per_process: int | None = None,
           host: str = "127.0.0.1", port: int | None = None, platform: str | None = None,
           grace: float = 30.0, timeout: float | None = None, log_dir: str | None = None,
           append_flags: bool = True, out: IO[str] = sys.stdout) -> int:
    """Runs ``command`` as ``num_processes`` processes; returns 0 when all succeed, else the first failure's
    status (124 when ``timeout`` expired; 128+signal for a process killed by a signal)."""
    if num_processes < 1:
        raise SystemExit("local_multiprocess: -n must be >= 1")
    coordinator = f"{host}:{port or free_port(host)}"
    argv = resolve_command(command)
    logs = Path(log_dir) if log_dir else None
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()
    procs: list[subprocess.Popen] = []
    pumps: list[threading.Thread] = []
    files: list[IO[str]] = []
    forwarded = {"signal": None}

    def forward(signum, frame):  # preemption / Ctrl-C of the launcher reaches every process
        forwarded["signal"] = signum
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)

    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)} \
        if threading.current_thread() is threading.main_thread() else {}
    try:
        for i in range(num_processes):
            flags = ["--coordinator", coordinator, "--num-processes", str(num_processes), "--process-id", str(i)]
            env = process_env(os.environ.copy(), i, num_processes, coordinator, devices_per_process, platform)
            p = subprocess.Popen(argv + (flags if append_flags else []), env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            procs.append(p)
            log = open(logs / f"p{i}.log", "w", encoding="utf-8") if logs is not None else None
            if log is not None:
                files.append(log)
            t = threading.Thread(target=_pump, args=(p.stdout, f"[p{i}]", out, log, lock), daemon=True)
            t.start()
            pumps.append(t)
        status = 0
        start = time.time()
        while True:
            codes = [p.poll() for p in procs]
            failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                i, c = failed[0]
                status = c if c > 0 else 128 - c
                with lock:
                    out.write(f"[launch] process {i} exited with status {c}; stopping the others\n")
                _stop(procs, grace)
                break
            if all(c == 0 for c in codes):
                break
            if timeout is not None and time.time() - start > timeout:
                with lock:
                    out.write(f"[launch] timeout after {timeout:.0f} s; stopping all processes\n")
                _stop(procs, grace)
                status = 124
                break
            time.sleep(0.1)
        for t in pumps:
            t.join(timeout=5)
        return status
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for f in files:
            f.close()
        for s, h in old.items():
            signal.signal(s, h)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = _parser()
    args = parser.parse_args(argv[:split])
    if not argv[split + 1:]:
        parser.error("give the command after '--', e.g. -- ptm pretrain -c bert_tiny")
    platform = args.platform or ("cpu" if args.devices_per_process else None)
    return launch(argv[split + 1:], args.num_processes, devices_per_process=args.devices_per_process,
                  host=args.host, port=args.port, platform=platform, grace=args.grace, timeout=args.timeout,
                  log_dir=args.log_dir, append_flags=not args.no_flags)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="local_multiprocess.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--num-processes", type=int, default=2, help="processes to start (default 2)")
    p.add_argument("--devices-per-process", type=int, default=None,
                   help="virtual CPU devices per process (sets --xla_force_host_platform_device_count)")
    p.add_argument("--host", default="127.0.0.1", help="coordinator address (process 0 binds it)")
    p.add_argument("--port", type=int, default=None, help="coordinator port (default: a free one)")
    p.add_argument("--platform", default=None,
                   help="JAX_PLATFORMS for the processes (default: cpu with --devices-per-process, else unset)")
    p.add_argument("--grace", type=float, default=30.0,
                   help="seconds between SIGTERM and SIGKILL when stopping the others after a failure")
    p.add_argument("--timeout", type=float, default=None, help="stop everything after this many seconds")
    p.add_argument("--log-dir", default=None, help="also write each process's output to LOG_DIR/pI.log")
    p.add_argument("--no-flags", action="store_true",
                   help="do not append --coordinator/--num-processes/--process-id (the PTM_* variables are set)")
    return p


if __name__ == "__main__":
    sys.exit(main())
