"""Resuming is exact: a pretrain run SIGKILLed mid-way and restarted with the same command ends with the
parameters of an uninterrupted run, and a checkpoint written on mesh (8,1,1) continues on (2,2,2) and
(1,4,2) with the uninterrupted run's losses (docs/reliability.md; orbax writes each step atomically).

The uninterrupted reference and the killed/restarted run are real ``python -m ptm_jax.cli pretrain``
subprocesses sharing one tokenizer, token cache and JAX persistent compilation cache (compiled executables
are reused, numerics are unchanged); the re-meshed continuations run ``loop.fit`` in this process.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from xla_env import xla_flags

from ptm_jax import config_loading as config_lib
from ptm_jax.config_loading import load_config
from ptm_jax.export.params import load_params
from ptm_jax.objectives.registry import build_objective
from ptm_jax.parallel.mesh import make_mesh
from ptm_jax.train import stages
from ptm_jax.train.loop import fit

REPO = Path(__file__).resolve().parent.parent
# 20 steps, as tests/test_preemption.py: the step bakes ``train.steps`` into its learning-rate schedule, so the
# two modules' `ptm pretrain` processes compile the same programs and the run's compilation cache serves both
STEPS, EVERY, KILL_AT = 20, 5, 10
ENV = {**os.environ, "XLA_FLAGS": xla_flags(8), "JAX_PLATFORMS": "cpu",
       "USE_TF": "0", "TF_CPP_MIN_LOG_LEVEL": "2", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO),
       "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


def run_overrides(shared: dict[str, str], out: Path) -> list[str]:
    return [f"data.corpus={shared['corpus']}", f"tokenizer.vocab_file={shared['vocab']}",
            f"data.cache_dir={shared['cache']}", f"output_dir={out}", f"train.steps={STEPS}",
            f"train.checkpoint_every={EVERY}", "train.keep_checkpoints=10", "train.async_checkpoints=true",
            "train.log_every=1", "train.eval_every=0"]


def ptm(*args: str) -> list[str]:
    return [sys.executable, "-m", "ptm_jax.cli", *args]


def complete_steps(ckpt_dir: Path) -> list[int]:
    """Steps with a finished checkpoint (orbax renames its temporary directory to the bare step number)."""
    return sorted(int(p.name) for p in ckpt_dir.glob("*") if p.name.isdigit()) if ckpt_dir.is_dir() else []


def train_losses(stage_dir: Path) -> dict[int, float]:
    """step -> loss of the last record of each step in metrics.jsonl (a resumed run appends to it)."""
    out = {}
    for line in (stage_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("split") == "train":
            out[rec["step"]] = rec["loss"]
    return out


def max_abs_diff(a: dict, b: dict) -> float:
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb) and jax.tree.structure(a) == jax.tree.structure(b)
    return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)))) for x, y in zip(la, lb))


@pytest.fixture(scope="module")
def shared(shared_data, tmp_path_factory) -> dict[str, str]:
    """One tokenizer and token cache, built once by `ptm data` and reused by every run of this module."""
    from ptm_jax.cli import main

    root = tmp_path_factory.mktemp("resume_shared")
    corpus = str(shared_data / "corpus/tinyshakespeare/input.txt")
    assert main(["data", "-c", "bert_tiny", f"data.corpus={corpus}", "tokenizer.vocab_size=1000",
                 f"data.cache_dir={root / 'cache'}", f"output_dir={root / 'data'}"]) == 0
    return {"corpus": corpus, "vocab": str(root / "data/tokenizer/vocab.txt"), "cache": str(root / "cache")}


def env(shared: dict[str, str]) -> dict[str, str]:
    return dict(ENV)


@pytest.fixture(scope="module")
def reference(shared, tmp_path_factory) -> Path:
    """The uninterrupted run on the default mesh (8,1,1), keeping a checkpoint every 5 steps."""
    out = tmp_path_factory.mktemp("resume_reference")
    assert make_mesh(load_config("bert_tiny", run_overrides(shared, out)).mesh).devices.shape == (8, 1, 1)
    done = subprocess.run(ptm("pretrain", "-c", "bert_tiny", *run_overrides(shared, out)), env=env(shared),
                          cwd=out, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert complete_steps(out / "pretrain/checkpoints") == list(range(EVERY, STEPS + 1, EVERY))
    return out


def test_sigkill_midway_then_same_command_ends_with_the_uninterrupted_parameters(shared, reference, tmp_path):
    out = tmp_path / "run"
    cmd = ptm("pretrain", "-c", "bert_tiny", *run_overrides(shared, out))
    ckpts = out / "pretrain/checkpoints"
    log = tmp_path / "killed.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen(cmd, env=env(shared), cwd=tmp_path, stdout=sink, stderr=subprocess.STDOUT)
        try:
            deadline = time.time() + 300
            while not any(s >= KILL_AT for s in complete_steps(ckpts)):
                assert proc.poll() is None, log.read_text()[-3000:]
                assert time.time() < deadline, "no checkpoint >= step 10 within 300 s"
                time.sleep(0.02)
            proc.kill()  # SIGKILL: no handler, no final save, possibly mid async save
        finally:
            proc.kill()
            proc.wait()
    assert proc.returncode == -9
    killed_at = max(complete_steps(ckpts))
    assert KILL_AT <= killed_at < STEPS, f"the run was not interrupted mid-way (latest checkpoint {killed_at})"
    lines_before = len((out / "pretrain/metrics.jsonl").read_text().splitlines())

    done = subprocess.run(cmd, env=env(shared), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert f"pretrain: step {STEPS}" in done.stdout
    resumed = [json.loads(x) for x in (out / "pretrain/metrics.jsonl").read_text().splitlines()[lines_before:]]
    assert resumed[0]["step"] == killed_at + 1, "the restart did not continue from the latest checkpoint"
    assert [r["step"] for r in resumed if r["split"] == "train"] == list(range(killed_at + 1, STEPS + 1))

    ref_loss, got_loss = train_losses(reference / "pretrain"), train_losses(out / "pretrain")
    steps = range(killed_at + 1, STEPS + 1)
    np.testing.assert_allclose([got_loss[s] for s in steps], [ref_loss[s] for s in steps], rtol=1e-5)
    ref_params, _, ref_info, _ = load_params(reference)
    got_params, _, got_info, _ = load_params(out)
    assert ref_info["step"] == got_info["step"] == STEPS
    assert max_abs_diff(got_params, ref_params) <= 1e-6


@pytest.mark.parametrize("shape", [(2, 2, 2), (1, 4, 2)])
def test_checkpoint_from_mesh_8_1_1_continues_on_another_mesh_with_the_same_losses(shared, reference, tmp_path,
                                                                                   shape):
    start, more = 15, 5
    stage = tmp_path / "pretrain"
    shutil.copytree(reference / f"pretrain/checkpoints/{start}", stage / f"checkpoints/{start}")
    cfg = load_config("bert_tiny", run_overrides(shared, tmp_path) + [
        f"mesh.data={shape[0]}", f"mesh.fsdp={shape[1]}", f"mesh.tensor={shape[2]}"])
    mesh = make_mesh(cfg.mesh)
    assert mesh.devices.shape == shape
    objective = build_objective(cfg, stages.prepare_corpus(cfg))
    result = fit(objective, cfg.train, mesh, stage, stop_after=more, meta={"config": config_lib.to_dict(cfg)})
    assert result.step == start + more

    kernel = result.state.params["params"]["bert"]["encoder"]["layers_0"]["intermediate"]["dense"]["kernel"]
    assert dict(kernel.sharding.mesh.shape) == dict(zip(("data", "fsdp", "tensor"), shape))
    assert len(kernel.sharding.device_set) == 8
    ref_loss, got_loss = train_losses(reference / "pretrain"), train_losses(stage)
    steps = list(range(start + 1, start + more + 1))
    assert sorted(got_loss) == steps
    np.testing.assert_allclose([got_loss[s] for s in steps], [ref_loss[s] for s in steps], rtol=1e-5,
                               err_msg=f"mesh {shape}")
    # the parameters after the continuation equal the reference's checkpoint of the same step
    ref_copy = tmp_path / "ref_copy/pretrain"
    shutil.copytree(reference / f"pretrain/checkpoints/{start + more}", ref_copy / f"checkpoints/{start + more}")
    ref_params, _, ref_info, _ = load_params(ref_copy)
    got_params, _, got_info, _ = load_params(stage)
    assert ref_info["step"] == got_info["step"] == start + more
    assert max_abs_diff(got_params, ref_params) <= 1e-6
