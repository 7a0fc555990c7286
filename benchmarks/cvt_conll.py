"""Cross-view training against the same BiLSTM tagger trained on the labels alone, CoNLL-2003 NER at a CPU budget
(Clark et al. 2018, Table 1's NER row, at toy scale: ``finetune.job=cvt``, ``ptm_jax/jobs/cvt``).

Both arms: the same network (``--vectors``: 50-d GloVe vectors trained here, ``ptm pretrain -c glove`` on the
unlabelled text, the Gutenberg books and eng.train's words without tags, frozen; or random 50-d embeddings, trained;
a table over the training words and the unlabelled words), two
BiLSTM layers of ``--hidden`` per direction, prediction modules with a ``--projection`` hidden layer, dropout 0.5,
Adam at ``--lr``), the same fixed ``--labelled`` training sentences of eng.train (``finetune.train_subset``,
``finetune.subset_seed=0``) and the same ``--epochs`` of them; the CVT arm takes an unlabelled minibatch of raw text
(``--unlabelled``: WikiText-2's valid and test text, sentences sampled with seed 0) after every labelled one
(``cvt.enabled=true``), the baseline none (``cvt.enabled=false``). Each run evaluates on eng.testa once per labelled
epoch and keeps its best epoch there; that kept model is scored once on eng.testb (``ptm eval --split test``'s code,
``train/evaluation.evaluate_task``). Every arm is run with each of ``--seeds`` (``finetune.seed``: the
initialisation, dropout and minibatch order), and the table gives the entity F1 mean and sample standard deviation
over the seeds.

A run whose result is in ``OUT/results.json`` is skipped (rerun the same command to resume).

    python benchmarks/cvt_conll.py --out runs/cvt_conll
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
DATA = REPO.parent / "shared" / "data"


def machine() -> dict:
    return {"cpus": os.cpu_count(), "load_average": [round(x, 1) for x in os.getloadavg()],
            "python": platform.python_version(), "utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}


def glove(a, out: Path, results: dict) -> str:
    """50-d GloVe (``ptm pretrain -c glove``, the preset's demo.sh settings) on the words of the unlabelled text,
    the Gutenberg books and eng.train's sentences without their tags, cut into words as the job cuts raw text;
    lower-cased by the preset's tokenizer. The run folder is ``finetune.init`` (static vectors, frozen)."""
    import subprocess

    from ptm_jax.data.tasks.conll import read_conll
    from ptm_jax.jobs.cvt.data import read_unlabelled

    run = out / "glove"
    if (run / "pretrain" / "summary.json").is_file():
        return str(run)
    corpus = out / "glove_corpus.txt"
    lines = [" ".join(w) for src in (a.unlabelled, a.books) for w in read_unlabelled(src)]
    lines += [" ".join(s.words) for s in read_conll(Path(a.conll) / "eng.train")[0]]
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "ptm_jax.cli", "pretrain", "-c", "glove", f"data.corpus={corpus}",
                    "data.format=lines", f"train.steps={a.glove_steps}", "train.progress_bar=false",
                    f"output_dir={run}"], check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    results["glove"] = {"wall_s": round(time.time() - t0, 1), "lines": len(lines), "steps": a.glove_steps}
    return str(run)


def overrides(a, arm: str, seed: int, out: Path) -> list[str]:
    return ["finetune.job=cvt", "finetune.task=conll2003", f"finetune.data_dir={a.conll}", f"finetune.init={a.init}",
            f"finetune.train_subset={a.labelled}", "finetune.subset_seed=0", f"finetune.epochs={a.epochs}",
            f"finetune.learning_rate={a.lr}", "finetune.warmup_proportion=0.0", "finetune.batch_size=32",
            "finetune.classifier_dropout=0.5", f"finetune.max_seq_length={a.max_len}", f"finetune.seed={seed}",
            f"cvt.unlabelled={a.unlabelled}", f"cvt.unlabelled_sentences={a.unlabelled_sentences}",
            f"cvt.enabled={'true' if arm == 'cvt' else 'false'}", f"cvt.aux_weight={a.aux_weight}",
            f"finetune.optimizer={a.optimizer}", f"cvt.hidden_1={a.hidden}",
            f"cvt.hidden_2={a.hidden}", f"cvt.projection={a.projection}", "train.progress_bar=false",
            f"output_dir={out / f'{arm}_s{seed}'}"]


def summarise(runs: dict, arms: list[str]) -> dict:
    table = {}
    for arm in arms:
        got = [r for k, r in runs.items() if k.startswith(arm + "/")]
        if not got:
            continue
        row = {"runs": len(got)}
        for key in ("testa_f1", "testb_f1"):
            vals = [r[key] for r in got]
            row[key] = {"mean": statistics.mean(vals), "sd": statistics.stdev(vals) if len(vals) > 1 else 0.0}
        row["wall_s"] = round(sum(r["wall_s"] for r in got), 1)
        table[arm] = row
    return table


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/cvt_conll")
    ap.add_argument("--conll", default=str(DATA / "conll2003"))
    ap.add_argument("--unlabelled", default=str(DATA / "corpus" / "wikitext-2-tokenized"))
    ap.add_argument("--unlabelled-sentences", type=int, default=0, help="0: all")
    ap.add_argument("--books", default=str(DATA / "corpus" / "gutenberg"), help="more GloVe text (--vectors glove)")
    ap.add_argument("--vectors", choices=["random", "glove"], default="glove",
                    help="random 50-d embeddings (trained), or GloVe trained here (frozen)")
    ap.add_argument("--glove-steps", type=int, default=1500)
    ap.add_argument("--labelled", type=int, default=1000)
    ap.add_argument("--epochs", type=float, default=20)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--projection", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=48)
    ap.add_argument("--aux-weight", type=float, default=1.0)
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--seeds", nargs="*", type=int, default=[1, 2, 3])
    ap.add_argument("--arms", nargs="*", default=["supervised", "cvt"])
    a = ap.parse_args(argv)

    from ptm_jax.config_loading import load_config
    from ptm_jax.train.evaluation import evaluate_task
    from ptm_jax.train.finetune import finetune

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rfile = out / "results.json"
    results = json.loads(rfile.read_text()) if rfile.is_file() else {"machine_start": machine(),
                                                                      "settings": vars(a)}
    a.init = glove(a, out, results) if a.vectors == "glove" else "random:50"
    rfile.write_text(json.dumps(results, indent=2))
    runs = results.setdefault("runs", {})
    for seed in a.seeds:
        for arm in a.arms:
            name = f"{arm}/seed{seed}"
            if name in runs:
                continue
            cfg = load_config(None, overrides(a, arm, seed, out))
            t0 = time.time()
            s = finetune(cfg)
            if s["preempted"]:
                raise SystemExit(f"{name}: stopped before its last step; rerun the same command to resume it")
            best = Path(cfg.output_dir) / "finetune-cvt" / "best"
            test = evaluate_task(cfg, str(best), split="test")["metrics"]
            runs[name] = {"wall_s": round(time.time() - t0, 1), "steps": s["step"],
                          "best_step": s["best"]["step"], "testa_f1": s["best"]["metrics"]["f1"],
                          "testb_f1": test["f1"], "testb_precision": test["precision"],
                          "testb_recall": test["recall"], "description": s["description"]}
            results["summary"] = summarise(runs, a.arms)
            results["machine_end"] = machine()
            rfile.write_text(json.dumps(results, indent=2))
            print("cvt_conll", name, json.dumps({k: v for k, v in runs[name].items() if k != "description"}),
                  flush=True)
    results["summary"] = summarise(runs, a.arms)
    rfile.write_text(json.dumps(results, indent=2))
    print("| arm | runs | eng.testa F1 (best epoch) | eng.testb F1 |")
    print("|---|---|---|---|")
    for arm, row in results["summary"].items():
        print(f"| {arm} | {row['runs']} | {row['testa_f1']['mean']:.4f} ± {row['testa_f1']['sd']:.4f} | "
              f"{row['testb_f1']['mean']:.4f} ± {row['testb_f1']['sd']:.4f} |")


if __name__ == "__main__":
    main()
