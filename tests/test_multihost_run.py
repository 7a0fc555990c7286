"""The whole `ptm run` on 2 and 4 processes (jax.distributed over 127.0.0.1, 8 CPU devices in all) equals the
1-process run: pretraining, finetuning with an evaluation and a best-model save every 2 steps, then `ptm eval`
and `ptm export` on the same process count.

- 2 processes x 4 devices: JAX's device order, each process holds a contiguous block of every batch (GPU
  clusters).
- 4 processes x 2 devices with ``mesh.device_order=interleaved``: the mesh alternates processes, so process 0
  holds rows [0, 1, 8, 9] of a 16-row batch, as TPU pods do; the prediction files must still line up with
  their examples (``local_batches`` feeds, and evaluation reads back, the rows each process really holds).

Tolerance: the multi-process runs reduce across processes through gloo instead of within one process, so
sums are added in another order: losses agree to rtol 1e-5, weights to 1e-5 (the bound
tests/test_multiprocess.py also uses), the raw dev logits (`ptm eval`'s outputs.npz) to 1e-7 (measured: ~1e-8);
the prediction files are equal. Task: GLUE WNLI from ../shared/data/glue (71 dev examples in 3 evaluation
batches of 32), 64 training examples, bert_tiny. The old feed (each process's contiguous block of examples put
on the rows its devices hold) fails this on the interleaved mesh: checked by hand with STS-B, 1121 of 1500 raw
scores of a 4-process `ptm eval` moved and Pearson went from -0.066 to -0.026, the loss unchanged.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from xla_env import xla_flags

from ptm_jax.export.params import load_params

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "XLA_FLAGS": xla_flags(8), "JAX_PLATFORMS": "cpu",
       "USE_TF": "0", "TF_CPP_MIN_LOG_LEVEL": "2", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO),
       "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
LAYOUTS = {1: [], 2: [], 4: ["mesh.device_order=interleaved"]}
"""process count -> extra overrides (the 4-process run's mesh is out of host order)."""


def command(n: int, args: list[str]) -> list[str]:
    if n == 1:
        return [sys.executable, "-m", "ptm_jax.cli", *args]
    return [sys.executable, str(REPO / "launch/local_multiprocess.py"), "-n", str(n), "--devices-per-process",
            str(8 // n), "--timeout", "560", "--no-flags", "--", "ptm", *args]


def run(n: int, args: list[str], env: dict, cwd: Path) -> str:
    done = subprocess.run(command(n, args), env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done.stdout


@pytest.fixture(scope="module")
def runs(shared_data, tmp_path_factory) -> dict[int, Path]:
    from ptm_jax.cli import main

    root = tmp_path_factory.mktemp("multihost_run")
    assert main(["data", "-c", "bert_tiny", f"data.cache_dir={root / 'cache'}", f"output_dir={root / 'data'}"]) == 0
    env = dict(ENV)
    task = ["finetune.task=wnli", f"finetune.data_dir={shared_data / 'glue'}", "finetune.batch_size=32"]
    common = ["-c", "bert_tiny", f"tokenizer.vocab_file={root / 'data/tokenizer/vocab.txt'}",
              f"data.cache_dir={root / 'cache'}", "train.steps=4", "train.log_every=1", "train.eval_every=4",
              "train.eval_batches=1", "train.checkpoint_every=4", "finetune.train_subset=64", "finetune.epochs=2",
              "finetune.eval_every=2", *task]
    outs = {}
    for n, extra in LAYOUTS.items():
        out = root / f"p{n}"
        best = out / "finetune-wnli/best"
        log = run(n, ["run", *common, *extra, f"output_dir={out}"], env, root)
        assert n == 1 or f"[p{n - 1}]" in log, "every process ran"
        run(n, ["eval", "-c", "bert_tiny", *task, *extra, "--model", str(best), "--predictions",
                str(out / "predictions")], env, root)
        run(n, ["export", str(best), "--format", "params", "--out", str(out / "export-params")], env, root)
        run(n, ["export", str(best), "--format", "hf", "--out", str(out / "export-hf")], env, root)
        outs[n] = out
    return outs


def measured(record: dict) -> list[str]:
    """A metrics record's keys without its bookkeeping and speeds."""
    return sorted(k for k in record if k not in ("step", "split", "time", "input_wait_share", "mfu")
                  and not k.endswith("_per_sec"))


def close(ref: dict, got: dict, keys: list[str], where: str) -> None:
    for k in keys:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-7, err_msg=f"{where}: {k}")


def records(stage: Path, split: str) -> list[dict]:
    rows = [json.loads(x) for x in (stage / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["split"] == split]


@pytest.mark.parametrize("n", [2, 4])
def test_pretraining_and_finetuning_metrics_equal_the_one_process_run(runs, n):
    for stage, split in (("pretrain", "train"), ("pretrain", "eval"), ("finetune-wnli", "train"),
                         ("finetune-wnli", "eval")):
        ref, got = records(runs[1] / stage, split), records(runs[n] / stage, split)
        assert ref and [r["step"] for r in got] == [r["step"] for r in ref], f"{stage} {split} steps"
        for a, b in zip(ref, got):
            keys = measured(a)
            assert keys and keys == measured(b), f"{stage} {split} keys"
            close(a, b, keys, f"{stage} {split} step {a['step']}")
    ref_eval = records(runs[1] / "finetune-wnli", "eval")
    assert [r["step"] for r in ref_eval] == [2, 4], "finetuning evaluates every 2 steps"
    best_ref = json.loads((runs[1] / "finetune-wnli/best.json").read_text())
    best = json.loads((runs[n] / "finetune-wnli/best.json").read_text())
    assert best["step"] == best_ref["step"] and best["metrics"]["accuracy"] == best_ref["metrics"]["accuracy"]


@pytest.mark.parametrize("n", [2, 4])
def test_prediction_files_line_up_with_their_examples_as_in_the_one_process_run(runs, n):
    ref_dir, got_dir = runs[1] / "predictions", runs[n] / "predictions"
    names = sorted(p.name for p in ref_dir.iterdir())
    assert names == ["WNLI.dev.tsv", "eval.json", "outputs.npz"]
    assert sorted(p.name for p in got_dir.iterdir()) == names
    ref_rows = (ref_dir / "WNLI.dev.tsv").read_text().splitlines()
    assert len(ref_rows) == 72 and ref_rows[0] == "index\tprediction", "a header and one row per dev example"
    assert (got_dir / "WNLI.dev.tsv").read_text().splitlines() == ref_rows
    # the full-precision logits, row by row: this briefly trained model predicts one label for every example,
    # but its logit margins differ between examples by far more than the tolerance (measured: ~1e-8)
    with np.load(ref_dir / "outputs.npz") as r, np.load(got_dir / "outputs.npz") as g:
        ref_raw, got_raw = r["logits"][:71], g["logits"][:71]
    assert ref_raw.shape == got_raw.shape == (71, 2)
    margin = ref_raw[:, 1] - ref_raw[:, 0]
    assert np.ptp(margin) > 100 * 1e-7 and len(np.unique(margin)) > 60, "logits differ: a misplaced row shows"
    np.testing.assert_allclose(got_raw, ref_raw, rtol=0, atol=1e-7)
    ref_eval, got_eval = (json.loads((d / "eval.json").read_text()) for d in (ref_dir, got_dir))
    keys = sorted(ref_eval["metrics"])
    assert keys == ["accuracy", "loss"] and sorted(got_eval["metrics"]) == keys
    close(ref_eval["metrics"], got_eval["metrics"], keys, "ptm eval")


@pytest.mark.parametrize("n", [2, 4])
def test_exported_weights_equal_the_one_process_run(runs, n):
    from safetensors.numpy import load_file

    for kind in ("finetune-wnli/best", "export-params"):
        ref, _, ref_info, _ = load_params(runs[1] / kind)
        got, _, got_info, _ = load_params(runs[n] / kind)
        assert got_info["step"] == ref_info["step"] and got_info["head"] == "sequence_classification"
        assert jax.tree.structure(got) == jax.tree.structure(ref)
        diff = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                   for a, b in zip(jax.tree.leaves(ref), jax.tree.leaves(got)))
        assert diff <= 1e-5, f"{kind}: max |difference| {diff}"
    ref_hf = load_file(str(runs[1] / "export-hf/model.safetensors"))
    got_hf = load_file(str(runs[n] / "export-hf/model.safetensors"))
    assert sorted(got_hf) == sorted(ref_hf) and len(ref_hf) > 10
    for name, value in ref_hf.items():
        np.testing.assert_allclose(got_hf[name], value, atol=1e-5, err_msg=name)
    files = sorted(p.name for p in (runs[n] / "export-hf").iterdir())
    assert files == sorted(p.name for p in (runs[1] / "export-hf").iterdir()) and "config.json" in files
    leftovers = [p.name for p in runs[n].glob("**/.*partial*")] + [p.name for p in runs[n].glob("**/.*.old")]
    assert not leftovers, f"staging folders left behind: {leftovers}"
