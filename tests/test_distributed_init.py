"""Where the distributed runtime starts, and which runs are refused: the decision table over real environment
settings, a real 2-process start through JAX's SLURM detection, and real `ptm` processes refused with exit 2.

Not exercised here: the Cloud TPU VM path itself (JAX's GceTpuCluster asks the GCE metadata server for the
slice's workers; this machine has no TPU and no metadata server). Its decision (`cluster_env(..., tpu_vm=True)`)
is tested; the metadata queries are JAX's.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from xla_env import xla_flags

from ptm_jax.parallel.distributed import cluster_env, expected_processes, refusal

REPO = Path(__file__).resolve().parent.parent
SRUN_STEP = {"SLURM_JOB_ID": "4242", "SLURM_STEP_NODELIST": "localhost", "SLURM_NTASKS": "16",
             "SLURM_STEP_NUM_TASKS": "16", "SLURM_PROCID": "3", "SLURM_LOCALID": "3"}


@pytest.mark.parametrize("env, tpu_vm, kind", [
    ({}, False, None),
    ({"PTM_COORDINATOR": "10.0.0.1:1234", "PTM_NUM_PROCESSES": "2", "PTM_PROCESS_ID": "1"}, False, "explicit"),
    (SRUN_STEP, False, "slurm"),
    # sbatch's batch shell / salloc: job variables but one process: JAX would wait for 16 that never come
    ({"SLURM_JOB_ID": "4242", "SLURM_NTASKS": "16", "SLURM_JOB_NODELIST": "n[1-2]"}, False, None),
    ({**SRUN_STEP, "SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "1"}, False, None),  # srun -n1
    ({"OMPI_MCA_orte_hnp_uri": "1531576320.0;tcp://10.96.0.1:34911", "OMPI_COMM_WORLD_SIZE": "4"}, False, "ompi"),
    ({}, True, "tpu-vm"),  # a Cloud TPU VM (single host or pod): JAX asks the metadata server
    ({"TPU_WORKER_HOSTNAMES": "t-0,t-1,t-2,t-3", "TPU_WORKER_ID": "2"}, True, "gke-tpu"),
    ({"TPU_SKIP_MDS_QUERY": "1"}, True, None),
    ({"PTM_DISTRIBUTED": "off"}, True, None),
    ({"TPU_WORKER_HOSTNAMES": "t-0,t-1"}, False, None),  # names TPU workers, but this is no TPU VM
])
def test_cluster_detection_table(env, tpu_vm, kind):
    assert cluster_env(env, tpu_vm=tpu_vm) == kind


def test_expected_process_counts_and_refusals():
    assert expected_processes({}) == (1, "")
    assert expected_processes(SRUN_STEP)[0] == 16
    assert expected_processes({"TPU_WORKER_HOSTNAMES": "a,b,c,d", "MEGASCALE_NUM_SLICES": "2"})[0] == 8
    assert expected_processes({"MEGASCALE_NUM_SLICES": "4"})[0] == 4
    # one process, nothing distributed: fine; a detected cluster with a client and the right count: fine
    assert refusal({}, None, 1, False) is None
    assert refusal(SRUN_STEP, "slurm", 16, True) is None
    assert refusal({}, "tpu-vm", 64, True) is None
    # TPU workers named, but JAX cannot join them
    msg = refusal({"TPU_WORKER_HOSTNAMES": "t-0,t-1"}, None, None, False)
    assert "4" not in msg and "2 processes" in msg and "no Cloud TPU VM detected" in msg
    assert "without a coordinator" in refusal({"PTM_NUM_PROCESSES": "2"}, None, None, False)
    partial = {k: v for k, v in SRUN_STEP.items() if k != "SLURM_LOCALID"}
    assert "SLURM_LOCALID" in refusal(partial, None, None, False)
    # the TPU runtime spans a pod on its own, without jax.distributed: orbax and the barriers would hang
    assert "no distributed client" in refusal({"TPU_SKIP_MDS_QUERY": "1"}, None, 32, False)
    assert "PTM_DISTRIBUTED" in refusal({**SRUN_STEP, "PTM_DISTRIBUTED": "off"}, None, None, False)
    assert "has 8" in refusal(SRUN_STEP, "slurm", 8, True)


def _env(**extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PTM_", "SLURM_", "TPU_", "OMPI_"))}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(2), PYTHONPATH=str(REPO),
               **extra)
    return env


_CHILD = """
import json
from ptm_jax.parallel import distributed
distributed.initialize()
import jax
from ptm_jax.config import MeshConfig
from ptm_jax.errors import ConfigError
from ptm_jax.parallel.mesh import make_mesh
mesh = make_mesh(MeshConfig(data=-1, tensor=2))
try:
    make_mesh(MeshConfig(data=1, tensor=4))
    refused = ""
except ConfigError as e:
    refused = str(e)
distributed.barrier("slurm-test", 60)
print(json.dumps({"index": jax.process_index(), "count": jax.process_count(), "devices": jax.device_count(),
                  "client": distributed._client() is not None, "mesh": list(mesh.devices.shape),
                  "refused": refused}))
"""


def test_two_srun_tasks_start_through_jax_slurm_detection():
    """Two real processes with the variables `srun -n 2` sets: ptm starts jax.distributed with no flags."""
    sys.path.insert(0, str(REPO / "launch"))
    from local_multiprocess import free_port

    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=_env(**{**SRUN_STEP, "SLURM_NTASKS": "2", "SLURM_STEP_NUM_TASKS": "2",
                                                     "SLURM_PROCID": str(i), "SLURM_LOCALID": str(i),
                                                     "JAX_COORDINATOR_PORT": port}))
             for i in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert [r["index"] for r in results] == [0, 1]
    for r in results:
        assert (r["count"], r["devices"], r["client"], r["mesh"]) == (2, 4, True, [2, 1, 2])
        assert "mesh.tensor=4 but each host (process) has 2 devices" in r["refused"]


def test_multi_host_looking_runs_are_refused_by_ptm(tmp_path):
    """Real `ptm data` processes: exit 2 with one message, before any work."""
    cmd = [sys.executable, "-m", "ptm_jax.cli", "data", "-c", "bert_tiny", f"output_dir={tmp_path}"]
    cases = [({"TPU_WORKER_HOSTNAMES": "t-0,t-1,t-2"}, "says this run has 3 processes, but JAX cannot join them"),
             ({"PTM_NUM_PROCESSES": "2"}, "--num-processes 2 (PTM_NUM_PROCESSES) without a coordinator")]
    for extra, message in cases:
        r = subprocess.run(cmd, cwd=REPO, env=_env(**extra), capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and message in r.stderr, r.stderr[-2000:]
        assert "Traceback" not in r.stderr
    assert not (tmp_path / "cache").exists()
