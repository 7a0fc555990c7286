"""Checks of the estimated TPU step time (``bench/cost_model.py``, ``ptm compile --estimate``) against what it must
satisfy: a big matmul's estimate on each chip lies between its FLOPs at the chip table's peak and 1.5x of it (which
checks the clocks, FLOPs per cycle and TensorCores of the table), doubling the batch doubles the estimate, a while
loop counts its trips, a conditional its costliest branch, an all-reduce costs its ring bytes at the ICI link
bandwidth, a scanned layer stack costs its unrolled twin plus its stack loop, splash kernels (which carry no
estimate) are modelled from their FLOPs, the relative-shift kernels from the bytes they move, the sums between the
collective-permutes of a decomposed reduce-scatter and the parameters' casts have categories of their own, a
collective that libtpu's async collective fusion puts inside fusions is counted once, and a program without the
compiler's estimates is refused in one line.

The TPU programs are compiled by the real TPU compiler (libtpu) in one process of their own
(tests/cost_model_worker.py, libtpu through PYTHONPATH as tests/libtpu_env.py sets it); those tests skip, saying so,
only where libtpu is not installed. The others run here on the CPU."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from libtpu_env import MISSING, REPO, compile_env, libtpu_dir


def tpu_compiled(test):
    """A test of programs the TPU compiler compiled (slow: one compile process for the module)."""
    return pytest.mark.slow(pytest.mark.skipif(libtpu_dir() is None, reason=MISSING)(test))


@pytest.fixture(scope="module")
def worker() -> dict:
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "cost_model_worker.py")], env=compile_env(),
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@tpu_compiled
@pytest.mark.parametrize("chip", ["v4", "v5e", "v5p", "v6e"])
def test_big_matmul_estimate_lies_between_its_flops_at_peak_and_1_5x(worker, chip):
    r = worker[f"matmul_{chip}"]
    assert r["ops"] == 1
    assert 1.0 <= r["compute_s"] / r["at_peak_s"] <= 1.5, r
    assert r["device_cores"] == (2 if chip == "v5p" else 1)  # v4's compile-only topology: one core a device


@tpu_compiled
def test_doubling_the_batch_doubles_the_compute_estimate(worker):
    assert 1.85 <= worker["mlp_8192"] / worker["mlp_4096"] <= 2.15


@tpu_compiled
def test_while_loop_is_counted_trip_count_times(worker):
    four, eight = worker["loop_of_4"], worker["loop_of_8"]
    assert 1.9 <= eight["compute_s"] / four["compute_s"] <= 2.1
    assert any("8 trips" in n for n in eight["notes"]), eight["notes"]


@tpu_compiled
def test_conditional_counts_its_costliest_branch(worker):
    r = worker["cond"]
    at_peak = 2 * 2.0 * 4096 ** 3 / 197e12  # the branch of two 4096^3 matmuls
    assert 1.0 <= r["compute_s"] / at_peak <= 1.5
    assert any("costliest of 2 branches" in n for n in r["notes"])


@tpu_compiled
def test_all_reduce_costs_its_ring_bytes_at_the_ici_link_bandwidth(worker):
    r = worker["psum"]
    (c,) = r["collectives"]
    assert c["bytes"] == 4 * 2**20 and c["group"] == 4
    # a one-directional ring (the compiler's strategy here): 2 (n-1)/n of the buffer over one 50 GB/s v5e link
    assert r["collectives_s"] == pytest.approx(2 * 3 / 4 * 4 * 2**20 / 50e9)


@tpu_compiled
def test_scanned_stack_costs_its_unrolled_twin_plus_its_stack_loop(worker):
    # the same matmuls; what the scan adds is its layer-stack loop: every layer's residuals written into stacked
    # buffers and read back by slices (docs/benchmarks.md, "Scanned against unrolled layers"); bert_tiny, 4 layers:
    # 0.86 against 0.71 ms, 0.22 ms of it the loop (libtpu 0.0.42.1)
    scan, loop = worker["bert_scan_True"]["estimate"], worker["bert_scan_False"]["estimate"]
    assert any("4 trips" in n for n in scan["notes"]), scan["notes"]

    def matmuls(e):
        return sum(v for k, v in e["breakdown_s"].items() if k.startswith("matmul"))

    assert 0.9 <= matmuls(scan) / matmuls(loop) <= 1.1, (matmuls(scan), matmuls(loop))
    stack = scan["breakdown_s"]["layer-stack loop (scan slices and updates)"]
    assert stack > 0.1 * scan["compute_s"] and loop["breakdown_s"].get("layer-stack loop (scan slices and "
                                                                        "updates)", 0.0) == 0.0
    assert 0.8 <= (scan["compute_s"] - stack) / loop["compute_s"] <= 1.25, (scan["compute_s"], stack,
                                                                           loop["compute_s"])


@tpu_compiled
def test_splash_kernels_are_modelled_from_their_flops(worker):
    from ptm_jax.bench.cost_model import KERNEL_EFFICIENCY

    e, m = worker["bert_splash"]["estimate"], worker["bert_splash"]["model"]
    b, t, n = 32 // 4, m["seq_len"], m["heads"]
    h = m["hidden"] // n
    per_layer = 2.0 * b * n * t * t * h * (2 + 5)  # forward QK^T, PV; fused backward: 5 matmuls
    expected = m["layers"] * per_layer / (197e12 * KERNEL_EFFICIENCY * h / 128)
    assert e["modelled_kernels_s"] == pytest.approx(expected, rel=1e-6)
    # the category also holds what the compiler estimates inside splash's scope around the kernels (the layouts
    # of q, k, v and the segment ids: 11% more at this tiny shape)
    assert expected <= e["breakdown_s"]["attention kernel (splash)"] <= 1.25 * expected
    assert any("splash-attention kernels carry no estimate" in note for note in e["notes"])


@tpu_compiled
def test_relative_shift_kernels_are_modelled_as_the_bytes_they_move(worker):
    """The relative shift (models/rel_shift_kernel.py) forward and its transpose: two Mosaic kernels that carry no
    estimate, priced as their operand and result bytes at the HBM bandwidth, as are XLA's row reversals around
    the transpose; each device shifts its own examples, backward too (no all-gather); the program prices below
    XLA's reshape path for the same gradient."""
    from cost_model_worker import REL

    kernel, xla = worker["rel_shift_kernel"], worker["rel_shift_xla"]
    b, n, i, m = REL
    per_kernel = (b // 4) * n * i * ((m + i) + (m + 2 * i)) * 4 / 819e9  # [I, klen] + [I, R] float32 a chip
    assert kernel["mosaic_calls"] == 2 and kernel["kernels"] == 2 and xla["mosaic_calls"] == 0
    assert kernel["all_gathers"] == 0
    assert kernel["kernel_s"] == pytest.approx(2 * per_kernel, rel=1e-6)
    assert kernel["kernel_s"] <= kernel["shift_s"] == pytest.approx(kernel["modelled_s"])
    assert not any("Mosaic" in k or k == "reverse" for k in kernel["without_estimate"]), kernel["without_estimate"]
    assert any("relative-shift kernels and XLA's reverses" in note for note in kernel["notes"])
    assert kernel["compute_s"] < xla["compute_s"]


@tpu_compiled
def test_dropout_masks_without_the_interleave_cost_less_on_a_tpu(worker):
    """keep_mask on a TPU hashes once per position (models/dropout.py; the same masks, checked in
    tests/test_dropout.py) where the four-decision interleave is a relayout: the estimate of a [8, 512, 1024]
    activation's dropout and gradient is lower (0.150 against 0.160 ms with libtpu 0.0.42.1)."""
    assert worker["dropout_tpu"] < worker["dropout_cpu"], (worker["dropout_tpu"], worker["dropout_cpu"])


@tpu_compiled
def test_xlnet_train_step_takes_the_relative_shift_kernels_where_its_shapes_allow(worker):
    """xlnet_tiny's train step at 128 tokens with a 128-token memory on v5e:2x2: every relative attention that
    reaches the loss shifts by the kernel (2 layers x 2 streams, less the last layer's content stream, which the
    permutation LM's loss does not read) and by its transpose backward; the estimate prices them."""
    step = worker["xlnet_step"]
    assert step["mosaic_calls"] == 2 * (2 * 2 - 1)
    assert step["estimate"]["breakdown_s"]["relative shift (kernel, row reversals)"] > 0


def test_categories_follow_the_op_names():
    from ptm_jax.bench.cost_model import categorize

    layer = "jit(wrapped)/transpose(jvp(BertForPreTraining))/bert/encoder/while/body/closed_call/layers/layer"
    assert categorize(f"{layer}/attention/bnts,bsnh->btnh/dot_general", "fusion", True) == (
        "matmul: attention scores and values")
    assert categorize(f"{layer}/attention/query/dot_general", "fusion", True) == "matmul: projections and FFN"
    assert categorize(f"{layer}/intermediate/dense/dot_general") == "matmul: projections and FFN"
    assert categorize(f"{layer}/attention/jit(_where)/select_n", "fusion") == "attention softmax, mask, dropout"
    assert categorize(f"{layer}/attention_norm/norm/mul", "fusion") == "layer norm"
    assert categorize(f"{layer}/Dropout_0/stack", "fusion") == "dropout"
    assert categorize("jit(wrapped)/jvp(BertForPreTraining)/bert/encoder/while/body/jit(dynamic_update_index_in_dim)"
                      "/dynamic_update_slice", "fusion") == "layer-stack loop (scan slices and updates)"
    assert categorize("jit(wrapped)/transpose(jvp(BertForPreTraining))/mlm/bph,vh->bpv/dot_general", "fusion",
                      True) == "embedding and head (with loss)"
    assert categorize("jit(wrapped)/add", "fusion") == "optimizer update and gradient norms"
    assert categorize("", "convert") == "copies, casts, transposes"
    assert categorize("", "all-reduce-start") == "collectives"
    xlnet = "jit(wrapped)/transpose(jvp(XLNetLMHeadModel))/xlnet/encoder/layers_3/attention/shard_map"
    assert categorize(f"{xlnet}/rel_unshift/pallas_call", "custom-call") == "relative shift (kernel, row reversals)"
    assert categorize("jit(wrapped)", "reverse", False) == "copies, casts, transposes"  # a reverse is a move


def test_program_without_cost_model_estimates_is_refused_in_one_line():
    import jax
    import jax.numpy as jnp

    from ptm_jax.bench.cost_model import estimate

    text = jax.jit(lambda x: jnp.tanh(x @ x)).lower(jnp.ones((64, 64))).compile().as_text()  # a CPU program
    with pytest.raises(ValueError, match="carries no estimated_cycles") as err:
        estimate(text, "TPU v5 lite", 1)
    assert "\n" not in str(err.value)


def test_ptm_compile_for_a_cpu_mesh_says_why_there_is_no_estimate(capsys):
    from ptm_jax.commands.bench import main

    assert main(["compile", "-c", "bert_tiny", "--device-type", "cpu", "--mesh", "1,1,1", "--estimate",
                 "train.batch_size=4"]) == 0
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if "no step-time estimate" in line]
    assert len(notes) == 1 and "not a TPU" in notes[0], out
    assert "estimated step time" not in out


def test_chip_table_clock_times_mxu_flops_per_cycle_is_the_published_peak():
    from ptm_jax.bench.cost_model import CHIPS, chip_of

    for chip in CHIPS.values():
        derived = chip.clock_hz * chip.flops_per_cycle_per_core * chip.cores / 1e12
        assert derived == pytest.approx(chip.peak_tflops, rel=0.01), chip
    assert [chip_of(k).name for k in ("TPU v4", "TPU v5 lite", "TPU v5", "TPU v5p", "TPU v6 lite")] == [
        "v4", "v5e", "v5p", "v5p", "v6e"]
    assert chip_of("NVIDIA H100 80GB HBM3") is None and chip_of("cpu") is None


def test_reduce_scatter_sums_between_permutes_and_parameter_casts_have_their_own_categories():
    from ptm_jax.bench.cost_model import MOVES, PERMUTE_SUMS, estimate

    bwd = 'op_name="jit(wrapped)/transpose(jvp(Bert))/bert/encoder/layers_0/output/dense/dot_general"'
    fwd = 'op_name="jit(wrapped)/jvp(Bert)/bert/encoder/layers_0/output/dense/convert_element_type"'

    def cycles(n):
        return f'backend_config={{"estimated_cycles":"{n}"}}'

    text = "\n".join([
        "%sum (p0: bf16[8,8], p1: bf16[8,8]) -> bf16[8,8] {",
        "  %p0 = bf16[8,8]{1,0} parameter(0)",
        "  %p1 = bf16[8,8]{1,0} parameter(1)",
        "  ROOT %a = bf16[8,8]{1,0} add(%p0, %p1)",
        "}",
        "",
        "ENTRY %main (w: f32[8,8], g: bf16[8,8]) -> bf16[8,8] {",
        "  %w = f32[8,8]{1,0} parameter(0)",
        "  %g = bf16[8,8]{1,0} parameter(1)",
        f"  %cast = bf16[8,8]{{1,0}} convert(%w), metadata={{{fwd}}}, {cycles(300)}",
        f"  %local = bf16[8,8]{{1,0}} fusion(%g, %cast), kind=kLoop, calls=%sum, metadata={{{bwd}}}, {cycles(1000)}",
        f"  %cp = (bf16[8,8]{{1,0}}, bf16[8,8]{{1,0}}, u32[], u32[]) collective-permute-start(%local), "
        f"source_target_pairs={{{{0,1}},{{1,0}}}}, metadata={{{bwd}}}",
        f"  %got = bf16[8,8]{{1,0}} collective-permute-done(%cp), metadata={{{bwd}}}",
        f"  %more = bf16[8,8]{{1,0}} fusion(%got, %g), kind=kLoop, calls=%sum, metadata={{{bwd}}}, {cycles(2000)}",
        f"  ROOT %bias = bf16[8,8]{{1,0}} fusion(%g, %g), kind=kLoop, calls=%sum, metadata={{{bwd}}}, {cycles(4000)}",
        "}",
    ])
    e = estimate(text, "TPU v5 lite", 2)
    by = {k: round(v * 1.5e9) for k, v in e["breakdown_s"].items() if k != "collectives"}
    # the sums before and after the permute (1000 + 2000 cycles), the parameter's cast (300), the rest (4000)
    assert by == {PERMUTE_SUMS: 3000, MOVES: 300, "activation, residual, bias": 4000}
    assert e["collectives_s"] > 0


def test_a_collective_inside_fusions_is_counted_once_among_the_collectives():
    # libtpu's async collective fusion puts one all-gather (one channel) into a start fusion, the compute fusions
    # that overlap it and a done fusion; its bytes go over the ring once
    from ptm_jax.bench.cost_model import CHIPS, estimate

    ag = "bf16[32,64]{1,0} all-gather(%p), channel_id=7, replica_groups=[1,4]<=[4], dimensions={0}"
    text = "\n".join([
        "%start (p: bf16[8,64]) -> bf16[32,64] {", "  %p = bf16[8,64]{1,0} parameter(0)", f"  ROOT %ag = {ag}", "}",
        "%mm (p: bf16[8,64], x: bf16[64,64]) -> bf16[64,64] {", "  %p = bf16[8,64]{1,0} parameter(0)",
        "  %x = bf16[64,64]{1,0} parameter(1)", f"  %ag.1 = {ag}",
        "  ROOT %d = bf16[64,64]{1,0} dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}", "}",
        "ENTRY %main (w: bf16[8,64], x: bf16[64,64]) -> bf16[64,64] {", "  %w = bf16[8,64]{1,0} parameter(0)",
        "  %x = bf16[64,64]{1,0} parameter(1)",
        "  %async-collective-start = bf16[32,64]{1,0} fusion(%w), kind=kCustom, calls=%start",
        '  %fusion.1 = bf16[64,64]{1,0} fusion(%w, %x), kind=kOutput, calls=%mm, '
        'backend_config={"estimated_cycles":"1500"}',
        "  ROOT %async-collective-done = bf16[32,64]{1,0} fusion(%w), kind=kCustom, calls=%start", "}",
    ])
    e = estimate(text, "TPU v5 lite", 4)
    ring = 3 / 4 * 32 * 64 * 2 / (2 * CHIPS["v5e"].link_gbps * 1e9)  # (n-1)/n of the gathered bytes, both ways
    assert e["collectives_s"] == e["collectives_in_fusions_s"] == pytest.approx(ring)
    assert e["compute_s"] == pytest.approx(1500 / 1.5e9)
    assert any("collectives inside fusions" in note for note in e["notes"])
