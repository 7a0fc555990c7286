"""Four tiny finetuning jobs at a fixed seed, run through the ``ptm`` CLI, and their figures compared with an
earlier run of the same jobs (e.g. before a refactoring of the finetuning jobs).

Jobs (one CPU device, about 3-6 minutes in all on a 2-core machine):

1. ``run``: ``ptm run -c bert_tiny`` (10 pretraining steps) then finetuning on the embedded task; its best model
   scored again by ``ptm eval``.
2. ``mtdnn``: MT-DNN on RTE + STS-B + an MRPC ranking task (16 training examples each, the SAN answer module on
   RTE), one epoch of per-task finetuning after the multi-task stage, from job 1's pretrained model; the best
   RTE and STS-B models scored again by ``ptm eval``.
3. ``consert``: ConSERT (unsupervised, the default views) on 96 STS-B training sentences, evaluated on STS-B dev,
   from job 1's pretrained model.
4. ``textcnn``: a TextCNN head over job 1's frozen per-layer features on the embedded task.

Each job's ``metrics.jsonl`` (less the host-clock fields), ``summary.json``, ``best.json``, the best model's
parameters and (where ``ptm eval`` reads the model) its prediction files and raw outputs are saved under
``OUT/<job>/``. ``--compare REF`` then compares OUT with REF (an earlier OUT): the numbers within ``--tol``
(default 1e-6), the texts equal; it prints one line per file and exits 1 on any difference.

    python benchmarks/finetune_equivalence.py --out /tmp/ft_after --compare /work/notes/ft_before

The configuration keys of the jobs moved when the jobs became plug-ins (``finetune.job`` and the jobs' own
sections): the script passes the keys of the configuration system it finds (:func:`overrides`), so the same
jobs run before and after.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the ptm_jax of this checkout (also for the `ptm` processes, run from ROOT)
SHARED = Path(os.environ.get("PTM_SHARED_DATA", "/work/shared/data"))
CLOCK_KEYS = ("time", "sec", "wait", "flops", "mfu", "elapsed", "duration", "compile")
"""Fields measured by host clocks (throughput, input wait, MFU): not compared, in metrics.jsonl and summaries."""


def new_keys() -> bool:
    from ptm_jax.config import FinetuneConfig

    return "job" in FinetuneConfig.__dataclass_fields__


def overrides(job: str, out: Path, data: Path) -> list[str]:
    """The config overrides of ``job`` in the key names of the installed configuration."""
    pre = out / "run" / "pretrain"
    common = ["train.progress_bar=false", "finetune.seed=0"]
    new = new_keys()
    if job == "mtdnn":
        tasks = {"tasks": "[rte,stsb,mrpc_rank]", "ranking_candidates": "2", "answer": "san",
                 "finetune_epochs": "1.0"}
        moved = ([f"mtdnn.{k}={v}" for k, v in tasks.items()] + ["finetune.job=mtdnn"] if new else
                 ["finetune.task=mtdnn", *(f"finetune.{'mtdnn_' + k if k in ('answer', 'finetune_epochs') else k}={v}"
                                           for k, v in tasks.items())])
        return [*common, *moved, f"finetune.init={pre}", f"finetune.data_dir={data / 'glue'}",
                "finetune.train_subset=16", "finetune.max_seq_length=32", "finetune.batch_size=8",
                "finetune.epochs=2.0", "finetune.learning_rate=2e-3", "finetune.warmup_proportion=0.0",
                "finetune.eval_every=4", f"output_dir={out / 'mtdnn'}"]
    if job == "consert":
        moved = (["finetune.job=consert", f"consert.eval_data_dir={data / 'glue'}"] if new else
                 ["finetune.task=consert", f"finetune.eval_data_dir={data / 'glue'}"])
        return [*common, *moved, f"finetune.init={pre}", f"finetune.data_dir={data / 'sentences.txt'}",
                "finetune.max_seq_length=32", "finetune.batch_size=8", "finetune.epochs=1.0",
                "finetune.eval_every=6", f"output_dir={out / 'consert'}"]
    if job == "textcnn":
        moved = ["finetune.job=features", "features.head=textcnn"] if new else ["finetune.head=textcnn"]
        return [*common, *moved, "finetune.task=embedded", f"finetune.init={pre}", "finetune.batch_size=16",
                "finetune.epochs=2.0", "finetune.learning_rate=1e-3", f"output_dir={out / 'textcnn'}"]
    raise KeyError(job)


def ptm(*args: str) -> None:
    cmd = [sys.executable, "-m", "ptm_jax.cli", *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)


def make_data(data: Path) -> None:
    """GLUE subsets (the real train files; the first 24 RTE/STS-B and 48 MRPC dev rows) and 96 STS-B sentences."""
    for d, rows in (("RTE", 24), ("STS-B", 24), ("MRPC", 48)):
        (data / "glue" / d).mkdir(parents=True, exist_ok=True)
        shutil.copy(SHARED / "glue" / d / "train.tsv", data / "glue" / d / "train.tsv")
        lines = (SHARED / "glue" / d / "dev.tsv").read_text(encoding="utf-8").splitlines(True)
        (data / "glue" / d / "dev.tsv").write_text("".join(lines[: rows + 1]), encoding="utf-8")
    seen: dict[str, None] = {}
    for line in (SHARED / "glue" / "STS-B" / "train.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        cols = line.split("\t")
        seen.update(dict.fromkeys(cols[7:9]))
    (data / "sentences.txt").write_text("\n".join(list(seen)[:96]) + "\n", encoding="utf-8")


def collect(stage: Path, dest: Path) -> None:
    """metrics.jsonl (less the clock fields), summary.json, best.json, the best params as npz, predictions."""
    dest.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(x) for x in (stage / "metrics.jsonl").read_text().splitlines() if x.strip()]
    rows = [{k: v for k, v in r.items() if not any(c in k for c in CLOCK_KEYS)} for r in rows]
    (dest / "metrics.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    for name in ("summary.json", "best.json"):
        if (stage / name).exists():
            shutil.copy(stage / name, dest / name)
    best = stage / "best"
    if best.is_dir():
        import orbax.checkpoint as ocp

        tree = ocp.PyTreeCheckpointer().restore(str((best / "params").absolute()))
        flat = {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(v)
                for path, v in __import__("jax").tree_util.tree_flatten_with_path(tree)[0]}
        np.savez(dest / "best_params.npz", **flat)
        for p in sorted(best.glob("predictions-*")):
            shutil.copytree(p, dest / p.name, dirs_exist_ok=True)


def run_all(out: Path, resume: bool = False) -> None:
    """The four jobs into ``out``; ``resume``: a job whose ``results/<job>`` exists is not run again."""
    data = out / "data"
    make_data(data)
    if not (resume and (out / "results" / "run").is_dir()):
        run_job(out)
    if not (resume and (out / "results" / "mtdnn").is_dir()):
        mtdnn_job(out, data)
    if not (resume and (out / "results" / "consert").is_dir()):
        ptm("finetune", "-c", "bert_tiny", *overrides("consert", out, data))
        collect(out / "consert" / "finetune-consert", out / "results" / "consert")
    if not (resume and (out / "results" / "textcnn").is_dir()):
        ptm("finetune", "-c", "bert_tiny", *overrides("textcnn", out, data))
        stage = out / "textcnn" / "finetune-embedded"
        collect(stage, out / "results" / "textcnn")
        shutil.copy(stage / "best" / "feature_model.json", out / "results" / "textcnn" / "feature_model.json")


def run_job(out: Path) -> None:
    ptm("run", "-c", "bert_tiny", f"output_dir={out / 'run'}", "train.steps=10", "train.seed=0",
        "train.progress_bar=false", "finetune.task=embedded", "finetune.seed=0")
    stage = out / "run" / "finetune-embedded"
    ptm("eval", "-c", "bert_tiny", "--model", str(stage / "best"), "--task", "embedded", "train.progress_bar=false")
    collect(stage, out / "results" / "run")
    shutil.copy(out / "run" / "summary.json", out / "results" / "run" / "run_summary.json")


def mtdnn_job(out: Path, data: Path) -> None:
    ptm("finetune", "-c", "bert_tiny", *overrides("mtdnn", out, data))
    root = out / "mtdnn" / "mtdnn"
    for task in ("rte", "stsb"):
        ptm("eval", "-c", "bert_tiny", "--model", str(root / task / "best"), "--task", task,
            f"finetune.data_dir={data / 'glue'}", "finetune.max_seq_length=32", "finetune.batch_size=8",
            "train.progress_bar=false")
        collect(root / task / "finetune", out / "results" / "mtdnn" / f"{task}_finetune")
        collect_best(root / task, out / "results" / "mtdnn" / f"{task}_best")
    collect(root / "multitask", out / "results" / "mtdnn" / "multitask")
    shutil.copy(root / "summary.json", out / "results" / "mtdnn" / "summary.json")


def collect_best(task_dir: Path, dest: Path) -> None:
    """An MT-DNN task's kept model (``<task>/best``, its best.json beside it)."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(task_dir / "best.json", dest / "best.json")
    (dest / "metrics.jsonl").write_text("")
    import orbax.checkpoint as ocp

    tree = ocp.PyTreeCheckpointer().restore(str((task_dir / "best" / "params").absolute()))
    flat = {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(v)
            for path, v in __import__("jax").tree_util.tree_flatten_with_path(tree)[0]}
    np.savez(dest / "best_params.npz", **flat)
    for p in sorted((task_dir / "best").glob("predictions-*")):
        shutil.copytree(p, dest / p.name, dirs_exist_ok=True)


# ------------------------------------------------------------------------------------------- comparing

VOLATILE = {"description", "init", "model", "prediction_files", "data_dir", "output_dir", "feature_cache",
            "config", "source"}
"""Fields that hold paths of the run (the OUT folder differs) or free text naming them."""


def _diff(a, b, where: str, tol: float, out: list[str]) -> float:
    """Largest numeric difference between two JSON values; structural or text differences go to ``out``."""
    if isinstance(a, dict) and isinstance(b, dict):
        worst = 0.0
        if set(a) != set(b):
            out.append(f"{where}: keys differ: {sorted(set(a) ^ set(b))}")
        for k in set(a) & set(b):
            if k in VOLATILE or any(c in k for c in CLOCK_KEYS):
                continue
            worst = max(worst, _diff(a[k], b[k], f"{where}.{k}", tol, out))
        return worst
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{where}: lengths {len(a)} vs {len(b)}")
            return 0.0
        return max([_diff(x, y, f"{where}[{i}]", tol, out) for i, (x, y) in enumerate(zip(a, b))] or [0.0])
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        if math.isnan(a) and math.isnan(b):
            return 0.0
        d = abs(float(a) - float(b))
        if d > tol:
            out.append(f"{where}: {a} vs {b}")
        return d
    if a != b:
        out.append(f"{where}: {a!r:.80} vs {b!r:.80}")
    return 0.0


def compare(new: Path, ref: Path, tol: float) -> int:
    bad = 0
    files = sorted(p.relative_to(ref) for p in (ref / "results").rglob("*") if p.is_file())
    for rel in files:
        a, b = new / rel, ref / rel
        problems: list[str] = []
        if not a.exists():
            print(f"MISSING {rel}")
            bad += 1
            continue
        if rel.suffix == ".npz":
            x, y = np.load(a), np.load(b)
            if set(x.files) != set(y.files):
                problems.append(f"arrays differ: {sorted(set(x.files) ^ set(y.files))}")
                worst = 0.0
            else:
                worst = max([float(np.max(np.abs(x[k].astype(np.float64) - y[k].astype(np.float64))))
                             if x[k].size else 0.0 for k in x.files] or [0.0])
                if worst > tol:
                    problems.append(f"max |diff| {worst:.3g}")
        elif rel.suffix in (".json", ".jsonl"):
            la = [json.loads(s) for s in a.read_text().splitlines() if s.strip()] if rel.suffix == ".jsonl" else \
                [json.loads(a.read_text())]
            lb = [json.loads(s) for s in b.read_text().splitlines() if s.strip()] if rel.suffix == ".jsonl" else \
                [json.loads(b.read_text())]
            worst = _diff(la, lb, rel.name, tol, problems)
        else:
            same = a.read_bytes() == b.read_bytes()
            worst = 0.0 if same else float("inf")
            if not same:
                problems.append("bytes differ")
        status = "OK  " if not problems else "DIFF"
        print(f"{status} {rel}  max|diff|={worst:.3g}")
        for p in problems[:8]:
            print(f"       {p}")
        bad += bool(problems)
    print(f"{len(files) - bad} of {len(files)} files equal within {tol}")
    return 1 if bad else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for the runs and results/ (emptied first)")
    p.add_argument("--compare", default=None, help="an earlier --out folder to compare results/ with")
    p.add_argument("--tol", type=float, default=1e-6)
    p.add_argument("--skip-run", action="store_true", help="only compare an existing --out")
    p.add_argument("--resume", action="store_true", help="keep --out; run only the jobs without results/<job>")
    a = p.parse_args()
    out = Path(a.out).absolute()
    if not a.skip_run:
        if out.exists() and not a.resume:
            shutil.rmtree(out)
        out.mkdir(parents=True, exist_ok=True)
        run_all(out, resume=a.resume)
    return compare(out, Path(a.compare).absolute(), a.tol) if a.compare else 0


if __name__ == "__main__":
    sys.exit(main())
