"""Multi-host start-up: ``jax.distributed.initialize`` once, and a barrier with a timeout.

Cloud TPU pods and SLURM are auto-detected by JAX's cluster detection; elsewhere pass
``--coordinator HOST:PORT --num-processes N --process-id I`` (or PTM_COORDINATOR / PTM_NUM_PROCESSES /
PTM_PROCESS_ID in the environment).
"""
from __future__ import annotations

import os

import jax

from ptm_jax.errors import DistributedError

_INITIALIZED = False


def _in_cluster() -> bool:
    """A multi-process launch JAX can auto-detect: a TPU pod, or an `srun` step with several tasks (a plain
    SLURM batch shell or salloc has SLURM_JOB_ID too, but only one process)."""
    if int(os.environ.get("SLURM_STEP_NUM_TASKS", "1")) > 1:
        return True
    return any(k in os.environ for k in ("TPU_WORKER_HOSTNAMES", "CLOUD_TPU_TASK_ID", "MEGASCALE_COORDINATOR_ADDRESS"))


def initialize(coordinator: str | None = None, num_processes: int | None = None, process_id: int | None = None,
               timeout_s: int = 300) -> None:
    """Initialises the distributed runtime once; a no-op for a plain single-process run."""
    global _INITIALIZED
    if _INITIALIZED:
        return
    coordinator = coordinator or os.environ.get("PTM_COORDINATOR")
    if num_processes is None and "PTM_NUM_PROCESSES" in os.environ:
        num_processes = int(os.environ["PTM_NUM_PROCESSES"])
    if process_id is None and "PTM_PROCESS_ID" in os.environ:
        process_id = int(os.environ["PTM_PROCESS_ID"])
    if coordinator is not None:
        jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes,
                                   process_id=process_id, initialization_timeout=timeout_s)
    elif _in_cluster():
        jax.distributed.initialize(initialization_timeout=timeout_s)
    _INITIALIZED = True


_BARRIER_COUNTS: dict[str, int] = {}


def barrier(name: str = "ptm_barrier", timeout_s: float | None = None) -> None:
    """All processes meet here. A process that does not arrive within ``timeout_s`` (default
    $PTM_BARRIER_TIMEOUT_S, else 600 s) makes the others raise ``DistributedError`` naming it.

    Each process first writes ``ptm/<name>/<n>/<process id>`` to the coordination service's key-value store,
    then waits at the coordination barrier; on a timeout the keys present tell who arrived.
    """
    if jax.process_count() == 1:
        return
    from jax._src import distributed as jax_distributed

    client = jax_distributed.global_state.client
    if client is None:  # not started through jax.distributed (should not happen with process_count > 1)
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)
        return
    if timeout_s is None:
        timeout_s = float(os.environ.get("PTM_BARRIER_TIMEOUT_S", "600"))
    n = _BARRIER_COUNTS[name] = _BARRIER_COUNTS.get(name, -1) + 1
    key = f"ptm/{name}/{n}"
    me, count = jax.process_index(), jax.process_count()
    client.key_value_set(f"{key}/{me}", "arrived")
    try:
        client.wait_at_barrier(key, int(timeout_s * 1000))
    except Exception as e:  # the runtime raises XlaRuntimeError (DEADLINE_EXCEEDED) or similar
        missing = missing_processes(client, key, count)
        who = ", ".join(map(str, missing)) if missing else "unknown (all keys present)"
        raise DistributedError(
            f"barrier '{name}' (#{n}) timed out after {timeout_s:g} s on process {me} of {count}: process(es) "
            f"{who} did not arrive. Check that host's log for an earlier error or a hang; a dead host makes "
            f"every other host wait. ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None


def missing_processes(client, key: str, count: int) -> list[int]:
    """Process ids with no ``<key>/<id>`` entry in the coordination key-value store."""
    try:
        entries = client.key_value_dir_get(key)
    except Exception:
        return []
    arrived = set()
    for k, _ in entries:
        tail = str(k).rstrip("/").rsplit("/", 1)[-1]
        if tail.isdigit():
            arrived.add(int(tail))
    return sorted(set(range(count)) - arrived)
