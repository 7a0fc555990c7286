"""Train-step MFU of the three GPU targets, training configuration beside the upper bound, attention paths side
by side (run by benchmarks/gpu_mfu.sh; no TensorFlow: batches are made in memory by ``ptm bench``'s harness).

Targets (bf16 compute, fp32 master weights and Adam moments, one device), in this order, each with its own
time budget (``--budget-s`` per target: a slow compile of one target cannot starve the next):

- GPT-2 124M, seq 1024, batch 16 (goal: >= 50%); MFU with causal attention at half (MaxText's count) and, beside
  it, in full (``mfu_full_attention``)
- BERT-base, seq 128, batch 256 (goal in the training configuration: >= 45% MFU)
- BERT-large, seq 512, 76 predictions, batch 32

Variants of each, in this order (the target's budget skips the rest and says so):

- ``train``: the training configuration with the papers' dropout (the ``*_paper`` presets' setting): 0.1 on
  hidden states and attention probabilities, ``attention_impl=auto`` (the einsum path under attention dropout,
  masks from the run's key);
- ``bound-cudnn``: the upper bound: no dropout anywhere, cuDNN flash attention;
- ``train-cudnn``: that training configuration with cuDNN's fused attention dropout (``attention_impl=cudnn``;
  masks from cuDNN's own generator, docs/architecture.md "Attention paths");
- ``bound-xla``: no dropout, XLA's fused attention;
- ``preset``: the pod preset as it is (hidden dropout 0.1, no attention dropout: ``auto`` takes cuDNN).

``--smoke`` runs tiny models for two steps on whatever device is there (the CPU check of this script; cuDNN
variants then print why they cannot run).

    python benchmarks/gpu_mfu.py [--smoke] [--json OUT] [--budget-s 90] [--targets gpt2_124m_s1024,...]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

TARGETS = {  # GPT-2 first: its goal is the one most at risk
    "gpt2_124m_s1024": ("gpt2_124m", ["data.max_seq_length=1024", "train.batch_size=16"]),
    "bert_base_s128": ("bert_base", ["data.max_seq_length=128", "data.max_predictions_per_seq=20",
                                     "train.batch_size=256"]),
    "bert_large_s512": ("bert_large", ["data.max_seq_length=512", "data.max_predictions_per_seq=76",
                                       "train.batch_size=32"]),
}
SMOKE = {  # the same code path at tiny shapes
    "gpt2_124m_s1024": ("gpt_tiny", ["data.max_seq_length=64", "train.batch_size=4"]),
    "bert_base_s128": ("bert_tiny", ["data.max_seq_length=64", "train.batch_size=4"]),
}
VARIANTS = {
    "train": ["model.attention_impl='auto'", "model.attention_dropout=0.1"],
    "bound-cudnn": ["model.attention_impl='cudnn'", "model.attention_dropout=0.0", "model.hidden_dropout=0.0"],
    "train-cudnn": ["model.attention_impl='cudnn'", "model.attention_dropout=0.1"],
    "bound-xla": ["model.attention_impl='xla'", "model.attention_dropout=0.0", "model.hidden_dropout=0.0"],
    "preset": ["model.attention_impl='auto'"],
}


def _row(target: str, variant: str, r: dict | None, note: str = "") -> str:
    if r is None:
        return f"{target:<17} {variant:<12} {note}"
    mfu = "-" if r.get("mfu") is None else f"{100 * r['mfu']:.1f}%"
    full = r.get("mfu_full_attention")
    if full is not None and r.get("mfu") is not None and abs(full - r["mfu"]) > 1e-12:
        mfu += f" ({100 * full:.1f}%)"  # causal attention counted in full
    mem = r.get("memory_per_device", {}) or {}
    gib = mem.get("peak_bytes", mem.get("total_bytes"))
    gib = "-" if gib is None else f"{gib / 2**30:.1f}"
    return (f"{target:<17} {variant:<12} {1e3 * r['step_s_median']:9.1f} {r['tokens_per_s']:12,.0f} "
            f"{r['model_tflops_per_s']:8.1f} {mfu:>7} {gib:>6}  {r.get('compile_s', 0):6.1f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny models, two steps (a CPU check of the script)")
    p.add_argument("--json", default=None, help="write every figure to this JSON file")
    p.add_argument("--budget-s", type=float, default=90.0,
                   help="per target: skip its variants not started within this many seconds of its first")
    p.add_argument("--targets", default=None, help="comma-separated subset of " + ",".join(TARGETS))
    p.add_argument("--steps", type=int, default=None, help="timed steps (default 10; smoke 2)")
    args = p.parse_args(argv)

    import jax

    from ptm_jax.bench.harness import bench
    from ptm_jax.config_loading import load_config

    t_start = time.perf_counter()
    table = SMOKE if args.smoke else TARGETS
    names = list(table) if not args.targets else [t.strip() for t in args.targets.split(",")]
    steps = args.steps or (2 if args.smoke else 10)
    warmup = 1 if args.smoke else 2
    dev = jax.devices()[0]
    print(f"device: {dev.device_kind} ({dev.platform}), jax {jax.__version__}; bf16 compute, fp32 state; "
          f"{steps} timed steps after {warmup}")
    print(f"{'target':<17} {'variant':<12} {'ms/step':>9} {'tokens/s':>12} {'TFLOP/s':>8} {'MFU':>7} {'GiB':>6}  "
          f"{'compile':>6}   (MFU: causal attention at half; in brackets, in full)")
    results: dict[str, dict] = {}
    for target in names:
        if target not in table:
            print(f"unknown target {target!r}; choose from {', '.join(table)}", file=sys.stderr)
            return 2
        preset, overrides = table[target]
        t_target = time.perf_counter()
        for variant, extra in VARIANTS.items():
            key = f"{target}/{variant}"
            if time.perf_counter() - t_target > args.budget_s:
                print(_row(target, variant, None, f"skipped: the target's {args.budget_s:.0f} s budget is spent"))
                results[key] = {"skipped": "budget"}
                continue
            try:
                cfg = load_config(preset, [*overrides, "model.dtype='bfloat16'", *extra])
                r = bench(cfg, steps=steps, warmup=warmup, mesh_shape=(1, 1, 1), num_batches=2)
            except Exception as e:  # e.g. cuDNN variants on a host without cuDNN: say why, go on
                msg = str(e).strip().splitlines()[0][:140] if str(e).strip() else ""
                print(_row(target, variant, None, f"cannot run: {type(e).__name__}: {msg}"))
                results[key] = {"error": f"{type(e).__name__}: {msg}",
                                "traceback": traceback.format_exc(limit=3)}
                continue
            print(_row(target, variant, r), flush=True)
            results[key] = r
    print(f"total {time.perf_counter() - t_start:.0f} s")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
