"""The whole `ptm run` on 2 processes with ``output_dir=gs://...`` against a local GCS emulator (fake-gcs-server,
tests/gcs_emulator.py), SIGKILLed mid-pretraining and resumed by running the same command again; then `ptm eval`
and `ptm export` read and write the bucket.

R = the uninterrupted 2-process run into gs://ptm-show/ref. K = the same command into gs://ptm-show/run, killed
(SIGKILL of the launcher and both processes at once: no handler runs) as soon as pretraining's step-4
checkpoint is committed in the bucket, and run again to the end; then `ptm eval` (2 processes) and `ptm export
--format hf` (in this process, one launch less) on K's best model. K's metrics, best model, prediction file and
exported weights must equal R's. Tolerances as tests/test_resume.py: losses rtol 1e-5, weights 1e-6 (measured
here: equal). Task: GLUE WNLI (64 training examples, 71 dev examples), bert_tiny, 8 pretraining steps.

Everything lives in the bucket, with the defaults: the tokenizer (trained by process 0 into
``<output_dir>/tokenizer``), the token cache (``<output_dir>/cache``), config, metrics, TensorBoard, checkpoints,
params, predictions and the export. The rerun reuses the killed run's tokenizer and cache from the bucket.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from xla_env import xla_flags

from tests.gcs_emulator import GcsEmulator, apply_env

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
BUCKET = "ptm-show"
STEPS, EVERY = 8, 4
ENV = {**os.environ, "XLA_FLAGS": xla_flags(8), "JAX_PLATFORMS": "cpu",
       "USE_TF": "0", "TF_CPP_MIN_LOG_LEVEL": "2", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO),
       "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


def two_processes(args: list[str]) -> list[str]:
    return [sys.executable, str(REPO / "launch/local_multiprocess.py"), "-n", "2", "--devices-per-process", "4",
            "--timeout", "560", "--no-flags", "--", "ptm", *args]


def run(args: list[str], env: dict, cwd: Path, name: str) -> str:
    done = subprocess.run(two_processes(args), env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    (cwd / f"{name}.log").write_text(done.stdout + done.stderr)
    errors = [line for line in done.stdout.splitlines() if "Error" in line or "error" in line]
    assert done.returncode == 0, f"{name}: see {cwd / name}.log\n" + "\n".join(errors[:20]) + done.stdout[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def show(shared_data, tmp_path_factory) -> dict:
    from ptm_jax.cli import main

    root = tmp_path_factory.mktemp("gcs_run")
    (root / "scratch").mkdir()
    saved = dict(os.environ)
    emu = GcsEmulator(root / "gcs").start()
    try:
        apply_env(emu.env)
        emu.create_bucket(BUCKET)
        env = {**ENV, **emu.env, "PTM_LOCAL_SCRATCH": str(root / "scratch")}
        task = ["finetune.task=wnli", f"finetune.data_dir={shared_data / 'glue'}"]
        common = ["-c", "bert_tiny", f"train.steps={STEPS}", "train.log_every=1",
                  f"train.eval_every={EVERY}", "train.eval_batches=1", f"train.checkpoint_every={EVERY}",
                  "finetune.train_subset=64", "finetune.epochs=1", "finetune.batch_size=16", "finetune.eval_every=2",
                  "finetune.learning_rate=1e-3", *task]
        timings = {}
        t = time.time()
        run(["run", *common, f"output_dir=gs://{BUCKET}/ref"], env, root, "reference")
        timings["reference run"] = time.time() - t

        # K: killed as soon as pretraining's step-4 checkpoint is committed (orbax's commit_success.txt)
        t = time.time()
        cmd = two_processes(["run", *common, f"output_dir=gs://{BUCKET}/run"])
        marker = f"run/pretrain/checkpoints/{EVERY}/commit_success.txt"
        with open(root / "killed.log", "wb") as sink:
            proc = subprocess.Popen(cmd, env=env, cwd=root, stdout=sink, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            try:
                deadline = time.time() + 400
                while marker not in emu.objects(BUCKET, "run/pretrain/checkpoints/"):
                    assert proc.poll() is None, (root / "killed.log").read_text()[-3000:]
                    assert time.time() < deadline, "no step-4 checkpoint within 400 s"
                    time.sleep(0.05)
                os.killpg(proc.pid, signal.SIGKILL)  # the launcher and both training processes
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        killed_objects = emu.objects(BUCKET, "run/")
        from ptm_jax import fs

        tokenizer_marker = fs.read_text(f"gs://{BUCKET}/run/tokenizer/{fs.MARKER}")  # a fresh token per publish
        timings["killed run"] = time.time() - t
        t = time.time()
        resumed_log = run(["run", *common, f"output_dir=gs://{BUCKET}/run"], env, root, "resumed")
        timings["resumed run"] = time.time() - t
        t = time.time()
        best = f"gs://{BUCKET}/run/finetune-wnli/best"
        run(["eval", "-c", "bert_tiny", *task, "--model", best, "--predictions", f"gs://{BUCKET}/run/predictions"],
            env, root, "eval")
        timings["eval"] = time.time() - t
        t = time.time()  # in this process (1 process, 8 devices): one launch less
        os.environ["PTM_LOCAL_SCRATCH"] = env["PTM_LOCAL_SCRATCH"]
        assert main(["export", best, "--format", "hf", "--out", f"gs://{BUCKET}/run/export-hf"]) == 0
        timings["export"] = time.time() - t
        print("timings (s):", {k: round(v, 1) for k, v in timings.items()})
        yield {"emu": emu, "root": root, "killed_objects": killed_objects, "resumed_log": resumed_log,
               "returncode": proc.returncode, "tokenizer_marker": tokenizer_marker}
    finally:
        emu.stop()
        os.environ.clear()
        os.environ.update(saved)
        apply_env({})


def records(stage: str, split: str) -> dict[int, dict]:
    """The records of a stage's metrics.jsonl on the bucket, the last one of each step (a resumed run logs
    the steps after its checkpoint again)."""
    from ptm_jax.train.metrics import read_metrics

    return {r["step"]: r for r in read_metrics(f"gs://{BUCKET}/{stage}/metrics.jsonl") if r["split"] == split}


def committed_steps(objects: list[str], stage: str) -> list[int]:
    suffix = "/commit_success.txt"
    prefix = f"run/{stage}/checkpoints/"
    return sorted(int(o[len(prefix):-len(suffix)]) for o in objects
                  if o.startswith(prefix) and o.endswith(suffix) and o[len(prefix):-len(suffix)].isdigit())


def test_the_kill_hit_mid_pretraining_and_the_rerun_resumed_from_the_bucket(show):
    assert show["returncode"] == -signal.SIGKILL
    killed = show["killed_objects"]
    assert EVERY <= max(committed_steps(killed, "pretrain")) < STEPS, "killed mid-pretraining"
    assert not any(o.startswith("run/finetune-wnli/best/") for o in killed)
    from ptm_jax.train.metrics import read_metrics

    # the killed run's records (flushed up to its step-4 evaluation at least), then the rerun's from step 5
    steps = [r["step"] for r in read_metrics(f"gs://{BUCKET}/run/pretrain/metrics.jsonl") if r["split"] == "train"]
    m = len(steps) - 1 - steps[::-1].index(EVERY + 1)  # where the rerun's records begin
    assert steps[:m] == list(range(1, m + 1)) and m >= EVERY and steps[m:] == list(range(EVERY + 1, STEPS + 1)), \
        f"the rerun did not continue from the step-{EVERY} checkpoint: train steps logged {steps}"
    objects = show["emu"].objects(BUCKET, "run/")
    assert committed_steps(objects, "pretrain") == [EVERY, STEPS]
    # tokenizer and token cache in the bucket, committed by their markers; the rerun reused the tokenizer
    assert {"run/tokenizer/vocab.txt", "run/tokenizer/COMPLETE"} <= set(objects)
    assert [o for o in objects if o.startswith("run/cache/") and o.endswith("/COMPLETE")]
    from ptm_jax import fs

    assert fs.read_text(f"gs://{BUCKET}/run/tokenizer/COMPLETE") == show["tokenizer_marker"]
    assert not (show["root"] / "gs:").exists(), "a gs:// path was turned into a local folder"


def test_resumed_run_on_gs_has_the_metrics_of_the_uninterrupted_run(show):
    for stage, split in (("pretrain", "train"), ("pretrain", "eval"), ("finetune-wnli", "train"),
                         ("finetune-wnli", "eval")):
        ref, got = records(f"ref/{stage}", split), records(f"run/{stage}", split)
        assert sorted(got) == sorted(ref) and ref, f"{stage} {split}: steps {sorted(got)} vs {sorted(ref)}"
        for step in ref:
            for key in ("loss", "mlm_loss", "accuracy", "nsp_accuracy"):
                if key in ref[step]:
                    np.testing.assert_allclose(got[step][key], ref[step][key], rtol=1e-5,
                                               err_msg=f"{stage} {split} step {step} {key}")
    assert sorted(records("run/pretrain", "train")) == list(range(1, STEPS + 1))
    from ptm_jax import fs

    ref_sum = json.loads(fs.read_text(f"gs://{BUCKET}/ref/summary.json"))
    got_sum = json.loads(fs.read_text(f"gs://{BUCKET}/run/summary.json"))
    assert got_sum["finetune"]["best"] == ref_sum["finetune"]["best"]
    assert got_sum["pretrain"]["step"] == STEPS and not got_sum["pretrain"]["preempted"]
    for name in ("config.json", "pretrain/curves.png", "finetune-wnli/best.json", "finetune-wnli/curves.png"):
        assert fs.exists(f"gs://{BUCKET}/run/{name}"), name
    assert [o for o in show["emu"].objects(BUCKET, "run/pretrain/tb/") if "tfevents" in o]


def test_eval_and_export_on_gs_give_the_uninterrupted_runs_weights_and_predictions(show):
    from safetensors.numpy import load_file

    from ptm_jax import fs
    from ptm_jax.export.params import load_params
    from ptm_jax.families.bert.hf import params_to_hf

    ref, ref_cfg, ref_info, _ = load_params(f"gs://{BUCKET}/ref/finetune-wnli/best")
    got, _, got_info, tok_dir = load_params(f"gs://{BUCKET}/run/finetune-wnli/best")
    assert got_info["step"] == ref_info["step"] and (tok_dir / "vocab.txt").is_file()
    diff = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
               for a, b in zip(jax.tree.leaves(ref), jax.tree.leaves(got)))
    assert diff <= 1e-6, f"best params differ by {diff}"

    export = f"gs://{BUCKET}/run/export-hf"
    assert fs.is_complete(export)
    hf = load_file(str(fs.local_copy(export) / "model.safetensors"))
    want, _ = params_to_hf(ref, ref_cfg, ref_info["head"])
    assert sorted(hf) == sorted(want) and len(hf) > 10
    for name, value in want.items():
        np.testing.assert_allclose(hf[name], value, atol=1e-6, err_msg=name)

    preds = f"gs://{BUCKET}/run/predictions"
    ev = json.loads(fs.read_text(f"{preds}/eval.json"))
    best = json.loads(fs.read_text(f"gs://{BUCKET}/ref/finetune-wnli/best.json"))
    assert ev["metrics"]["accuracy"] == best["metrics"]["accuracy"]
    files = [p for p in ev["prediction_files"] if p.startswith("gs://")]
    assert files and len(fs.read_text(files[0]).splitlines()) == 72, "a header and one row per WNLI dev example"
