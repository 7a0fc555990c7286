"""Decode cost per generated token at several prompt lengths, with a fixed-size KV cache.

A GPT-2-shaped model (a preset, optionally resized) with random weights; for each prompt length the prompt
is prefilled once, then the jitted decode loop (``ptm_jax.families.gpt.decode``) generates ``--new-tokens``
greedy tokens; the loop is timed ``--repeats`` times after a warm-up (lengths interleaved in a shuffled
order) and the median and minimum are reported as ms per token. With a cache of ``--max-length`` slots the
per-token cost should not depend on the prompt length (ratio longest/shortest ~ 1.0).

    python benchmarks/bench_decode.py --preset gpt2_124m --layers 4 --hidden 256 --heads 4
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--preset", default="gpt2_124m", help="a GPT preset in configs/")
    ap.add_argument("--layers", type=int, default=None, help="override model.num_layers")
    ap.add_argument("--hidden", type=int, default=None, help="override model.hidden_size (FFN = 4x)")
    ap.add_argument("--heads", type=int, default=None, help="override model.num_heads")
    ap.add_argument("--vocab", type=int, default=None, help="override model.vocab_size")
    ap.add_argument("--dtype", default=None, choices=("float32", "bfloat16"))
    ap.add_argument("--max-length", type=int, default=1024, help="KV-cache slots")
    ap.add_argument("--prompt-lengths", default="16,256,768")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import numpy as np

    from ptm_jax.config_loading import load_config
    from ptm_jax.families.gpt.decode import decode_functions, left_pad
    from ptm_jax.families.gpt.model import GPTLMHeadModel

    args = parse_args(argv)
    cfg = load_config(args.preset).model
    if cfg.family != "gpt":
        raise SystemExit(f"--preset {args.preset} is not a GPT preset")
    changes = {"num_layers": args.layers, "hidden_size": args.hidden, "num_heads": args.heads,
               "vocab_size": args.vocab, "dtype": args.dtype}
    cfg = dataclasses.replace(cfg, **{k: v for k, v in changes.items() if v is not None},
                              max_position_embeddings=max(cfg.max_position_embeddings, args.max_length))
    if args.hidden:
        cfg = dataclasses.replace(cfg, intermediate_size=4 * args.hidden)
    lengths = sorted({int(x) for x in args.prompt_lengths.split(",")})
    if max(lengths) + args.new_tokens > args.max_length:
        raise SystemExit(f"prompt {max(lengths)} + {args.new_tokens} new tokens exceed --max-length {args.max_length}")
    params = jax.jit(GPTLMHeadModel(cfg).init)(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"]
    params = nn.meta.unbox(params)
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))
    prefill, loop = decode_functions(cfg, cache_length=args.max_length, max_new_tokens=args.new_tokens, greedy=True)
    rng = np.random.default_rng(0)
    extra = (jax.random.PRNGKey(0), jnp.float32(1.0), jnp.float32(1.0), jnp.int32(-1))
    states, first = {}, {}
    for n in lengths:
        prompts = [rng.integers(0, cfg.vocab_size, n).tolist() for _ in range(args.batch)]
        ids, seg, pos, lens = left_pad(prompts, 0)
        logits, cache = prefill(params, ids, seg, pos)
        states[n] = (params, cache, logits, jnp.asarray(lens)) + extra
        t0 = time.perf_counter()
        out, steps = loop(*states[n])  # compiles on the first length only
        jax.block_until_ready(out)
        first[n] = time.perf_counter() - t0
        assert int(steps) == args.new_tokens
    times: dict[int, list[float]] = {n: [] for n in lengths}
    order = np.random.default_rng(1)
    for _ in range(args.repeats):  # interleaved in a shuffled order: load changes hit every length alike
        for n in order.permutation(lengths).tolist():
            t0 = time.perf_counter()
            jax.block_until_ready(loop(*states[n])[0])
            times[n].append(1000 * (time.perf_counter() - t0) / args.new_tokens)
    rows = [{"prompt_length": n, "ms_per_token": statistics.median(times[n]), "min_ms_per_token": min(times[n]),
             "first_call_s": first[n], "all_ms_per_token": sorted(times[n])} for n in lengths]
    ratio = rows[-1]["ms_per_token"] / rows[0]["ms_per_token"]
    ratio_min = rows[-1]["min_ms_per_token"] / rows[0]["min_ms_per_token"]
    argv = list(argv if argv is not None else sys.argv[1:])
    command = "python " + " ".join(shlex.quote(a) for a in ["benchmarks/bench_decode.py"] + argv)
    print(f"device: {jax.devices()[0].device_kind} x{jax.device_count()}  model: {cfg.num_layers} layers, "
          f"{cfg.hidden_size} hidden, {cfg.num_heads} heads, vocab {cfg.vocab_size}, {n_params:,} params, "
          f"{cfg.dtype}; batch {args.batch}, cache {args.max_length}, {args.new_tokens} new tokens, "
          f"median of {args.repeats}")
    print(f"{'prompt':>8} {'median ms/token':>16} {'min..max ms/token':>20} {'first call s':>13}")
    for r in rows:
        lo, hi = r["all_ms_per_token"][0], r["all_ms_per_token"][-1]
        print(f"{r['prompt_length']:>8} {r['ms_per_token']:>16.2f} {f'{lo:.2f}..{hi:.2f}':>20} "
              f"{r['first_call_s']:>13.2f}")
    print(f"ratio longest/shortest prompt: {ratio:.3f} (median), {ratio_min:.3f} (min)")
    print(f"command: {command}")
    if args.json:
        Path(args.json).write_text(json.dumps({"command": command, "rows": rows, "ratio": ratio, "ratio_min": ratio_min,
                                               "model": dataclasses.asdict(cfg), "batch": args.batch,
                                               "max_length": args.max_length}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
