"""launch/tpu_pod.sh and launch/slurm_gpu.sbatch run for real here, with stand-ins (tests/launch_standins/) only
for what cannot run on this machine: `gcloud` (worker i of the slice is the folder worker-i, used as that
worker's HOME; its commands run as local processes), and SLURM's `sbatch`, `srun` and `scontrol`. What is
under test is the scripts' own logic, around a real `ptm pretrain` of bert_tiny (a 40 KB corpus, a few steps):

- tpu_pod.sh: `run` starts Python detached with the env file sourced and scratch under the worker's home;
  `status` sees it; `run`/`resume` refuse a second copy; `stop` sends SIGTERM to Python itself, which saves a
  checkpoint and exits 0, and reports how the run ended; a stale pid file does not block and is not signalled;
  `watch` resumes the stopped run once and returns when it is done.
- a 2-worker slice where only one worker runs (a host that never started): `status` says partial, `resume`
  refuses, `watch` stops the straggler and does not start a second copy.
- watch after a Spot preemption (node PREEMPTED, its processes gone): delete, create (spot, autocheckpoint where
  Cloud TPU documents it), setup (the checkout, requirements/tpu.lock through launch/install_env.sh), start; the
  real pretrain resumes from its last checkpoint.
- watch through a suspended queued resource (a create that fails for want of capacity, then one that works), a
  terminated node with no recreations left, and a deleted node; `create` and `setup` on their own.
- a hang (python stopped after its first step): watch sees no new step for HANG_SECONDS, writes every thread's
  stack into the log (faulthandler), stops the run (SIGTERM + SIGCONT), and the resume first kills a process that
  still holds the TPU's device file and removes libtpu's lock file.
- slurm_gpu.sbatch: SIGTERM to the task -> checkpoint -> `scontrol requeue`; the Python-version check; PTM_VENV
  brought to requirements/cuda.lock before srun.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from xla_env import xla_flags

REPO = Path(__file__).resolve().parent.parent
STANDINS = Path(__file__).resolve().parent / "launch_standins"
STEPS = 5


@pytest.fixture(scope="module")
def data(shared_data, tmp_path_factory) -> dict[str, str]:
    """A 40 KB corpus, its tokenizer and token cache, built once by `ptm data` and shared by every run."""
    from ptm_jax.cli import main

    root = tmp_path_factory.mktemp("launch_data")
    corpus = root / "corpus.txt"
    corpus.write_bytes((shared_data / "corpus/tinyshakespeare/input.txt").read_bytes()[:40_000])
    assert main(["data", "-c", "bert_tiny", f"data.corpus={corpus}", "data.format=lines", "tokenizer.vocab_size=400",
                 f"data.cache_dir={root / 'cache'}", f"output_dir={root / 'data'}"]) == 0
    return {"corpus": str(corpus), "vocab": str(root / "data/tokenizer/vocab.txt"), "cache": str(root / "cache")}


def pretrain_args(data: dict[str, str], out: Path) -> list[str]:
    return ["pretrain", "-c", "bert_tiny", f"data.corpus={data['corpus']}", "data.format=lines",
            f"tokenizer.vocab_file={data['vocab']}", f"data.cache_dir={data['cache']}", f"output_dir={out}",
            f"train.steps={STEPS}", "train.checkpoint_every=100", "train.log_every=1", "train.eval_every=0"]


def base_env(**extra: str) -> dict[str, str]:
    """This test process's environment without launcher or XLA settings (the env file must bring those)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PTM_", "SLURM_", "SRUN_")) and k != "XLA_FLAGS"}
    env.update(PATH=f"{STANDINS}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               USE_TF="0", TF_CPP_MIN_LOG_LEVEL="2", HF_HUB_OFFLINE="1", **extra)
    return env


def slice_of(tmp_path: Path, workers: int) -> dict[str, str]:
    """Worker homes with this checkout at ~/ptm_jax (what `setup` copies there) and the env for tpu_pod.sh:
    VENV names this test's Python environment (what `setup` installs)."""
    root = tmp_path / "slice"
    for i in range(workers):
        (root / f"worker-{i}").mkdir(parents=True)
        (root / f"worker-{i}/ptm_jax").symlink_to(REPO)
    env_file = tmp_path / "workers.env"
    env_file.write_text(f'XLA_FLAGS="{xla_flags(1)}"\nJAX_PLATFORMS=cpu\nPTM_LAUNCH_CHECK=from-the-env-file\n')
    return base_env(GCLOUD_STANDIN_ROOT=str(root), VENV=sys.prefix, PTM_ENV_FILE=str(env_file), TPU_NAME="t",
                    STOP_WAIT="400", WATCH_INTERVAL="1", LOG_DIR=str(tmp_path / "tpu-logs"),
                    UV_STANDIN_LOG=str(tmp_path / "uv.log"))


def pod(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "launch/tpu_pod.sh"), *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def ptm_processes(marker: str) -> list[int]:
    """Live Python processes running `ptm_jax.cli` with ``marker`` on their command line."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            state = [ln for ln in (proc / "status").read_text().splitlines() if ln.startswith("State:")]
        except OSError:
            continue
        if b"ptm_jax.cli" in cmdline and any(marker.encode() in a for a in cmdline) and "Z" not in state[0]:
            found.append(int(proc.name))
    return found


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(x.decode().split("=", 1) for x in raw if b"=" in x)


def wait_for(path: Path, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while not path.exists():
        assert time.time() < deadline, f"{path} did not appear within {timeout} s"
        time.sleep(0.05)


def train_steps(stage: Path) -> list[int]:
    out = []
    for line in (stage / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("split") == "train":
            out.append(record["step"])
    return out


@pytest.fixture()
def no_leftovers(tmp_path):
    """Kills, at the end of a test, the detached `ptm` processes it left running (a failed assertion)."""
    yield
    for pid in ptm_processes(str(tmp_path)):
        os.kill(pid, signal.SIGKILL)


def test_tpu_pod_run_status_stop_and_watch_resume_a_real_pretrain_on_one_worker(data, tmp_path, no_leftovers):
    env = slice_of(tmp_path, 1)
    home = tmp_path / "slice/worker-0"
    logs = home / "ptm-logs"
    out = tmp_path / "run"
    args = pretrain_args(data, out)

    started = pod(env, "run", *args)
    assert started.returncode == 0, started.stderr
    assert "started pid" in started.stdout
    pid = int((logs / "ptm.pid").read_text().split()[0])
    assert ptm_processes(str(out)) == [pid], "the pid file names Python itself, not a wrapper shell"
    seen = environ_of(pid)
    assert seen["PTM_LAUNCH_CHECK"] == "from-the-env-file" and seen["XLA_FLAGS"] == xla_flags(1)
    assert seen["PTM_LOCAL_SCRATCH"] == str(home / "ptm-scratch") and (home / "ptm-scratch").is_dir()

    status = pod(env, "status")
    assert status.returncode == 0, status.stderr
    assert f"pid {pid}" in status.stdout and status.stdout.rstrip().endswith("run: running"), status.stdout
    for again in (("resume",), ("run", *args)):
        refused = pod(env, *again)
        assert refused.returncode == 3, refused.stdout + refused.stderr
        assert "still running; stop it first" in refused.stderr and f"pid {pid}" in refused.stderr
    assert ptm_processes(str(out)) == [pid], "no second copy"
    assert shlex.split((logs / "ptm.cmd").read_text()) == args

    wait_for(out / "config.json")  # ptm is up (its SIGTERM handler installed); SIGTERM now, mid start-up
    stopped = pod(env, "stop", timeout=500)  # the step and the save come first: minutes on a loaded machine
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "exited 0 after" in stopped.stdout, stopped.stdout
    assert f"stopped early with a checkpoint ({out}/pretrain/summary.json)" in stopped.stdout, stopped.stdout
    assert ptm_processes(str(out)) == [] and (logs / "ptm.exit").read_text().strip() == "0"
    summary = json.loads((out / "pretrain/summary.json").read_text())
    assert summary["preempted"] is True and 1 <= summary["step"] < STEPS
    saved = sorted(int(p.name) for p in (out / "pretrain/checkpoints").iterdir() if p.name.isdigit())
    assert saved == [summary["step"]]
    assert pod(env, "status").stdout.rstrip().endswith("run: stopped-early")

    # after a reboot the pid file may name another program: it must neither block a start nor be signalled
    other = subprocess.Popen(["sleep", "300"])
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        (logs / "ptm.pid").write_text(f"{other.pid} {boot}\n")
        assert "not running (last exit status: 0)" in pod(env, "stop").stdout
        watched = pod(env, "watch", timeout=600)
        assert watched.returncode == 0, watched.stdout[-3000:] + watched.stderr[-3000:]
        assert other.poll() is None, "the stale pid was signalled"
    finally:
        other.kill()
        other.wait()
    lines = watched.stdout.splitlines()
    assert "run: stopped-early" in lines[0] and "started pid" in lines[1], watched.stdout
    assert lines[-1] == "run finished" and "run: done" in lines[-2], watched.stdout
    assert sum("started pid" in ln for ln in lines) == 1, "watch resumed once"
    log = (logs / "ptm.log").read_text()
    assert log.count("=== ") == 4 and log.count(" start: ptm pretrain") == 2  # two starts, two exit lines
    assert train_steps(out / "pretrain") == list(range(1, STEPS + 1)), "the restart resumed after the checkpoint"
    assert json.loads((out / "pretrain/summary.json").read_text())["preempted"] is False
    fetched = pod({**env, "LOG_DIR": str(tmp_path / "logs")}, "logs")
    assert fetched.returncode == 0 and (tmp_path / "logs/t/worker-0.log").read_text() == log, fetched.stderr


def test_tpu_pod_with_one_worker_of_two_running_is_partial_and_watch_stops_it_without_a_second_copy(tmp_path,
                                                                                                   no_leftovers):
    """Worker 1 runs `ptm` (waiting at jax.distributed start-up for worker 0, which never started, as after a
    host failure); worker 0 runs nothing. Nothing may start beside worker 1's process; watch stops it."""
    env = slice_of(tmp_path, 2)
    env["GCLOUD_STANDIN_COORDINATOR"] = "127.0.0.1:9"  # the facts the metadata server gives JAX on a TPU VM
    homes = [tmp_path / f"slice/worker-{i}" for i in range(2)]
    marker = str(tmp_path / "never")
    for home in homes:
        (home / "ptm-logs").mkdir()
        (home / "ptm-logs/ptm.cmd").write_text(f"pretrain -c bert_tiny output_dir={marker}\n")
        (home / "ptm-logs/ptm.env").write_text(Path(env["PTM_ENV_FILE"]).read_text())
    one = subprocess.run(["gcloud", "compute", "tpus", "tpu-vm", "ssh", "t", "--worker=1",
                          f"--command=VENV={sys.prefix} bash ~/ptm_jax/launch/tpu_worker.sh start"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert one.returncode == 0, one.stderr
    pid = int((homes[1] / "ptm-logs/ptm.pid").read_text().split()[0])
    status = pod(env, "status")
    lines = status.stdout.splitlines()
    assert lines[0] == f"none {socket.gethostname()}" and f"pid {pid}" in lines[1], status.stdout
    assert status.stdout.rstrip().endswith("run: partial"), status.stdout
    refused = pod(env, "resume")
    assert refused.returncode == 3 and f"pid {pid}" in refused.stderr, refused.stderr
    assert not (homes[0] / "ptm-logs/ptm.started").exists()
    watched = pod({**env, "MAX_RESUMES": "0", "STOP_WAIT": "30"}, "watch", timeout=200)
    assert watched.returncode == 2, watched.stdout + watched.stderr
    assert "run: partial" in watched.stdout and "run: killed" in watched.stdout, watched.stdout
    assert "MAX_RESUMES=0 reached" in watched.stderr
    assert ptm_processes(marker) == [] and not (homes[0] / "ptm-logs/ptm.started").exists()


def old_python(tmp_path: Path) -> Path:
    """Stands in for an interpreter of Python 3.10 (the tpu-ubuntu2204-base image's), which is not installed
    here: it answers the scripts' version query."""
    bin_dir = tmp_path / "py310/bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text("#!/bin/sh\necho 3.10\n")
    (bin_dir / "python").chmod(0o755)
    return bin_dir / "python"


def test_launchers_refuse_a_python_older_than_3_11_and_a_missing_env_file(tmp_path):
    """Worker 0's environment is Python 3.11, worker 1's is 3.10: `run` starts nothing on either."""
    python = old_python(tmp_path)
    env = {**slice_of(tmp_path, 2), "VENV": "ptm-venv"}
    for i, interpreter in ((0, Path(sys.executable)), (1, python)):
        (tmp_path / f"slice/worker-{i}/ptm-venv/bin").mkdir(parents=True)
        (tmp_path / f"slice/worker-{i}/ptm-venv/bin/python").symlink_to(interpreter)
    done = pod(env, "run", "pretrain", "-c", "bert_tiny")
    assert done.returncode == 2, done.stdout + done.stderr
    old = tmp_path / "slice/worker-1/ptm-venv/bin/python"
    assert f"{old} is Python 3.10; ptm_jax needs Python >= 3.11" in done.stderr
    assert "run launch/tpu_pod.sh setup" in done.stderr and "worker-0" not in done.stderr
    assert not list((tmp_path / "slice").glob("worker-*/ptm-logs/ptm.started")), "nothing started"
    missing = pod({**env, "PTM_ENV_FILE": str(tmp_path / "absent.env")}, "run", "pretrain")
    assert missing.returncode == 2 and f"PTM_ENV_FILE={tmp_path / 'absent.env'}: no such file" in missing.stderr

    for py, message in ((python, f"PTM_PYTHON={python} is Python 3.10; ptm_jax needs Python >= 3.11"),
                        (tmp_path / "absent/python", "does not run")):
        job = subprocess.run(["sbatch", str(REPO / "launch/slurm_gpu.sbatch"), "pretrain", "-c", "bert_tiny"],
                             env=base_env(PTM_PYTHON=str(py), SCONTROL_STANDIN_LOG=str(tmp_path / "scontrol")),
                             cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert job.returncode == 2 and message in job.stderr, job.stderr
        assert "job 77" not in job.stdout  # refused before srun


def test_slurm_sigterm_checkpoints_and_the_job_requeues_itself(data, tmp_path):
    out = tmp_path / "run"
    env_file = tmp_path / "fabric.env"
    env_file.write_text(f'export XLA_FLAGS="{xla_flags(1)}"\nexport JAX_PLATFORMS=cpu\nexport NCCL_IB_HCA=mlx5\n')
    env = base_env(PTM_VENV=sys.prefix, PTM_REPO=str(REPO), PTM_ENV_FILE=str(env_file),
                   SCONTROL_STANDIN_LOG=str(tmp_path / "scontrol"), SRUN_STANDIN_SIGTERM_ON=str(out / "config.json"),
                   UV_STANDIN_LOG=str(tmp_path / "uv.log"))
    job = subprocess.run(["sbatch", str(REPO / "launch/slurm_gpu.sbatch"), *pretrain_args(data, out)], env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    assert "  env: NCCL_IB_HCA=mlx5" in job.stdout and "job 77 (restart 0): 1 nodes x 1 processes" in job.stdout
    assert "srun stand-in: SIGTERM to task 0" in job.stderr
    summary = json.loads((out / "pretrain/summary.json").read_text())
    assert summary["preempted"] is True and 1 <= summary["step"] < STEPS
    assert f"stopping at step {summary['step']} (SIGTERM); checkpoint saved" in job.stdout + job.stderr
    assert "stopped early with a checkpoint; requeueing job 77" in job.stdout
    assert (tmp_path / "scontrol").read_text() == "requeue 77\n"
    # PTM_VENV: the batch step brought the environment to the CUDA lock (install_env.sh, uv) before srun
    assert (tmp_path / "uv.log").read_text().splitlines() == [
        f"pip sync --python {sys.prefix}/bin/python {REPO}/requirements/cuda.lock",
        f"pip install --python {sys.prefix}/bin/python --no-deps -e {REPO}"]


def kill_worker_processes(home: Path) -> None:
    """SIGKILL to every process of a worker (HOME is its folder): the VM went away under them."""
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and f"HOME={home}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGKILL)
        except OSError:
            continue


def steps_in_log(log: Path) -> list[int]:
    return [int(ln.split()[1].split("/")[0]) for ln in log.read_text().splitlines() if re.match(r"^step \d+/", ln)]


def test_watch_recreates_a_preempted_spot_slice_and_the_run_resumes_from_its_last_checkpoint(data, tmp_path,
                                                                                           no_leftovers):
    env = {**slice_of(tmp_path, 1), "SPOT": "1", "ACCELERATOR_TYPE": "v4-8"}
    root, out = tmp_path / "slice", tmp_path / "run"
    args = [*pretrain_args(data, out)[:-4], "train.steps=4", "train.checkpoint_every=2", "train.log_every=1",
            "train.eval_every=0"]
    started = pod(env, "run", *args)
    assert started.returncode == 0, started.stderr
    wait_for(out / "pretrain/checkpoints/2/commit_success.txt", timeout=400)
    # Spot preemption: the VM stops under the run and the node stays PREEMPTED (it never returns to READY)
    (root / "node-state").write_text("PREEMPTED\n")
    kill_worker_processes(root / "worker-0")
    assert pod(env, "health").stdout.split() == ["PREEMPTED"]

    watched = pod(env, "watch", timeout=600)
    assert watched.returncode == 0, watched.stdout[-3000:] + watched.stderr[-3000:]
    lines = [ln.split(" ", 1)[1] for ln in watched.stdout.splitlines() if ln[:1].isdigit()]
    assert lines[:5] == ["tpu: PREEMPTED -> the slice is gone: recreating it (1 of 5)",
                         lines[1], lines[2], lines[3], lines[4]], watched.stdout
    for line, what in zip(lines[1:5], ("delete t: ok", "create v4-8 (spot): ok",
                                       "setup (checkout, requirements/tpu.lock, env file, mount): ok",
                                       "start the saved command (ptm resumes from its last checkpoint): ok")):
        assert line.startswith(f"recreate 1/5: {what}"), watched.stdout
    assert watched.stdout.splitlines()[-1] == "run finished"
    calls = (root / "calls.log").read_text().splitlines()
    assert "compute tpus tpu-vm delete t --zone=us-central2-b --quiet" in calls
    assert ("alpha compute tpus tpu-vm create t --zone=us-central2-b --accelerator-type=v4-8 "
            "--version=tpu-ubuntu2204-base --spot --autocheckpoint-enabled") in calls
    assert (f"pip sync --python {sys.prefix}/bin/python {root}/worker-0/ptm_jax/requirements/tpu.lock"
            in (tmp_path / "uv.log").read_text())
    home = root / "worker-0"
    assert not (home / "ptm_jax").is_symlink() and (home / "ptm_jax/.ptm_commit").read_text().strip()
    log = home / "ptm-logs/ptm.log"  # the new worker's log: the restart alone
    assert steps_in_log(log) == [3, 4], "resumed after checkpoint 2"
    assert "INFO ptm_jax.versions: versions: python" in log.read_text()
    summary = json.loads((out / "pretrain/summary.json").read_text())
    assert summary["step"] == 4 and summary["preempted"] is False


def test_watch_recreates_a_suspended_queued_resource_a_terminated_and_a_deleted_node_within_its_bounds(tmp_path):
    """`ptm config` stands for the run here (it ends at once, as a finished run); what is tested is the slice."""
    root, out = tmp_path / "slice", tmp_path / "cfg"
    env = {**base_env(GCLOUD_STANDIN_ROOT=str(root), VENV=sys.prefix, TPU_NAME="t", WATCH_INTERVAL="1",
                      LOG_DIR=str(tmp_path / "tpu-logs"), UV_STANDIN_LOG=str(tmp_path / "uv.log"), QR_POLL="0"),
           "QUEUED": "1", "ACCELERATOR_TYPE": "v5p-8"}
    assert pod(env, "create").returncode == 0
    setup = pod(env, "setup")
    assert setup.returncode == 0, setup.stdout + setup.stderr
    assert pod(env, "run", "config", "-c", "bert_tiny", f"output_dir={out}").returncode == 0
    calls = (root / "calls.log").read_text()
    assert ("compute tpus queued-resources create t-qr --zone=us-central2-b --node-id=t --accelerator-type=v5p-8 "
            "--runtime-version=tpu-ubuntu2204-base\n") in calls, "v5p: no autocheckpoint (not documented there)"
    refused = pod({**env, "AUTOCHECKPOINT": "1"}, "create")
    assert refused.returncode == 2 and "documents autocheckpointing for v2, v3, v4 and v5e only" in refused.stderr

    # the queued resource is suspended and its node deleted; the first create finds no capacity
    (root / "qr-state").write_text("SUSPENDED\n")
    shutil.rmtree(root / "worker-0")
    watched = pod({**env, "MAX_RECREATES": "2", "GCLOUD_STANDIN_FAIL_CREATES": "1"}, "watch", timeout=300)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    said = [ln.split(" ", 1)[1] for ln in watched.stdout.splitlines() if ln[:1].isdigit()]
    assert said[0] == "queued resource t-qr: SUSPENDED, tpu: DELETED -> the slice is gone: recreating it (1 of 2)"
    assert said[1].startswith("recreate 1/2: delete queued resource t-qr: ok")
    assert said[2].startswith("recreate 1/2: create v5p-8 (queued): failed (exit 1): ERROR: ") \
        and "RESOURCE_EXHAUSTED" in said[2], said
    assert said[3] == "recreate 1/2 did not finish; trying again at the next poll"
    assert said[4] == "queued resource t-qr: DELETED, tpu: DELETED -> the slice is gone: recreating it (2 of 2)"
    assert [s.split(":")[0] for s in said[5:9]] == ["recreate 2/2"] * 4 and all(": ok (" in s for s in said[5:9])
    assert set(said[9:-1]) <= {"tpu: READY  run: running"} and said[-1] == "tpu: READY  run: done"
    assert watched.stdout.splitlines()[-1] == "run finished"
    assert (root / "worker-0/ptm-logs/ptm.cmd").read_text().split() == ["config", "-c", "bert_tiny",
                                                                         f"output_dir={out}"]

    (root / "node-state").write_text("TERMINATED\n")
    gave_up = pod({**env, "MAX_RECREATES": "0"}, "watch", timeout=60)
    assert gave_up.returncode == 2 and "tpu: TERMINATED; MAX_RECREATES=0 reached" in gave_up.stderr

    plain = {**env, "QUEUED": "0"}  # a TPU VM created directly, then deleted (by a person, or a cleanup job)
    assert pod(plain, "delete").returncode == 0 and pod(plain, "health").returncode != 0
    watched = pod(plain, "watch", timeout=300)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert "tpu: DELETED -> the slice is gone: recreating it (1 of 5)" in watched.stdout
    assert "recreate 1/5: delete t: ok" in watched.stdout, "nothing to delete counts as deleted"


def test_watch_takes_a_run_without_new_steps_for_a_hang_writes_the_stacks_stops_and_resumes(data, tmp_path,
                                                                                           no_leftovers):
    device, lockfile = tmp_path / "dev/accel0", tmp_path / "libtpu_lockfile"
    device.parent.mkdir()
    device.write_text("")
    env = {**slice_of(tmp_path, 1), "HANG_SECONDS": "15", "STACKS_WAIT": "2", "TPU_DEVICE_FILES": str(device),
           "LIBTPU_LOCKFILE": str(lockfile)}
    home, out = tmp_path / "slice/worker-0", tmp_path / "run"
    args = [*pretrain_args(data, out)[:-4], "train.steps=30", "train.log_every=1", "train.eval_every=0"]
    assert pod(env, "run", *args).returncode == 0
    log = home / "ptm-logs/ptm.log"
    deadline = time.time() + 400
    while not steps_in_log(log):
        assert time.time() < deadline, "no step within 400 s"
        time.sleep(0.02)
    pid = int((home / "ptm-logs/ptm.pid").read_text().split()[0])
    os.kill(pid, signal.SIGSTOP)  # the hang: python makes no progress (as in a collective that never returns)
    # left over from an earlier run: a process that holds the TPU, and libtpu's lock file
    with open(device) as held:  # closed here at once: only the stale process holds it
        stale = subprocess.Popen(["sleep", "600"], stdin=held)
    lockfile.write_text("")
    try:
        watched = pod(env, "watch", timeout=600)
        assert stale.wait(timeout=5) == -signal.SIGKILL
    finally:
        if stale.poll() is None:
            stale.kill()
    assert watched.returncode == 0, watched.stdout[-3000:] + watched.stderr[-3000:]
    said = watched.stdout
    assert re.search(r"hang: no new step for \d+ s \(last step: \d+; limit 15 s\): collecting stacks, stopping", said)
    assert f"  stacks: {socket.gethostname()} pid {pid}: faulthandler stacks requested (SIGUSR1)" in said
    assert "exited 0 after" in said and "run: stopped-early" in said and said.splitlines()[-1] == "run finished"
    text = log.read_text()
    dump = text[text.index("stacks of pid"):]
    assert "Thread 0x" in dump and re.search(r'File ".*ptm_jax/train/loop\.py", line \d+ in fit', dump), dump[:3000]
    assert f"cleared: killed stale process {stale.pid} (sleep 600), which held the TPU" in text
    assert f"cleared: removed libtpu's lock file {lockfile}" in text and not lockfile.exists()
    summary = json.loads((out / "pretrain/summary.json").read_text())
    assert summary["step"] == 30 and summary["preempted"] is False
