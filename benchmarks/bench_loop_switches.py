"""Steps/s of the real training loop (tf.data stream, prefetch, jitted step, metrics, checkpoints) under
loop switches such as train.metrics_one_step_late, train.prefetch_batches or train.donate_state.

Each variant is one `ptm pretrain` subprocess on the embedded corpus, rounds interleaved (A B A B ...). The
tokenizer and cache are built once in --out-dir and reused; each run starts its pretrain stage from scratch.
Steps/s is read from the run's own metrics.jsonl between --skip and --steps (compile and warm-up excluded).

    python benchmarks/bench_loop_switches.py --steps 80 --rounds 3 \\
        --variant late:train.metrics_one_step_late=true --variant at_once:train.metrics_one_step_late=false
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--preset", default="bert_small")
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--skip", type=int, default=20, help="steps left out at the start (compile, warm-up)")
    ap.add_argument("--log-every", type=int, default=1, help="train.log_every of every variant")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variant", action="append", required=True,
                    help="NAME:override[,override...] (repeat; an empty override list is the preset itself)")
    ap.add_argument("--set", nargs="*", default=[], help="overrides for every variant")
    ap.add_argument("--out-dir", default="runs/bench_loop_switches")
    ap.add_argument("--json", default="", help="write the results here too")
    return ap.parse_args(argv)


def steps_per_second(metrics_file: Path, skip: int) -> float:
    rows = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    train = [r for r in rows if r.get("split") == "train" and r["step"] >= skip]
    if len(train) < 2:
        sys.exit(f"{metrics_file}: fewer than 2 train rows after step {skip}; raise --steps")
    return (train[-1]["step"] - train[0]["step"]) / (train[-1]["time"] - train[0]["time"])


def run_once(args: argparse.Namespace, overrides: list[str]) -> float:
    out = Path(args.out_dir)
    shutil.rmtree(out / "pretrain", ignore_errors=True)
    cmd = [sys.executable, "-m", "ptm_jax.cli", "pretrain", "-c", args.preset, f"output_dir={str(out)!r}",
           f"train.steps={args.steps}", f"train.log_every={args.log_every}", "train.eval_every=0",
           f"train.checkpoint_every={args.steps}", "train.progress_bar=false", *args.set, *overrides]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return steps_per_second(out / "pretrain" / "metrics.jsonl", args.skip)


def main(argv=None) -> int:
    args = parse_args(argv)
    variants = []
    for spec in args.variant:
        name, _, rest = spec.partition(":")
        variants.append((name, [o for o in rest.split(",") if o]))
    speeds: dict[str, list[float]] = {name: [] for name, _ in variants}
    for r in range(args.rounds):
        for name, overrides in variants:
            speeds[name].append(run_once(args, overrides))
            print(f"round {r + 1} {name}: {speeds[name][-1]:.3f} steps/s", file=sys.stderr, flush=True)
    base = statistics.median(speeds[variants[0][0]])
    results = {name: {"steps_per_s": [round(x, 3) for x in v], "median": round(statistics.median(v), 3),
                      "vs_first": round(statistics.median(v) / base, 3)} for name, v in speeds.items()}
    print(f"{'variant':<16} {'median steps/s':>15} {'vs first':>9}  runs")
    for name, res in results.items():
        print(f"{name:<16} {res['median']:>15.3f} {res['vs_first']:>8.3f}x  {res['steps_per_s']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
