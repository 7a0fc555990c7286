"""Multi-host start-up: ``jax.distributed.initialize`` once, and a barrier with a timeout.

Cloud TPU pods and SLURM are auto-detected by JAX's cluster detection; elsewhere pass
``--coordinator HOST:PORT --num-processes N --process-id I`` (or PTM_COORDINATOR / PTM_NUM_PROCESSES /
PTM_PROCESS_ID in the environment).
"""
from __future__ import annotations

import os

import jax

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


def barrier(name: str = "ptm_barrier", timeout_s: int = 600) -> None:
    """All processes meet here; a process that does not arrive in time raises an error naming the barrier."""
    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    multihost_utils.sync_global_devices(name)
