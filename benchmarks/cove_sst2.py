"""CoVe on SST-2: an MT-LSTM trained on Multi30k English->German at a CPU budget, then [GloVe; CoVe] against
GloVe alone through the same TextCNN head (McCann et al. 2017 Sec. 4-5, at toy scale).

1. GloVe (``ptm pretrain -c glove``, 100 dimensions) on one text of the 12 Gutenberg books and the Multi30k
   English training side (cut into words as the MT-LSTM's source side is: ``parallel.tokenize``, lower-cased) and
   the SST-2 training sentences (text only, no labels; the dev sentences are never read).
2. The MT-LSTM (``ptm pretrain -c cove``, smaller than the paper's) over those fixed vectors on Multi30k
   train.en -> train.de, evaluated on val.en/val.de.
3. SST-2: ``--select-examples`` training sentences carved out as the selection split
   (``benchmarks/selection_split.py``, seed 0), TextCNN (Kim 2014's dropout 0.5, batch 50) on a
   ``--train-subset`` of the rest, over (a) the GloVe vectors alone (frozen) and (b) [GloVe; CoVe]
   (``finetune.init`` the MT-LSTM, ``features.word_init`` the same GloVe vectors). Each arm's learning rate (and
   the CoVe arm's ``features.feature_norm``, ``--cove-norms``) is chosen on the selection split (seed 0); the
   chosen setting is trained again with each of ``--seeds`` on the same rows with SST-2's dev set as its
   evaluation set, and the accuracy after the last step is reported (the dev set chooses nothing: not the setting,
   not the epoch).
4. ``--conll-seeds``: the same two inputs under the BiLSTM tagger on CoNLL-2003 (chosen on eng.testa, scored on
   eng.testb).

Every step is skipped when its result exists (rerun the same command to resume).

    python benchmarks/cove_sst2.py --multi30k data/fetched/multi30k --out runs/cove_sst2
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
DATA = REPO.parent / "shared" / "data"
KIM = ["finetune.classifier_dropout=0.5", "finetune.batch_size=50"]


def machine() -> dict:
    return {"cpus": os.cpu_count(), "load_average": [round(x, 1) for x in os.getloadavg()],
            "python": platform.python_version(), "utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}


def ptm(args: list[str]) -> float:
    """``ptm ARGS`` as a user runs it (printed); its wall seconds."""
    print("ptm " + " ".join(args), flush=True)
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "ptm_jax.cli", *args], check=True, cwd=REPO,
                   env={**os.environ, "PYTHONPATH": str(REPO)})
    return round(time.time() - t0, 1)


def glove_corpus(out: Path, multi30k: Path) -> Path:
    from ptm_jax.families.cove.parallel import tokenize

    path = out / "glove_corpus.txt"
    if path.is_file():
        return path
    lines = []
    for book in sorted((DATA / "corpus" / "gutenberg").glob("*.txt")):
        for para in book.read_text(encoding="utf-8", errors="replace").split("\n\n"):
            words = tokenize(para.lower())
            if words:
                lines.append(" ".join(words))
    lines += [" ".join(tokenize(s.lower())) for s in (multi30k / "train.en").read_text(encoding="utf-8").splitlines()]
    sst = (DATA / "glue" / "SST-2" / "train.tsv").read_text(encoding="utf-8").splitlines()[1:]
    lines += [row.split("\t")[0] for row in sst]  # already lower-cased words
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def report_folder(out: Path) -> Path:
    """The carved train.tsv (what the heads train on) beside SST-2's own dev.tsv."""
    report = out / "sst2_report"
    if not (report / "SST-2" / "dev.tsv").is_file():
        (report / "SST-2").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / "sst2_select" / "SST-2" / "train.tsv", report / "SST-2" / "train.tsv")
        shutil.copyfile(DATA / "glue" / "SST-2" / "dev.tsv", report / "SST-2" / "dev.tsv")
    return report


def finetune_run(name: str, overrides: list[str], results: dict, out: Path, report_dev: bool) -> dict:
    """One TextCNN run. Selection (``report_dev`` False): scored on the selection split, the kept figure its
    best epoch. Report: the same training rows and setting with SST-2's dev set as the evaluation set, the figure
    the one after the last step (nothing is kept or chosen by it)."""
    from ptm_jax.config_loading import load_config
    from ptm_jax.train.finetune import finetune

    runs = results.setdefault("runs", {})
    key = ("report/" if report_dev else "") + name
    if key in runs:
        return runs[key]
    if report_dev:
        overrides = [o for o in overrides if not o.startswith(("finetune.data_dir=", "output_dir="))] + [
            f"finetune.data_dir={report_folder(out)}",
            f"output_dir={out / 'report' / name.replace('+', '_').replace('/', '_')}"]
    cfg = load_config(None, overrides)
    t0 = time.time()
    s = finetune(cfg)
    acc = s["final_eval"].get("accuracy")
    runs[key] = {"overrides": overrides, "wall_s": round(time.time() - t0, 1), "steps": s["step"]}
    if report_dev:
        runs[key]["sst2_dev_last_step"] = acc
    else:
        runs[key]["selection_final"] = acc
        runs[key]["selection_best"] = (s.get("best") or {}).get("metrics", {}).get("accuracy", acc)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(key, json.dumps(runs[key]), flush=True)
    return runs[key]


def conll(a, out: Path, results: dict, glove: Path, mt: Path) -> None:
    """CoNLL-2003: the BiLSTM tagger (softmax) over GloVe alone and over [GloVe; CoVe] (CoVe's dimensions
    standardised or not: ``features.feature_norm``), the settings of docs/benchmarks.md's earlier CoNLL sections
    (2,000 sentences, 3 epochs, lr 1e-2, dropout 0.5); each run keeps its best eng.testa epoch, the arm is chosen
    by mean eng.testa F1, and every kept model is scored once on eng.testb."""
    from ptm_jax.config_loading import load_config
    from ptm_jax.train.evaluation import evaluate_task
    from ptm_jax.train.finetune import finetune

    common = ["finetune.task=conll2003", f"finetune.data_dir={DATA / 'conll2003'}", "finetune.train_subset=2000",
              "finetune.epochs=3", "finetune.learning_rate=0.01", "finetune.max_seq_length=64",
              f"features.feature_cache={out / 'feature_cache'}", "finetune.job=features", "features.head=bilstm",
              "finetune.batch_size=32", "finetune.classifier_dropout=0.5", "finetune.warmup_proportion=0.0",
              "train.progress_bar=false"]
    arms = {"glove": [f"finetune.init={glove}"],
            "glove+cove": [f"finetune.init={mt}", f"features.word_init={glove}", "features.feature_norm=none"],
            "glove+cove/dimension": [f"finetune.init={mt}", f"features.word_init={glove}",
                                     "features.feature_norm=dimension"]}
    runs = results.setdefault("conll", {})
    for seed in a.conll_seeds:
        for arm, src in arms.items():
            name = f"{arm}/seed{seed}"
            if name in runs:
                continue
            cfg = load_config(None, [*common, *src, f"finetune.seed={seed}",
                                     f"output_dir={out / 'conll' / arm.replace('+', '_').replace('/', '_')}_s{seed}"])
            t0 = time.time()
            s = finetune(cfg)
            best = Path(cfg.output_dir) / "finetune-conll2003" / "best"
            runs[name] = {"wall_s": round(time.time() - t0, 1), "testa_f1": (s.get("best") or {}).get(
                "metrics", s["final_eval"]).get("f1", s["final_eval"].get("f1")),
                          "testb_f1": evaluate_task(cfg, str(best), split="test")["metrics"]["f1"]}
            (out / "results.json").write_text(json.dumps(results, indent=2))
            print("conll", name, json.dumps(runs[name]), flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--multi30k", required=True, help="folder with train.en/de and val.en/de (Multi30k task1 raw)")
    ap.add_argument("--out", default="runs/cove_sst2")
    ap.add_argument("--glove-steps", type=int, default=1000)
    ap.add_argument("--mt-steps", type=int, default=400)
    ap.add_argument("--mt", nargs="*", default=[], help="more overrides of the MT-LSTM run")
    ap.add_argument("--select-examples", type=int, default=1000)
    ap.add_argument("--train-subset", type=int, default=4000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--lrs", nargs="+", type=float, default=[1e-3, 3e-3])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--cove-norms", nargs="+", default=["none", "dimension"], choices=["none", "layer", "dimension"],
                    help="features.feature_norm values in the CoVe arm's selection grid")
    ap.add_argument("--conll-seeds", nargs="*", type=int, default=[],
                    help="also the CoNLL-2003 tagger arms with these seeds (none by default)")
    a = ap.parse_args(argv)
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    m30k = Path(a.multi30k).resolve()
    rfile = out / "results.json"
    results = json.loads(rfile.read_text()) if rfile.is_file() else {"machine_start": machine()}

    glove = out / "glove"
    if not (glove / "pretrain" / "summary.json").is_file():
        corpus = glove_corpus(out, m30k)
        results["glove_wall_s"] = ptm(["pretrain", "-c", "glove", f"data.corpus={corpus}", "data.format=lines",
                                       "model.dim=100", "model.vocab_size=40000", "tokenizer.vocab_size=40000",
                                       "tokenizer.min_count=3", f"train.steps={a.glove_steps}",
                                       "train.progress_bar=false", f"output_dir={glove}"])
        rfile.write_text(json.dumps(results, indent=2))

    mt = out / "mtlstm"
    if not (mt / "pretrain" / "summary.json").is_file():
        results["mt_wall_s"] = ptm(["pretrain", "-c", "cove", f"model.input_vectors={glove}", "model.input_dim=100",
                                    f"data.source_train={m30k / 'train.en'}", f"data.target_train={m30k / 'train.de'}",
                                    f"data.source_eval={m30k / 'val.en'}", f"data.target_eval={m30k / 'val.de'}",
                                    "model.hidden_size=128", "model.decoder_size=256", "model.target_embed_dim=128",
                                    "model.vocab_size=6000", "data.target_min_count=2", "data.max_seq_length=20",
                                    "train.batch_size=64",
                                    f"train.steps={a.mt_steps}", "train.eval_every=200", "train.eval_batches=16",
                                    "train.checkpoint_every=100", "train.progress_bar=false", *a.mt,
                                    f"output_dir={mt}"])
        rfile.write_text(json.dumps(results, indent=2))
    results["mt_summary"] = json.loads((mt / "pretrain" / "summary.json").read_text())

    from selection_split import carve_glue

    select = out / "sst2_select"
    if not (select / "SST-2" / "dev.tsv").is_file():
        carve_glue(DATA / "glue", "sst2", select, a.select_examples, seed=0)
    common = ["finetune.task=sst2", f"finetune.data_dir={select}", f"finetune.train_subset={a.train_subset}",
              f"finetune.epochs={a.epochs}", "finetune.max_seq_length=56", "finetune.warmup_proportion=0.0",
              f"features.feature_cache={out / 'feature_cache'}", "finetune.job=features", "features.head=textcnn",
              "train.progress_bar=false", *KIM]
    arms = {"glove": [f"finetune.init={glove}"],
            "glove+cove": [f"finetune.init={mt}", f"features.word_init={glove}"]}
    # each arm's setting, chosen on the selection split (seed 0): the learning rate, and for the CoVe arm also
    # features.feature_norm (its CoVe dimensions standardised by the training words' statistics, or not)
    grid = {"glove": [(lr, "") for lr in a.lrs],
            "glove+cove": [(lr, norm) for norm in a.cove_norms for lr in a.lrs]}

    def run_name(arm: str, lr: float, norm: str, seed: int) -> str:
        return f"{arm}{'/' + norm if norm and norm != 'none' else ''}/lr{lr:g}/seed{seed}"

    def overrides(arm: str, lr: float, norm: str, seed: int) -> list[str]:
        folder = run_name(arm, lr, norm, seed).replace("+", "_").replace("/", "_")
        return [*common, *arms[arm], *([f"features.feature_norm={norm}"] if norm else []),
                f"finetune.learning_rate={lr}", f"finetune.seed={seed}", f"output_dir={out / 'runs' / folder}"]

    chosen = {}
    for arm in arms:
        scores = {}
        for lr, norm in grid[arm]:
            r = finetune_run(run_name(arm, lr, norm, 0), overrides(arm, lr, norm, 0), results, out, report_dev=False)
            scores[(lr, norm)] = r["selection_best"]
        chosen[arm] = max(grid[arm], key=lambda k: scores[k])
    for seed in a.seeds:  # the chosen settings, each seed, scored once on SST-2 dev
        for arm in arms:
            lr, norm = chosen[arm]
            finetune_run(run_name(arm, lr, norm, seed), overrides(arm, lr, norm, seed), results, out, report_dev=True)
    results["chosen"] = {arm: list(v) for arm, v in chosen.items()}
    results["machine_end"] = machine()
    rfile.write_text(json.dumps(results, indent=2))
    if a.conll_seeds:
        conll(a, out, results, glove, mt)
    import statistics

    print("| arm | setting (chosen on the selection split) | selection acc, seed 0 | SST-2 dev acc, mean ± sd over seeds |")
    print("|---|---|---|---|")
    for arm in arms:
        lr, norm = chosen[arm]
        devs = [results["runs"]["report/" + run_name(arm, lr, norm, s)]["sst2_dev_last_step"] * 100 for s in a.seeds]
        sd = statistics.stdev(devs) if len(devs) > 1 else 0.0
        sel = results["runs"][run_name(arm, lr, norm, 0)]["selection_best"] * 100
        print(f"| {arm} | lr {lr:g}{', feature_norm ' + norm if norm else ''} | {sel:.2f} | {statistics.mean(devs):.2f} ± {sd:.2f} ({', '.join(f'{d:.2f}' for d in devs)}) |")


if __name__ == "__main__":
    main()
