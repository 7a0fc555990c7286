"""Finetune one pretrained model on the real task data in ../shared/data and print a table of dev figures.

Tasks: GLUE SST-2, MRPC, STS-B, CoLA, RTE, WNLI (dev sets); SQuAD v1.1 as a 2-fold article split of the
dev file (only dev-v1.1.json is available: fold k trains on the articles a with a % 2 != k and predicts
the others; the two predictions.json are merged and all 10,570 questions scored with the official v1.1
rules); CoNLL-2003 NER trained on eng.train, best model chosen on eng.testa, reported on eng.testb.

No reported figure is chosen on the data it is reported on. GLUE: the figure is the dev evaluation after the
last step (``final_eval``); the per-epoch dev evaluations are printed too, and the best of them, which was
chosen on dev itself and is therefore optimistic, is kept only as ``best_on_dev`` in results.json. SQuAD:
each fold evaluates once, after its last step (``finetune.eval_every`` beyond the run), so the model that
predicts the held-out fold is the final one. CoNLL: chosen on testa, reported on testb.

Every task is exactly ``ptm finetune -c bert_small <overrides>`` (plus ``ptm eval`` for the SQuAD folds
and CoNLL testb): the command lines are printed with the table. Settings are the preset's finetune
section (lr, batch, epochs, length) with per-task changes below; ``--set`` adds overrides to every task.
Rerunning with the same --out resumes each stage from its checkpoints (its time is then not a fresh run).

    python benchmarks/finetune_real.py runs/gutenberg/pretrain                 # everything
    python benchmarks/finetune_real.py RUN --tasks squad conll2003 --set finetune.train_subset=300 finetune.epochs=1
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import shlex
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("USE_TF", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

DATA = REPO.parent / "shared" / "data"
GLUE = ("sst2", "mrpc", "stsb", "cola", "rte", "wnli")
ALL_TASKS = GLUE + ("squad", "conll2003")
PRIMARY = {"sst2": ["accuracy"], "mrpc": ["f1", "accuracy"], "stsb": ["pearson", "spearman"], "cola": ["mcc"],
           "rte": ["accuracy"], "wnli": ["accuracy"], "squad": ["exact_match", "f1"],
           "conll2003": ["f1", "precision", "recall"]}


SQUAD_EVAL_ONCE = 10**9  # finetune.eval_every beyond any run: the loop then evaluates only at its last step


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("init", help="pretrained weights: a run output dir, params dir or Hugging Face folder")
    ap.add_argument("--preset", default="bert_small")
    ap.add_argument("--tasks", nargs="+", default=list(ALL_TASKS), choices=ALL_TASKS)
    ap.add_argument("--out", default="", help="output folder (default: <init>/finetune_real)")
    ap.add_argument("--data", default=str(DATA), help="the shared data folder (glue/, squad/, conll2003/)")
    ap.add_argument("--set", nargs="*", default=[], metavar="section.key=value",
                    help="overrides added to every task (after the per-task ones)")
    ap.add_argument("--squad-epochs", type=float, default=2.0)
    ap.add_argument("--conll-epochs", type=float, default=3.0)
    return ap.parse_args(argv)


def squad_lengths(max_positions: int) -> list[str]:
    """run_squad's 384 / 128 / 64 where the model has 512 positions, else scaled to what it has."""
    length = min(384, max_positions)
    stride, query = (128, 64) if length >= 384 else (length // 2, length // 4)
    return [f"finetune.max_seq_length={length}", f"squad.doc_stride={stride}",
            f"squad.max_query_length={query}"]


def kv(key: str, value) -> str:
    """An override ``key=value``; a string stays a bare word unless it would read back as another literal."""
    if isinstance(value, str):
        try:
            ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return f"{key}={value}"
        return f"{key}={value!r}"
    return f"{key}={value}"


def plans(args: argparse.Namespace, max_positions: int, out: Path) -> list[dict]:
    """One entry per task: the finetune runs (overrides) and the evaluations after them."""
    data = Path(args.data)
    base = [kv("finetune.init", args.init)]
    result = []
    for task in args.tasks:
        if task in GLUE:
            ov = base + [kv("finetune.task", task), kv("finetune.data_dir", str(data / "glue")),
                         kv("output_dir", str(out / task))] + args.set
            result.append({"task": task, "runs": [{"overrides": ov, "out": out / task, "eval_split": None}]})
        elif task == "squad":
            runs = []
            for k in (0, 1):
                fold = f"{data / 'squad' / 'dev-v1.1.json'}#fold={k}/2"
                ov = base + [kv("finetune.task", "squad"), kv("finetune.data_dir", fold),
                             kv("output_dir", str(out / f"squad-fold{k}")), kv("finetune.epochs", args.squad_epochs),
                             # one evaluation, after the last step: best/ is then the final model, not one
                             # chosen on the fold it predicts
                             kv("finetune.eval_every", SQUAD_EVAL_ONCE),
                             *squad_lengths(max_positions)] + args.set
                runs.append({"overrides": ov, "out": out / f"squad-fold{k}", "eval_split": "dev"})
            result.append({"task": task, "runs": runs})
        else:
            ov = base + [kv("finetune.task", "conll2003"), kv("finetune.data_dir", str(data / "conll2003")),
                         kv("output_dir", str(out / "conll2003")), kv("finetune.epochs", args.conll_epochs)] + args.set
            result.append({"task": task, "runs": [{"overrides": ov, "out": out / "conll2003", "eval_split": "test"}]})
    return result


def command(preset: str, overrides: list[str], task: str, eval_split: str | None, out: Path) -> list[str]:
    lines = [f"ptm finetune -c {preset} " + " ".join(shlex.quote(o) for o in overrides)]
    if eval_split:
        pred = f"{out}/predictions-{eval_split}"
        lines.append(f"ptm eval -c {preset} --model {out}/finetune-{task}/best --split {eval_split} "
                     f"--predictions {pred} " + " ".join(shlex.quote(o) for o in overrides))
    return lines


def run_task(plan: dict, preset: str, data: Path) -> dict:
    from ptm_jax.config_loading import load_config
    from ptm_jax.evaluate.squad_eval import evaluate_v1
    from ptm_jax.train.evaluation import evaluate_task
    from ptm_jax.train.finetune import finetune

    task, t0 = plan["task"], time.time()
    row = {"task": task, "commands": [], "runs": []}
    merged: dict[str, str] = {}
    for run in plan["runs"]:
        cfg = load_config(preset, run["overrides"])
        row["commands"] += command(preset, run["overrides"], task, run["eval_split"], run["out"])
        t = time.time()
        summary = finetune(cfg)
        info = {"best_on_dev": summary["best"], "final_eval": summary["final_eval"], "steps": summary["steps"],
                "dev_curve": dev_curve(run["out"] / f"finetune-{task}"),
                "description": summary["description"], "finetune_s": round(time.time() - t, 1)}
        metrics = dict(summary["final_eval"])  # after the last step: nothing chosen on dev
        if run["eval_split"]:
            t = time.time()
            stage = run["out"]
            ev = evaluate_task(cfg, str(stage / f"finetune-{task}" / "best"), split=run["eval_split"],
                               out_dir=str(stage / f"predictions-{run['eval_split']}"))
            info.update(eval=ev["metrics"], eval_s=round(time.time() - t, 1), files=ev["prediction_files"])
            metrics = ev["metrics"]
            pred_file = next((f for f in ev["prediction_files"] if f.endswith("predictions.json")), None)
            if pred_file:
                merged.update(json.loads(Path(pred_file).read_text()))
        info["metrics"] = metrics
        row["runs"].append(info)
    if task == "squad":
        gold = json.loads((data / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
        r = evaluate_v1(gold, merged)
        row["metrics"] = {"exact_match": r["exact_match"], "f1": r["f1"], "questions": r["total"],
                          "missing": r["missing"]}
    else:
        row["metrics"] = row["runs"][-1]["metrics"]
    row["seconds"] = round(time.time() - t0, 1)
    return row


def dev_curve(stage: Path) -> list[dict]:
    """The loop's dev evaluations (step and metrics) from the stage's metrics.jsonl."""
    from ptm_jax.train.metrics import read_metrics

    path = stage / "metrics.jsonl"
    if not path.exists():
        return []
    return [{k: v for k, v in r.items() if k not in ("split", "time")}
            for r in read_metrics(path) if r.get("split") == "eval"]


def table(rows: list[dict]) -> str:
    lines = [f"{'task':<10} {'split':<22} {'figures':<44} {'steps':>7} {'time s':>8}"]
    split = {"squad": "dev 2-fold (10,570 q)", "conll2003": "testb (best on testa)"}
    split.update({t: "dev (final step)" for t in GLUE})
    for r in rows:
        m = r["metrics"]
        figs = ", ".join(f"{k} {m[k] if r['task'] == 'squad' else 100 * m[k]:.2f}"
                         for k in PRIMARY[r["task"]] if k in m)
        steps = "+".join(str(x["steps"]) for x in r["runs"])
        lines.append(f"{r['task']:<10} {split.get(r['task'], 'dev'):<22} {figs:<44} {steps:>7} {r['seconds']:>8.1f}")
    curves = [r for r in rows if r["task"] in GLUE]
    if curves:
        lines += ["", "GLUE dev evaluations during training (for reading only; the table reports the last):"]
        for r in curves:
            for e in r["runs"][-1]["dev_curve"]:
                figs = ", ".join(f"{k} {100 * e[k]:.2f}" for k in PRIMARY[r["task"]] if k in e)
                lines.append(f"  {r['task']:<8} step {e['step']:>6}: {figs}")
    lines.append("")
    for r in rows:
        lines.append(f"# {r['task']}")
        lines += [f"  {c}" for c in r["commands"]]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    from ptm_jax.export.params import load_params

    _, model_cfg, _, _ = load_params(args.init)
    out = Path(args.out or Path(args.init) / "finetune_real")
    rows = []
    for plan in plans(args, model_cfg.max_position_embeddings, out):
        rows.append(run_task(plan, args.preset, Path(args.data)))
        print(f"[{plan['task']}] {json.dumps(rows[-1]['metrics'])} in {rows[-1]['seconds']} s", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(rows, indent=2, default=str))
    print(table(rows))
    print(f"\nresults: {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
