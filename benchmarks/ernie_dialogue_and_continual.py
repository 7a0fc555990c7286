"""ERNIE's dialogue LM and ERNIE 2.0 trained through the loop on real text (losses and task
accuracies over steps).

Text: tiny-shakespeare (../shared/data/corpus/tinyshakespeare/input.txt), whose speakers alternate.

* Dialogue LM (``ernie_dlm``): the script is written as a dialogue file of the 'turns' format
  (``dialogue.script_to_turns``: consecutive speeches in dialogues of ``--turns``), the WordPiece vocabulary is
  trained on the script (the 'lines' corpus), the last ``--eval-dialogues`` dialogues are held out.
* ERNIE 2.0 (``ernie2``): the script as the 'lines' corpus (a document = a speech with its speaker line, a sentence
  = a line), PMI phrases for knowledge masking, the five tasks introduced one stage at a time
  (``--stage-steps`` apart, equal weights), the last 200 speeches held out.

Both run ``train/stages.pretrain`` (tokenizer, token cache, artifacts, the loop, its checkpoints) with the
ernie_tiny / ernie2_tiny network widened to ``--hidden`` (2 layers), and report from the run's metrics.jsonl the
training figures averaged over windows of ``--window`` steps (per task: over the steps that trained it) and
the held-out figures of every evaluation (ERNIE 2.0: one batch per task each).

    python benchmarks/ernie_dialogue_and_continual.py --out /tmp/ernie_show
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ptm_jax.config_loading import load_config
from ptm_jax.families.ernie import continual
from ptm_jax.families.ernie.dialogue import script_to_turns
from ptm_jax.objectives.registry import build_objective
from ptm_jax.train.metrics import read_metrics
from ptm_jax.train.stages import prepare_corpus, pretrain

SCRIPT = ROOT.parent / "shared" / "data" / "corpus" / "tinyshakespeare" / "input.txt"
TASK_METRIC = {"knowledge_masking": "mlm_accuracy", **{t: f"{t}_accuracy" for t in continual.TASKS[1:]}}


def common(args, out: Path) -> list[str]:
    return [f"output_dir={out}", f"data.corpus={SCRIPT}", "data.format=lines", f"data.max_seq_length={args.seq}",
            "data.max_predictions_per_seq=20", f"model.hidden_size={args.hidden}", f"model.num_heads={args.hidden // 32}",
            f"model.intermediate_size={4 * args.hidden}", f"model.max_position_embeddings={args.seq}",
            f"tokenizer.vocab_size={args.vocab}", f"model.vocab_size={args.vocab}", f"train.batch_size={args.batch}",
            f"train.learning_rate={args.lr}", f"train.warmup_steps={args.steps // 10}", "train.log_every=1",
            "train.checkpoint_every=100000", "train.progress_bar=false", f"train.seed={args.seed}"]


def windows(rows: list[dict], keys: list[str], window: int) -> list[dict]:
    """Mean of each key over windows of steps, leaving out the steps where it is NaN (another task trained)."""
    out = []
    last = max(r["step"] for r in rows)
    for lo in range(1, last + 1, window):
        sel = [r for r in rows if lo <= r["step"] < lo + window]
        row = {"steps": f"{lo}-{min(lo + window - 1, last)}"}
        for k in keys:
            vals = [r[k] for r in sel if isinstance(r.get(k), (int, float)) and math.isfinite(r[k])]
            row[k] = (float(np.mean(vals)), len(vals)) if vals else None
        out.append(row)
    return out


def table(rows: list[dict], keys: list[str], counts: bool) -> str:
    head = "| steps | " + " | ".join(keys) + " |\n|---|" + "---|" * len(keys) + "\n"
    body = []
    for r in rows:
        cells = []
        for k in keys:
            v = r.get(k)
            if v is None:
                cells.append("-")
            elif isinstance(v, tuple):
                cells.append(f"{v[0]:.3f} ({v[1]})" if counts else f"{v[0]:.3f}")
            else:
                cells.append(f"{v:.3f}")
        body.append(f"| {r['steps']} | " + " | ".join(cells) + " |")
    return head + "\n".join(body)


def evals(rows: list[dict], keys: list[str]) -> list[dict]:
    return [{"steps": str(r["step"]), **{k: r.get(k) for k in keys}} for r in rows if r.get("split") == "eval"]


def majority(cfg, batches: int) -> dict[str, float]:
    """Accuracy of always answering the most frequent label of the held-out batches the loop evaluates on (per
    task; tokens weighted as the loss weights them): the figure each accuracy must beat."""
    obj = build_objective(cfg, prepare_corpus(cfg))
    counts: dict[str, dict[int, float]] = {}
    for i, b in enumerate(obj.eval_batches(cfg.train.batch_size, 0, 1)):
        if i >= batches:
            break
        if "task_ids" in b:
            task = continual.TASKS[int(b["task_ids"][0])]
            if task in continual.TOKEN_TASKS:
                labels, weights = b["token_labels"].ravel(), b["token_weights"].ravel()
            elif task == "knowledge_masking":
                labels, weights = b["masked_lm_ids"].ravel(), b["masked_lm_weights"].ravel()
            else:
                labels, weights = b["sentence_labels"], np.ones(len(b["sentence_labels"]))
            key = TASK_METRIC[task]
        else:
            labels, weights, key = b["next_sentence_labels"], np.ones(len(b["next_sentence_labels"])), \
                "response_accuracy"
            for t, w in zip(b["masked_lm_ids"].ravel(), b["masked_lm_weights"].ravel()):
                counts.setdefault("mlm_accuracy", {}).setdefault(int(t), 0.0)
                counts["mlm_accuracy"][int(t)] += float(w)
        for t, w in zip(labels.tolist(), weights.tolist()):
            counts.setdefault(key, {}).setdefault(int(t), 0.0)
            counts[key][int(t)] += float(w)
    return {k: max(c.values()) / sum(c.values()) for k, c in counts.items()}


def run_dlm(args, out: Path) -> dict:
    turns = out / "tinyshakespeare_turns.txt"
    out.mkdir(parents=True, exist_ok=True)
    n = script_to_turns(str(SCRIPT), turns, args.turns)
    cfg = load_config("ernie_tiny", ["objective=ernie_dlm", *common(args, out), f"data.dialogue_file={turns}",
                                     "data.dialogue_format=turns", f"data.eval_documents={args.eval_dialogues}",
                                     f"train.steps={args.steps}", f"train.eval_every={args.eval_every}",
                                     "train.eval_batches=100"])
    t = time.time()
    summary = pretrain(cfg)
    rows = read_metrics(out / "pretrain" / "metrics.jsonl")
    keys = ["loss", "mlm_loss", "mlm_accuracy", "response_loss", "response_accuracy"]
    return {"dialogues": n, "seconds": round(time.time() - t, 1), "summary": summary,
            "train": windows([r for r in rows if r.get("split") == "train"], keys, args.window),
            "eval": evals(rows, keys[1:]), "keys": keys, "majority": majority(cfg, cfg.train.eval_batches)}


def run_ernie2(args, out: Path) -> dict:
    starts = ",".join(str(i * args.stage_steps) for i in range(len(continual.TASKS)))
    cfg = load_config("ernie2_tiny", [*common(args, out), f'data.task_from_steps="{starts}"',
                                      'data.task_weights="1,1,1,1,1"', "data.eval_documents=200",
                                      "data.phrase_min_count=5", "data.phrase_threshold=20.0",
                                      f"train.steps={args.steps}", f"train.eval_every={args.eval_every}",
                                      f"train.eval_batches={6 * len(continual.TASKS)}"])
    t = time.time()
    summary = pretrain(cfg)
    rows = read_metrics(out / "pretrain" / "metrics.jsonl")
    keys = [TASK_METRIC[t] for t in continual.TASKS]
    return {"starts": starts, "seconds": round(time.time() - t, 1), "summary": summary,
            "train": windows([r for r in rows if r.get("split") == "train"], keys, args.window),
            "eval": evals(rows, keys), "keys": keys, "majority": majority(cfg, cfg.train.eval_batches)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--only", choices=("dlm", "ernie2"), default=None)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--stage-steps", type=int, default=60, help="ERNIE 2.0: steps between task introductions")
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--window", type=int, default=50)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--vocab", type=int, default=2000)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--turns", type=int, default=6, help="dialogue LM: speeches per dialogue")
    p.add_argument("--eval-dialogues", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    results = {}
    for name, fn in (("dlm", run_dlm), ("ernie2", run_ernie2)):
        if args.only in (None, name):
            r = fn(args, args.out / name)
            results[name] = r
            print(f"\n## {name} ({r['seconds']} s)\ntraining, window means" + (" (steps that trained the task)"
                                                                                if name == "ernie2" else ""))
            print(table(r["train"], r["keys"], counts=name == "ernie2"))
            print("held-out")
            ev = [k for k in r["keys"] if k != "loss"]
            print(table(r["eval"] + [{"steps": "majority class", **r["majority"]}], ev, counts=False))
    (args.out / "results.json").write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
