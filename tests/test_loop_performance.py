"""The training loop's performance records on CPU: model FLOP/s, MFU, examples/s and the input-wait share in
metrics.jsonl, TensorBoard and the log line, and the jax.profiler trace of ``train.profile_steps``."""
from __future__ import annotations

import glob

import jax
import pytest

from ptm_jax.bench import flops
from ptm_jax.config_loading import load_config
from ptm_jax.errors import ConfigError
from ptm_jax.train.hooks import parse_profile_steps
from ptm_jax.train.metrics import format_line, read_metrics
from ptm_jax.train.stages import pretrain


def _train_records(run_dir):
    return [r for r in read_metrics(run_dir / "pretrain" / "metrics.jsonl") if r["split"] == "train"]


@pytest.fixture(scope="module")
def profiled_run(tmp_path_factory):
    """gpt_tiny, 6 steps on the 8 virtual CPU devices, a peak of 0.5 TFLOP/s per device given (CPU has none in
    the table), a trace of steps 3 and 4."""
    out = tmp_path_factory.mktemp("perf") / "run"
    cfg = load_config("gpt_tiny", [f"output_dir={str(out)!r}", "train.steps=6", "train.log_every=2",
                                   "train.eval_every=0", "train.checkpoint_every=0", "train.peak_tflops=0.5",
                                   "train.profile_steps='3:2'"])
    pretrain(cfg)
    return cfg, out


def test_records_carry_model_flops_mfu_and_input_wait(profiled_run):
    cfg, out = profiled_run
    records = _train_records(out)
    assert [r["step"] for r in records] == [2, 4, 6]
    per_step = flops.train_step_flops(cfg).train
    B, S, H, I, L, V = 16, 64, 32, 128, 2, 1000  # gpt_tiny
    # causal attention (the S x S scores and values) at half, as MaxText counts it (bench/flops.py)
    assert per_step == 6 * (L * (4 * B * S * H * H + B * S * S * H + 2 * B * S * H * I) + B * S * H * V)
    for r in records:
        # every figure comes from the same interval: FLOP/s = formula x examples/s / batch
        assert r["model_flops_per_sec"] == pytest.approx(per_step * r["examples_per_sec"] / cfg.train.batch_size,
                                                         rel=1e-6)
        assert r["mfu"] == pytest.approx(r["model_flops_per_sec"] / (0.5e12 * jax.device_count()), rel=1e-9)
        assert 0.0 < r["mfu"] < 1.0
        assert 0.0 <= r["input_wait_share"] <= 1.0
        assert r["examples_per_sec"] > 0


def test_tensorboard_has_the_new_scalars(profiled_run):
    import tensorflow as tf

    _, out = profiled_run
    steps: dict[str, list[int]] = {}
    for path in sorted(glob.glob(str(out / "pretrain" / "tb" / "*tfevents*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                steps.setdefault(value.tag, []).append(event.step)
    assert {"train/mfu", "train/model_flops_per_sec", "train/input_wait_share", "train/examples_per_sec"} <= set(steps)
    assert steps["train/mfu"] == [2, 4, 6]


def test_profile_trace_is_written_and_reads_back(profiled_run):
    _, out = profiled_run
    files = glob.glob(str(out / "pretrain" / "profile" / "plugins" / "profile" / "*" / "*.xplane.pb"))
    assert len(files) == 1
    data = jax.profiler.ProfileData.from_file(files[0])
    planes = {p.name: p for p in data.planes}
    assert "/host:CPU" in planes
    # the loop's step annotations: the traced calls are steps 3 and 4 (the window), none outside it
    steps = set()
    for line in planes["/host:CPU"].lines:
        for event in line.events:
            if event.name == "train":
                steps.add(int(dict(event.stats)["step_num"]))
    assert steps == {3, 4}


def test_without_a_peak_on_cpu_no_mfu_but_model_flops(tmp_path):
    out = tmp_path / "run"
    cfg = load_config("gpt_tiny", [f"output_dir={str(out)!r}", "train.steps=2", "train.log_every=1",
                                   "train.eval_every=0", "train.checkpoint_every=0"])
    pretrain(cfg)
    records = _train_records(out)
    assert [r["step"] for r in records] == [1, 2]
    for r in records:
        assert "mfu" not in r and r["model_flops_per_sec"] > 0 and 0.0 <= r["input_wait_share"] <= 1.0


def test_log_line_and_profile_steps_errors():
    line = format_line(4, 6, {"loss": 2.5, "model_flops_per_sec": 3.1e11, "mfu": 0.0775, "input_wait_share": 0.02,
                              "learning_rate": 1e-3, "examples_per_sec": 812.3}, 10.0)
    assert line == ("step 4/6 | loss 2.5000 | 0.31 TFLOP/s | MFU 7.8% | input wait 2% | lr 0.001 | "
                    "812.3 examples/s | ETA 0:00:10")
    assert parse_profile_steps("") is None and parse_profile_steps("10:5") == (10, 5)
    for bad in ("10", "0:5", "3:0", "a:b", "3:2:1"):
        with pytest.raises(ConfigError, match="train.profile_steps"):
            parse_profile_steps(bad)
