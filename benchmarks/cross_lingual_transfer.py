"""Zero-shot cross-lingual transfer (mBERT's claim, Devlin et al. multilingual.md "Zero Shot"): pretrain a small
BERT on English and Chinese text at once, finetune it on English labels only (GLUE SST-2), evaluate it on Chinese
sentiment (ChnSentiCorp hotel reviews) that it never saw a label of; beside it the same network pretrained on
English only, at the same budget (steps x batch x sequence length), finetuned and evaluated the same way.

Everything goes through the CLI a user types: ``ptm pretrain`` (the multilingual corpus as
``data.corpus = "en=...,zh=..."`` with mBERT's smoothed language shares, ``data.language_alpha``), ``ptm finetune
--task sst2`` on ../shared/data/glue, ``ptm eval --task sst2 --glue-dir <chnsenticorp>`` (benchmarks/chinese_text.py
writes ChnSentiCorp in SST-2's layout). Nothing is chosen on the Chinese set: the finetuned model is the one after
the last step (``finetune-sst2/final``) when it exists, else ``best`` (chosen on English SST-2 dev).

    python benchmarks/cross_lingual_transfer.py --zh-corpus data/fetched/zh/zh_shopping.txt \
        --zh-eval data/fetched/zh/chnsenticorp --out runs/xling
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
ENGLISH = str(DATA / "corpus" / "gutenberg" / "[0-9]*.txt")


def ptm(*args: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "ptm_jax.cli", *args], capture_output=True, text=True, env=env)
    if r.returncode:
        raise SystemExit(f"ptm {' '.join(args)} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout


def model_overrides(args) -> list[str]:
    return [f"model.vocab_size={args.vocab}", f"tokenizer.vocab_size={args.vocab}", "model.hidden_size=64",
            "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=256",
            "model.max_position_embeddings=128", "data.max_seq_length=64", "data.max_predictions_per_seq=10",
            "train.batch_size=32", f"train.steps={args.steps}", "train.learning_rate=1e-3", "train.warmup_steps=50",
            f"train.eval_every={args.steps}", f"train.checkpoint_every={args.steps}", "train.log_every=100",
            "data.format='auto'", f"tokenizer.limit_alphabet={args.alphabet}", "tokenizer.train_sample_bytes=4000000"]


def cell(args, name: str, corpus: str, seed: int, vocab_file: Path | None) -> dict:
    """One pretraining -> finetuning -> evaluation; ``vocab_file``: the tokenizer of the corpus's first seed (the
    same text gives the same vocabulary; reusing it keeps its token cache)."""
    run = args.out / f"{name}-s{seed}"
    common = ["-c", "bert_tiny", f"output_dir={str(run)!r}", f"data.cache_dir={str(args.out / ('cache-' + name))!r}"]
    if vocab_file is not None:
        common.append(f"tokenizer.vocab_file={str(vocab_file)!r}")
    out = ptm("pretrain", *common, *model_overrides(args), f"data.corpus={corpus!r}", f"data.seed={seed}",
              f"train.seed={seed}", f"data.language_alpha={args.alpha}")
    mlm = re.search(r"held-out MLM accuracy ([0-9.]+)", out)
    shares = ptm("data", *common, *model_overrides(args), f"data.corpus={corpus!r}", f"data.seed={seed}",
                 f"data.language_alpha={args.alpha}") if "=" in corpus.split(",")[0] else ""
    ft = ["finetune.batch_size=32", f"finetune.epochs={args.epochs}", "finetune.learning_rate=5e-4",
          "finetune.max_seq_length=64", f"finetune.seed={seed}"]
    out = ptm("finetune", *common, "--task", "sst2", "--glue-dir", str(DATA / "glue"), *ft)
    dev = re.search(r"after the last step \(step \d+\): ([0-9.]+)", out)
    model = run / "finetune-sst2" / ("final" if (run / "finetune-sst2" / "final").exists() else "best")
    res = json.loads(ptm("eval", *common, "--model", str(model), "--task", "sst2", "--glue-dir", str(args.zh_eval),
                         "--split", "dev", *ft))
    zh = res.get("metrics", res)
    return {"mlm_accuracy": float(mlm.group(1)) if mlm else None, "sst2_dev": float(dev.group(1)) if dev else None,
            "zh_accuracy": zh.get("accuracy"), "zh_eval": zh, "model": str(model),
            "shares": [ln for ln in shares.splitlines() if ln.startswith("  ")]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zh-corpus", type=Path, required=True)
    ap.add_argument("--zh-eval", type=Path, required=True, help="folder holding SST-2/dev.tsv of Chinese reviews")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--epochs", type=float, default=0.1)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--alpha", type=float, default=0.7)
    ap.add_argument("--alphabet", type=int, default=4000, help="tokenizer.limit_alphabet (Chinese needs thousands)")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--tokenizer-seed", type=int, default=None,
                    help="the seed whose run trained the tokenizer the others reuse (default: the first of --seeds); "
                         "to add a seed to a finished --out")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    corpora = {"multilingual": f"en={ENGLISH},zh={args.zh_corpus}", "english": ENGLISH}
    done = args.out / "results.json"
    results: dict = json.loads(done.read_text()) if done.exists() else {}
    t0 = time.perf_counter()
    seeds = [int(s) for s in args.seeds.split(",")]
    for seed in seeds:
        for name, corpus in corpora.items():
            owner = seeds[0] if args.tokenizer_seed is None else args.tokenizer_seed
            first = args.out / f"{name}-s{owner}" / "tokenizer" / "vocab.txt"
            results[f"{name}-s{seed}"] = r = cell(args, name, corpus, seed, first if seed != owner else None)
            print(name, seed, json.dumps({k: r[k] for k in ("mlm_accuracy", "sst2_dev", "zh_accuracy")}),
                  *r["shares"], sep="\n  " if r["shares"] else " ", flush=True)
            (args.out / "results.json").write_text(json.dumps(results, indent=1))
    print(f"\n{platform.machine()}, {os.cpu_count()} CPUs, {time.perf_counter() - t0:.0f} s")
    for name in corpora:
        rows = [v for k, v in results.items() if k.startswith(name)]
        print(name, "SST-2 dev", [r["sst2_dev"] for r in rows], "ChnSentiCorp", [r["zh_accuracy"] for r in rows])


if __name__ == "__main__":
    main()
