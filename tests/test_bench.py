"""`ptm bench` (train and data modes) and `ptm compile` on the 8 virtual CPU devices of conftest.py."""
from __future__ import annotations

import argparse
import json
import logging
import math

import pytest
from xla_env import xla_flags

from ptm_jax.bench import aot, harness
from ptm_jax.commands import bench as commands
from ptm_jax.config_loading import load_config
from ptm_jax.errors import ConfigError

TRAIN_KEYS = {"compile_s", "step_s_median", "step_s_p10", "step_s_p90", "step_s_std", "tokens_per_s",
              "examples_per_s", "model_flops_per_step", "xla_flops_per_step", "xla_matmul_flops_per_step",
              "model_tflops_per_s", "mfu", "memory_per_device", "params", "first_loss", "final_loss", "env"}


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ptm")
    commands.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


@pytest.fixture(scope="module")
def tiny_bench() -> dict:
    # default mesh: data=-1 -> all 8 devices, batch 16 split 2 per device
    return harness.bench(load_config("bert_tiny"), steps=3, warmup=1, peak_tflops=100.0)


def test_bench_bert_tiny_reports_positive_finite_figures(tiny_bench):
    r = tiny_bench
    assert TRAIN_KEYS <= set(r)
    assert r["devices"] == 8 and r["mesh"] == {"data": 8, "fsdp": 1, "tensor": 1}
    for key in ("compile_s", "step_s_median", "step_s_p10", "step_s_p90", "tokens_per_s", "examples_per_s",
                "model_flops_per_step", "xla_flops_per_step", "model_tflops_per_s", "mfu", "final_loss"):
        assert math.isfinite(r[key]) and r[key] > 0, key
    assert r["step_s_p10"] <= r["step_s_median"] <= r["step_s_p90"]
    assert r["tokens_per_s"] == pytest.approx(16 * 64 / r["step_s_median"])
    assert r["examples_per_s"] == pytest.approx(16 / r["step_s_median"])
    # the 8 per-device programs together run exactly the analytic matmuls of the global batch
    assert r["xla_matmul_flops_per_step"] == pytest.approx(r["model_flops_per_step"], rel=1e-6)
    assert r["mfu"] == pytest.approx(r["model_flops_per_step"] / r["step_s_median"] / (100e12 * 8))
    assert r["params"] == 54_506
    mem = r["memory_per_device"]
    assert mem["total_bytes"] == mem["argument_bytes"] + mem["output_bytes"] + mem["temp_bytes"] > 0
    # replicated params + two AdamW moments (fp32) are part of every device's arguments
    assert mem["argument_bytes"] >= 3 * 4 * r["params"]
    assert 0.0 < r["first_loss"] < 20.0  # about ln(1000) + ln(2) at init


def test_dense_mlm_head_same_loss_more_flops(tiny_bench):
    r = harness.bench(load_config("bert_tiny"), steps=1, warmup=0, mesh_shape=(1, 1, 1), mlm_head="dense")
    assert r["first_loss"] == pytest.approx(tiny_bench["first_loss"], rel=1e-4)
    # logits at 64 positions instead of 10: the head's matmuls grow 6.4x
    extra = r["model_flops_per_step"] - tiny_bench["model_flops_per_step"]
    assert extra == pytest.approx(tiny_bench["model_flops_breakdown"]["mlm_head"] * 5.4, rel=1e-6)
    assert r["xla_matmul_flops_per_step"] == pytest.approx(r["model_flops_per_step"], rel=1e-6)


def test_compile_command_reports_per_device_memory_for_2x2x2(tmp_path, capsys):
    out = tmp_path / "compile.json"
    args = _parse(["compile", "-c", "bert_tiny", "--mesh", "2,2,2", "--device-type", "cpu", "--json", str(out)])
    assert args.handler(args) == 0
    printed = capsys.readouterr().out
    assert "mesh {'data': 2, 'fsdp': 2, 'tensor': 2} on 8 x cpu" in printed
    assert "temporaries per device" in printed and "total per device" in printed
    r = json.loads(out.read_text())
    assert r["devices"] == 8 and r["mesh"] == {"data": 2, "fsdp": 2, "tensor": 2}
    mem = r["memory_per_device"]
    assert mem["temp_bytes"] > 0 and mem["total_bytes"] > mem["argument_bytes"] > 0
    # fsdp x tensor = 4 shards of the fp32 params and both AdamW moments (tiny: every sharded dim divides)
    full_state = 3 * 4 * r["params"]
    assert full_state / 4 <= r["state_bytes_per_device"] < full_state / 3


def test_compile_errors_name_the_fix():
    with pytest.raises(ConfigError, match="three sizes data,fsdp,tensor"):
        aot.parse_mesh("2,2")
    with pytest.raises(ConfigError, match="needs 16 devices but 8 are attached"):
        aot.resolve_devices("local", 16)
    with pytest.raises(ConfigError, match="jax\\[tpu\\]"):
        aot.resolve_devices("v5e:4x4", 16)
    with pytest.raises(ConfigError, match="no GPU topology API"):
        aot.resolve_devices("h100", 8)
    with pytest.raises(ConfigError, match="train.batch_size=12 does not divide over the mesh.*multiple of 8"):
        aot.compile_report(load_config("bert_tiny", ["train.batch_size=12"]), (8, 1, 1))


def test_bench_data_mode_streams_real_text(shared_data, tmp_path, capsys, caplog):
    corpus = shared_data / "corpus" / "tinyshakespeare" / "input.txt"
    out = tmp_path / "data.json"
    args = _parse(["bench", "--mode", "data", "-c", "bert_tiny", f"data.corpus='{corpus}'", "--steps", "5",
                   "--warmup", "1", "--json", str(out)])
    with caplog.at_level(logging.INFO, logger="ptm_jax"):
        assert args.handler(args) == 0
    assert "MLM+NSP stream" in capsys.readouterr().out
    r = json.loads(out.read_text())
    assert r["tokens"] > 300_000 and r["documents"] > 10
    assert r["examples_per_s"] > 0 and r["examples_per_s_per_core"] == pytest.approx(
        r["examples_per_s"] / r["cores"])
    assert 30 < r["real_tokens_per_example"] <= 64
    assert r["prepare_s"] > 0 and r["reopen_s"] > 0
    # the first prepare trained the tokenizer and built each cache chunk once; the timed reopen built nothing
    # (trained, or copied from the run's tokenizer cache where another test trained the same sample)
    trained = [m for m in caplog.messages if m.startswith("tokenizer: ") and " trained " in m]
    chunks = [m.split(" (")[0] for m in caplog.messages if m.startswith("token cache: chunk ")]
    assert len(trained) == 1 and chunks and len(chunks) == len(set(chunks)), caplog.messages


BLOCK_TENSORFLOW = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('tensorflow', 'tensorflow_datasets'):
            raise ModuleNotFoundError('no TensorFlow on this host: ' + name)
sys.meta_path.insert(0, Block())
from ptm_jax.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("preset", ["bert_tiny", "gpt_tiny", "xlnet_tiny"])
def test_bench_runs_where_tensorflow_is_not_installed(preset, tmp_path):
    """GPU hosts without TensorFlow exist: `ptm bench` (in-memory batches) must not import it."""
    import os
    import subprocess
    import sys

    out = tmp_path / "bench.json"
    env = dict(os.environ, XLA_FLAGS=xla_flags(1))
    proc = subprocess.run([sys.executable, "-c", BLOCK_TENSORFLOW, "bench", "-c", preset, "--steps", "2",
                           "--warmup", "1", "--json", str(out)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert math.isfinite(result["final_loss"]) and result["tokens_per_s"] > 0


def test_bench_training_configuration_beside_synthetic_upper_bound(tmp_path, capsys):
    """--training: dropout as configured on batches of the real feed (gpt_tiny's embedded corpus, tokenized into
    output_dir) beside dropout 0 on synthetic batches, both timed and labelled."""
    out = tmp_path / "training.json"
    args = _parse(["bench", "-c", "gpt_tiny", f"output_dir='{tmp_path / 'run'}'", "train.batch_size=4",
                   "--training", "--steps", "1", "--warmup", "0", "--rounds", "1", "--mesh", "1,1,1",
                   "--peak-tflops", "1", "--json", str(out)])
    assert args.handler(args) == 0
    printed = capsys.readouterr().out
    assert "training = the training configuration" in printed and "upper_bound = synthetic upper bound" in printed
    r = json.loads(out.read_text())
    assert set(r) == {"training", "upper_bound"}
    assert r["training"]["batches"] == "feed" and r["upper_bound"]["batches"] == "synthetic"
    assert r["training"]["model"]["dropout"] == [0.1, 0.1] and r["upper_bound"]["model"]["dropout"] == [0.0, 0.0]
    assert (tmp_path / "run" / "tokenizer").exists()  # the real feed's tokenizer and cache were built
    for v in r.values():
        assert math.isfinite(v["final_loss"]) and v["step_s_median"] > 0 and 0 < v["mfu"] < 1
        assert v["model_flops_per_step"] == r["training"]["model_flops_per_step"]
