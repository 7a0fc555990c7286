"""Dropout's random bits: ``jax.random.bernoulli`` against ptm_jax's packed Threefry masks (models/dropout.py).

Two measurements, interleaved in one process so the machine's drift hits every variant alike:

1. the masks alone: the 19 dropout masks of one MiniLM-L6 classification step (6 attention-probability masks
   [32, 12, 64, 64] and 13 hidden masks [32, 64, 384]), summed so nothing is optimised away;
2. the whole production train step (``compile_objective``, AdamW, clipping, guard) at MiniLM-L6 shapes, seq 64,
   batch 32, with (a) bernoulli masks, (b) packed masks, (c) dropout off, as the cost floor.

Per variant it prints the median wall time and the median process CPU time of one call (2 XLA threads
here, so CPU time is the steadier figure on a shared machine).

    python benchmarks/bench_dropout.py --rounds 5 --calls 4
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

MASK_SHAPES = [(32, 12, 64, 64)] * 6 + [(32, 64, 384)] * 13


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    ap.add_argument("--calls", type=int, default=4, help="timed calls per variant per round")
    ap.add_argument("--json", default="", help="also write the figures here")
    return ap.parse_args(argv)


def bernoulli_mask(rng, shape, rate):
    import jax

    return jax.random.bernoulli(rng, 1.0 - rate, shape)


def mask_variants():
    import jax
    import jax.numpy as jnp

    from ptm_jax.models import dropout as D

    def total(make):
        def f(rng):
            out = jnp.zeros((), jnp.int32)
            for i, s in enumerate(MASK_SHAPES):
                out += jnp.sum(make(jax.random.fold_in(rng, i), s, 0.1), dtype=jnp.int32)
            return out
        return jax.jit(f)

    key = jax.random.key(0)
    return {"masks: bernoulli": (lambda f=total(bernoulli_mask): f(key)),
            "masks: packed": (lambda f=total(D.keep_mask): f(key))}


def step_variants():
    import jax

    import peer_compare as pc
    from ptm_jax.bench.harness import make_bench_mesh
    from ptm_jax.models import dropout as D
    from ptm_jax.parallel.feed import to_global
    from ptm_jax.train.loop import compile_objective

    args = pc.parse_args(["--mode", "classify"])
    cfg = pc.ptm_config(args, "classify")
    off = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, hidden_dropout=0.0, attention_dropout=0.0))
    rs = np.random.RandomState(0)
    batch = {"input_ids": rs.randint(1000, 30000, (32, 64)).astype(np.int32),
             "input_mask": np.ones((32, 64), np.int32), "segment_ids": np.zeros((32, 64), np.int32),
             "labels": rs.randint(0, 2, (32,)).astype(np.int32)}
    packed = D.keep_mask
    out = {}
    for name, mask_fn, c in [("step: bernoulli", bernoulli_mask, cfg), ("step: packed", packed, cfg),
                             ("step: dropout off", packed, off)]:
        D.keep_mask = mask_fn  # read when the step is traced (the warm-up call below)
        try:
            obj = pc.ClassifyObjective(c)
            mesh = make_bench_mesh(c, (1, 1, 1))
            comp = compile_objective(obj, c.train, mesh)
            box = {"state": comp.init_fn(jax.random.key(1))}
            gb = to_global(batch, mesh, comp.batch_keys)

            def run(comp=comp, box=box, gb=gb):
                box["state"], _ = comp.train_step(box["state"], gb, jax.random.key(0))
                return box["state"]

            jax.block_until_ready(run())
        finally:
            D.keep_mask = packed
        out[name] = run
    return out


def main(argv=None) -> int:
    import jax

    args = parse_args(argv)
    variants = {**mask_variants(), **step_variants()}
    for fn in variants.values():
        jax.block_until_ready(fn())
    wall = {k: [] for k in variants}
    cpu = {k: [] for k in variants}
    for _ in range(args.rounds):
        for name, fn in variants.items():
            for _ in range(args.calls):
                t, c = time.perf_counter(), time.process_time()
                jax.block_until_ready(fn())
                wall[name].append(time.perf_counter() - t)
                cpu[name].append(time.process_time() - c)
    result = {k: {"wall_ms": 1e3 * float(np.median(wall[k])), "cpu_ms": 1e3 * float(np.median(cpu[k]))}
              for k in variants}
    n = sum(int(np.prod(s)) for s in MASK_SHAPES)
    print(f"{n:,} dropout decisions per step; median of {args.rounds} x {args.calls} calls")
    for k, v in result.items():
        print(f"  {k:<20} wall {v['wall_ms']:8.1f} ms   CPU {v['cpu_ms']:8.1f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
