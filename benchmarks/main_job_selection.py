"""The main job's settings chosen on a selection split, never on the figures `ptm run` reports.

`ptm run` (preset ``bert_small``) reports the held-out MLM accuracy of the last ``data.eval_documents`` (8)
documents of the embedded corpus and the embedded task's dev accuracy. Here neither is read:

- pretraining: the ``--selection-docs`` documents before the held-out ones are taken out of training
  (``data.eval_documents`` = 8 + K, so the pairing plan covers only the rest) and are the evaluation set; the
  held-out 8 are neither trained on nor evaluated;
- finetuning: ``--selection-examples`` of the embedded task's training sentences are carved out
  (``benchmarks/selection_split.py``) and are the dev set; the task's dev split is not read.

Each pretraining learning rate of ``--lrs`` (the preset's warmup, steps and everything else) is pretrained, scored
on the selection documents, then finetuned with each of ``--finetune-lrs`` and scored on the selection sentences
after the last step. The setting with the best selection MLM accuracy (then the best selection task accuracy) is
the one the preset should carry; `ptm run` then reports it on the held-out set. Prints a Markdown table and writes
``results.json``; rerunning with the same ``--out`` skips what is finished.

    python benchmarks/main_job_selection.py --out runs/main_selection
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _done(path: Path) -> dict | None:
    if not path.is_file():
        return None
    s = json.loads(path.read_text())
    return s if not s.get("preempted") and s.get("step", 0) >= s.get("steps", s.get("step", 0)) else None


def pretrain_on_selection(preset: str, out: Path, lr: float, selection_docs: int, extra: list[str]) -> dict:
    """Pretraining with ``lr`` on the training documents less the selection ones, evaluated on those."""
    import numpy as np

    from ptm_jax.config_loading import load_config
    from ptm_jax.data.pretraining.source import SubsetSource
    from ptm_jax.train.stages import prepare_corpus, pretrain

    base = load_config(preset, [])
    held = base.data.eval_documents
    cfg = load_config(preset, [f"output_dir={str(out)!r}", f"train.learning_rate={lr}",
                               f"data.eval_documents={held + selection_docs}", "train.progress_bar=false", *extra])
    summary = _done(out / "pretrain" / "summary.json")
    if summary and "selection" in summary:
        return summary
    corpus = prepare_corpus(cfg)  # training documents: all but the last 8 + K (the plan is built over these)
    n = corpus.cache.num_docs
    corpus.eval = SubsetSource(corpus.cache, np.arange(n - held - selection_docs, n - held))  # the K, not the 8
    t0 = time.perf_counter()
    summary = pretrain(cfg, corpus=corpus)
    if summary["preempted"]:  # stopped (SIGTERM): the same command resumes from the checkpoint
        return summary
    summary["selection"] = {"documents": [int(n - held - selection_docs), int(n - held)], "held_out_unread": held,
                            "wall_s": round(time.perf_counter() - t0, 1)}
    (out / "pretrain" / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def finetune_on_selection(preset: str, init: Path, out: Path, data_dir: Path, lr: float, extra: list[str]) -> dict:
    """The embedded task's carved training sentences (SST-2 format), scored on the carved selection sentences."""
    from ptm_jax.config_loading import load_config
    from ptm_jax.train.finetune import finetune

    done = _done(out / "finetune-sst2" / "summary.json")
    if done:
        return done
    cfg = load_config(preset, [f"output_dir={str(out)!r}", "finetune.task=sst2",
                               f"finetune.data_dir={str(data_dir)!r}", f"finetune.init={str(init)!r}",
                               f"finetune.learning_rate={lr}", "train.progress_bar=false", *extra])
    return finetune(cfg)


def main(argv=None) -> int:
    from selection_split import carve_embedded

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/main_selection")
    ap.add_argument("--preset", default="bert_small")
    ap.add_argument("--lrs", nargs="+", type=float, default=[3e-4, 1e-3, 1e-4])
    ap.add_argument("--finetune-lrs", nargs="+", type=float, default=[3e-5, 1e-4, 3e-4])
    ap.add_argument("--selection-docs", type=int, default=8)
    ap.add_argument("--selection-examples", type=int, default=1000)
    ap.add_argument("--set", nargs="*", default=[], metavar="section.key=value", help="overrides for every run")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    data = out / "embedded_selection"
    if not (data / "SST-2" / "dev.tsv").is_file():
        print(carve_embedded(data, a.selection_examples))
    rows = []
    first = next((p for p in sorted(out.glob("pretrain_lr*")) if (p / "cache").exists()), None)  # one tokenizer
    for lr in a.lrs:
        run = out / f"pretrain_lr{lr:g}"
        if first is not None and not (run / "cache").exists():  # the same tokenizer and token cache for all
            for part in ("tokenizer", "cache"):
                if (first / part).exists():
                    shutil.copytree(first / part, run / part)
        s = pretrain_on_selection(a.preset, run, lr, a.selection_docs, a.set)
        if s["preempted"]:
            print(f"pretraining with lr {lr:g} stopped at step {s['step']}; run the same command to continue")
            return 1
        first = first or run
        row = {"lr": lr, "steps": s["step"], "selection_mlm_accuracy": s["eval"].get("mlm_accuracy"),
               "selection_nsp_accuracy": s["eval"].get("nsp_accuracy"), "pretrain_wall_s": s["selection"]["wall_s"],
               "most_frequent_token": (s.get("baseline") or {}).get("majority_accuracy"), "finetune": {}}
        for flr in a.finetune_lrs:
            f = finetune_on_selection(a.preset, run / "pretrain", run / f"finetune_lr{flr:g}", data, flr, a.set)
            row["finetune"][f"{flr:g}"] = f["final_eval"].get("accuracy")
        rows.append(row)
        (out / "results.json").write_text(json.dumps({"rows": rows, "args": vars(a)}, indent=2))
    best = max(rows, key=lambda r: (r["selection_mlm_accuracy"], max(r["finetune"].values())))
    best_ft = max(best["finetune"], key=best["finetune"].get)
    heads = " | ".join(f"task acc, finetune lr {k}" for k in rows[0]["finetune"])
    print(f"| pretraining lr | selection MLM acc | selection NSP acc | {heads} |")
    print("|---|---|---|" + "---|" * len(rows[0]["finetune"]))
    for r in rows:
        cells = " | ".join(f"{v:.4f}" for v in r["finetune"].values())
        print(f"| {r['lr']:g} | {r['selection_mlm_accuracy']:.4f} | {r['selection_nsp_accuracy']:.4f} | {cells} |")
    print(f"most frequent token on the selection documents: {rows[0]['most_frequent_token']}")
    print(f"chosen: train.learning_rate={best['lr']:g} finetune.learning_rate={best_ft}")
    (out / "results.json").write_text(json.dumps({"rows": rows, "chosen": {"learning_rate": best["lr"],
                                                  "finetune_learning_rate": float(best_ft)}, "args": vars(a)},
                                                 indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
