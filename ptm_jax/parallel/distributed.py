"""Multi-host start-up: ``jax.distributed.initialize`` once, barriers with timeouts, small-file broadcast.

Where the distributed runtime starts (``cluster_env``), in this order:
  explicit   ``--coordinator HOST:PORT --num-processes N --process-id I`` (or PTM_COORDINATOR /
             PTM_NUM_PROCESSES / PTM_PROCESS_ID, or JAX_COORDINATOR_ADDRESS): ``launch/local_multiprocess.py``
  slurm      an ``srun`` step with several tasks (SLURM_STEP_NUM_TASKS > 1); JAX's ``SlurmCluster`` reads
             the rest. A plain batch shell or ``salloc`` has SLURM_JOB_ID too, but one process: not started.
  ompi       ``mpirun``/``mpiexec`` of Open MPI (OMPI_MCA_orte_hnp_uri; JAX's ``OmpiCluster``)
  gke-tpu    a Cloud TPU VM with TPU_WORKER_HOSTNAMES / TPU_PROCESS_ADDRESSES (GKE, JAX's ``GkeTpuCluster``)
  tpu-vm     any other Cloud TPU VM (libtpu found TPU chips: ``jax._src.cloud_tpu_init``); JAX's
             ``GceTpuCluster`` asks the GCE metadata server for the workers of the slice. Started on
             single-host TPU VMs too (one process), as MaxText does: then the coordination service exists for
             orbax, barriers and JAX's preemption notifier wherever the run is on a TPU.
Nothing else starts it. PTM_DISTRIBUTED=off skips it (only sensible on one host).

A run that looks multi-host but would run without a distributed client is refused with DistributedError
(``refusal``): several SLURM tasks, MPI ranks, TPU workers or slices named by the environment that JAX cannot
join, ``--num-processes N`` without a coordinator, or a runtime that sees several processes but no client
(the TPU runtime alone can span a pod: then orbax and the barriers have no coordination service).
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping

import jax

from ptm_jax.errors import DistributedError

log = logging.getLogger(__name__)
_INITIALIZED = False
_SLURM_VARS = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID")
_TPU_HOSTS_VARS = ("TPU_PROCESS_ADDRESSES", "TPU_WORKER_HOSTNAMES")


def on_cloud_tpu_vm() -> bool:
    """True when ``import jax`` found TPU chips and libtpu (``jax._src.cloud_tpu_init``), i.e. on a Cloud TPU VM."""
    from jax._src import cloud_tpu_init

    return bool(cloud_tpu_init.running_in_cloud_tpu_vm)


def _int(env: Mapping[str, str], key: str, default: int = 1) -> int:
    try:
        return int(env.get(key, default))
    except ValueError:
        raise DistributedError(f"${key}={env.get(key)!r} is not an integer") from None


def cluster_env(env: Mapping[str, str] | None = None, tpu_vm: bool | None = None) -> str | None:
    """The launcher through which ``initialize`` starts the distributed runtime (module docstring), or None."""
    env = os.environ if env is None else env
    tpu_vm = on_cloud_tpu_vm() if tpu_vm is None else tpu_vm
    if str(env.get("PTM_DISTRIBUTED", "")).lower() in ("0", "off", "false", "no"):
        return None
    if env.get("PTM_COORDINATOR") or env.get("JAX_COORDINATOR_ADDRESS"):
        return "explicit"
    if _int(env, "SLURM_STEP_NUM_TASKS") > 1 and all(k in env for k in _SLURM_VARS):
        return "slurm"
    if "OMPI_MCA_orte_hnp_uri" in env:
        return "ompi"
    if tpu_vm and any(env.get(k) for k in _TPU_HOSTS_VARS):
        return "gke-tpu"
    if tpu_vm and env.get("TPU_SKIP_MDS_QUERY") is None:
        return "tpu-vm"
    return None


def expected_processes(env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """(processes the environment says this run has, which setting says so); (1, "") when it says nothing.
    A plain TPU VM names its workers only in the metadata server: there the runtime's count is checked."""
    env = os.environ if env is None else env
    candidates = [(_int(env, "PTM_NUM_PROCESSES"), "PTM_NUM_PROCESSES / --num-processes"),
                  (_int(env, "SLURM_STEP_NUM_TASKS"), "SLURM_STEP_NUM_TASKS (an srun step)"),
                  (_int(env, "OMPI_COMM_WORLD_SIZE"), "OMPI_COMM_WORLD_SIZE (mpirun)")]
    hosts = next((env[k] for k in _TPU_HOSTS_VARS if env.get(k)), "")
    slices = _int(env, "MEGASCALE_NUM_SLICES")
    if hosts:
        candidates.append((len([h for h in hosts.split(",") if h.strip()]) * slices,
                           "TPU_WORKER_HOSTNAMES / TPU_PROCESS_ADDRESSES (TPU workers)"))
    elif slices > 1:
        candidates.append((slices, "MEGASCALE_NUM_SLICES (multislice TPU)"))
    n, why = max(candidates, key=lambda c: c[0])
    return (n, why) if n > 1 else (1, "")


def refusal(env: Mapping[str, str], kind: str | None, process_count: int | None, has_client: bool) -> str | None:
    """Why a run with this environment, detected cluster ``kind``, runtime process count (None: not known
    yet) and distributed client must not start; None when it may."""
    n, why = expected_processes(env)
    if kind is None and n > 1:
        if str(env.get("PTM_DISTRIBUTED", "")).lower() in ("0", "off", "false", "no"):
            return (f"{why} says this run has {n} processes, but PTM_DISTRIBUTED={env['PTM_DISTRIBUTED']} turns "
                    "the distributed runtime off; unset it")
        if why.startswith("PTM_NUM_PROCESSES"):
            return (f"--num-processes {n} (PTM_NUM_PROCESSES) without a coordinator: pass --coordinator HOST:PORT "
                    "(process 0's address) and --process-id, or use launch/local_multiprocess.py")
        if why.startswith("SLURM"):
            return (f"{why} says {n} tasks, but the SLURM variables JAX needs ({', '.join(_SLURM_VARS)}) are not "
                    "all set; start ptm with srun inside the job (launch/slurm_gpu.sbatch)")
        return (f"{why} says this run has {n} processes, but JAX cannot join them here (no Cloud TPU VM "
                "detected: is libtpu installed, and are TPU chips visible?); pass --coordinator/--num-processes/"
                "--process-id to start the distributed runtime explicitly")
    if process_count is not None and process_count > 1 and not has_client:
        return (f"JAX sees {process_count} processes but no distributed client: jax.distributed.initialize was "
                "not called (TPU_SKIP_MDS_QUERY or PTM_DISTRIBUTED=off set, or JAX was used before ptm started "
                "it). Multi-host checkpoints and barriers need it; unset those variables")
    if process_count is not None and n > 1 and process_count != n:
        return (f"{why} says {n} processes, but the distributed runtime has {process_count}; every process "
                "must be started with the same settings")
    return None


def _client():
    from jax._src import distributed as jax_distributed

    return jax_distributed.global_state.client


def initialize(coordinator: str | None = None, num_processes: int | None = None, process_id: int | None = None,
               timeout_s: int = 300) -> None:
    """Starts the distributed runtime once where a cluster is detected (``cluster_env``); a no-op for a plain
    single-process run. Raises DistributedError for a run that looks multi-host without a client."""
    global _INITIALIZED
    if _INITIALIZED:
        return
    env = dict(os.environ)  # command-line flags win over the PTM_* variables
    for key, value in (("PTM_COORDINATOR", coordinator), ("PTM_NUM_PROCESSES", num_processes),
                       ("PTM_PROCESS_ID", process_id)):
        if value is not None and value != "":
            env[key] = str(value)
    kind = cluster_env(env)
    problem = refusal(env, kind, None, False)
    if problem:
        raise DistributedError(problem)
    try:
        if kind == "explicit" and env.get("PTM_COORDINATOR"):
            jax.distributed.initialize(
                coordinator_address=env["PTM_COORDINATOR"],
                num_processes=_int(env, "PTM_NUM_PROCESSES") if "PTM_NUM_PROCESSES" in env else None,
                process_id=_int(env, "PTM_PROCESS_ID", 0) if "PTM_PROCESS_ID" in env else None,
                initialization_timeout=timeout_s)
        elif kind is not None:
            jax.distributed.initialize(initialization_timeout=timeout_s)
    except (RuntimeError, ValueError) as e:
        raise DistributedError(f"jax.distributed.initialize ({kind}) failed: {str(e).splitlines()[0]}. Check that "
                               "every process was started and that process 0's host is reachable") from None
    _INITIALIZED = True
    problem = refusal(env, kind, jax.process_count(), _client() is not None)
    if problem:
        raise DistributedError(problem)
    if kind is not None:
        log.info("distributed runtime (%s): process %d of %d, %d local / %d global devices", kind,
                 jax.process_index(), jax.process_count(), jax.local_device_count(), jax.device_count())


def _in_cluster() -> bool:
    """The environment names a launcher that ``initialize`` joins (``cluster_env``)."""
    return cluster_env() is not None


def timeout_for(nbytes: float, bytes_per_s: float, floor_s: float = 600.0) -> float:
    """A barrier timeout for work over ``nbytes`` at a pessimistic ``bytes_per_s``: ``floor_s`` (or
    $PTM_BARRIER_TIMEOUT_S when larger) plus the work's time."""
    floor = max(floor_s, float(os.environ.get("PTM_BARRIER_TIMEOUT_S", "0") or 0))
    return floor + float(nbytes) / float(bytes_per_s)


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


_KV_PIECE = 1 << 20  # bytes per key-value entry (well under gRPC's 4 MiB message limit)


def publish_files(name: str, files: Mapping[str, bytes]) -> None:
    """Process 0 puts small files (a tokenizer: a few MB) into the coordination service's key-value store
    under ``ptm/files/<name>/``; ``fetch_files`` on the other processes reads them. For hosts without a
    shared disk and a local output_dir. A no-op without a distributed client (one process)."""
    client = _client()
    if client is None or jax.process_count() == 1:
        return
    prefix = f"ptm/files/{name}"
    for fname, data in files.items():
        pieces = [data[i: i + _KV_PIECE] for i in range(0, len(data), _KV_PIECE)] or [b""]
        for i, piece in enumerate(pieces):
            client.key_value_set_bytes(f"{prefix}/{fname}/{i}", piece, allow_overwrite=True)
        client.key_value_set(f"{prefix}/{fname}/pieces", str(len(pieces)), allow_overwrite=True)
    client.key_value_set(f"{prefix}/index", "\n".join(files), allow_overwrite=True)


def fetch_files(name: str, timeout_s: float) -> dict[str, bytes]:
    """The files process 0 gave ``publish_files(name, ...)``, waiting up to ``timeout_s`` for them."""
    client = _client()
    if client is None:
        raise DistributedError(f"fetch_files('{name}'): no distributed client; run with several processes")
    prefix, ms = f"ptm/files/{name}", int(timeout_s * 1000)
    try:
        names = [n for n in client.blocking_key_value_get(f"{prefix}/index", ms).split("\n") if n]
        out = {}
        for fname in names:
            count = int(client.blocking_key_value_get(f"{prefix}/{fname}/pieces", ms))
            out[fname] = b"".join(client.blocking_key_value_get_bytes(f"{prefix}/{fname}/{i}", ms)
                                  for i in range(count))
    except Exception as e:  # DEADLINE_EXCEEDED from the runtime
        raise DistributedError(f"process {jax.process_index()}: process 0 did not publish '{name}' within "
                               f"{timeout_s:g} s ({str(e).splitlines()[0] if str(e) else type(e).__name__}); "
                               "check process 0's log") from None
    return out
