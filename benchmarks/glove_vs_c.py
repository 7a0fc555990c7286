"""GloVe (ptm_jax/families/glove) side by side with the GloVe C tool (stanfordnlp/GloVe: vocab_count, cooccur,
shuffle, glove) in one run, on the same corpus, vocabulary, window, dimensions, x_max and
iterations.

The corpus: every Gutenberg book of ../shared/data/corpus/gutenberg, cleaned as benchmarks/word2vec_vs_gensim.py
cleans it (header and footer cut, lower-cased, words = runs of letters and digits, one paragraph per line). The
C tool reads that file (a line is its document: contexts never cross it); ptm_jax reads it through its token
cache (format 'lines', one paragraph per document) with the word vocabulary of ``--min-count``, which keeps
exactly the words vocab_count keeps. The two co-occurrence matrices are compared entry by entry (the run
fails if their nonzero sets differ).

Reported per side: co-occurrence time (C: cooccur + shuffle, which its training needs; ptm_jax: the sharded
pass and its merge into the cached artifact), training time and updates/s (nonzero entries x iterations / wall
time; ptm_jax's includes compilation and start-up, and its steady rate is given too), the final cost
(mean 0.5 f diff^2), analogy accuracy with coverage (questions-words.txt, top 30000 words), WordSim353 and
SimLex-999 Spearman, both sides through ``ptm_jax/evaluate/word_vectors.py``. Both sides use the two cores
(C: ``-threads 2``; ptm_jax: one CPU device, XLA's threads). Needs the C tool built (``make`` in its folder).

    python benchmarks/glove_vs_c.py --glove-dir /tmp/glove_src --iter 15
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--glove-dir", default="/tmp/glove_src", help="stanfordnlp/GloVe checkout with build/")
    ap.add_argument("--work", default="/tmp/glove_vs_c")
    ap.add_argument("--min-count", type=int, default=5)
    ap.add_argument("--window", type=int, default=15)
    ap.add_argument("--dim", type=int, default=50)
    ap.add_argument("--x-max", type=float, default=10.0, help="demo.sh's 10 (the paper's 100 is for 6B tokens)")
    ap.add_argument("--iter", type=int, default=15)
    ap.add_argument("--eta", type=float, default=0.05)
    ap.add_argument("--batch", type=int, default=65536, help="ptm_jax entries per step")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", choices=["both", "c", "ptm"], default="both")
    ap.add_argument("--profile", action="store_true", help="only time the parts of ptm_jax's step (interleaved)")
    return ap.parse_args(argv)


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime + c.ru_utime + c.ru_stime


def timed(fn):
    t, c = time.time(), cpu_seconds()
    out = fn()
    return out, time.time() - t, cpu_seconds() - c


def run_c(args, work: Path, corpus: Path) -> dict:
    build = Path(args.glove_dir) / "build"

    def sh(cmd, stdin, stdout):
        with open(stdin, "rb") as fi, open(stdout, "wb") as fo:
            subprocess.run(cmd, stdin=fi, stdout=fo, stderr=subprocess.PIPE, check=True, cwd=work)

    (_, t_vocab, _) = timed(lambda: sh([str(build / "vocab_count"), "-min-count", str(args.min_count),
                                        "-verbose", "0"], corpus, work / "c_vocab.txt"))

    def cooc():
        sh([str(build / "cooccur"), "-memory", "4.0", "-vocab-file", "c_vocab.txt", "-verbose", "0",
            "-window-size", str(args.window)], corpus, work / "c_cooc.bin")
        sh([str(build / "shuffle"), "-memory", "4.0", "-verbose", "0", "-seed", "1"], work / "c_cooc.bin",
           work / "c_cooc.shuf.bin")

    _, t_cooc, c_cooc = timed(cooc)
    cmd = [str(build / "glove"), "-save-file", "c_vectors", "-threads", str(args.threads), "-input-file",
           "c_cooc.shuf.bin", "-x-max", str(args.x_max), "-iter", str(args.iter), "-vector-size", str(args.dim),
           "-eta", str(args.eta), "-binary", "0", "-model", "2", "-vocab-file", "c_vocab.txt", "-verbose", "2",
           "-seed", "1"]
    proc, t_train, c_train = timed(lambda: subprocess.run(cmd, cwd=work, capture_output=True, text=True, check=True))
    costs = [float(line.rsplit("cost:", 1)[1]) for line in proc.stderr.splitlines() if "cost:" in line]
    nnz = (work / "c_cooc.bin").stat().st_size // 16  # CREC: int, int, double
    words, vecs = [], []
    import numpy as np

    for line in open(work / "c_vectors.txt", encoding="utf-8"):
        parts = line.rstrip("\n").split(" ")
        words.append(parts[0])
        vecs.append(np.asarray(parts[1:], np.float32))
    from word2vec_vs_gensim import evaluate

    counts = [int(line.split()[1]) for line in open(work / "c_vocab.txt", encoding="utf-8")]
    return {"vocab_s": t_vocab, "cooccur_s": t_cooc, "cooccur_cpu_s": c_cooc, "nnz": nnz, "train_s": t_train,
            "train_cpu_s": c_train, "updates_per_s": nnz * args.iter / t_train, "final_cost": costs[-1],
            "vocab_size": len(words), **evaluate(words, np.stack(vecs), counts)}


def load_corpus(path: Path, work: Path, args):
    import numpy as np

    from ptm_jax.data.cache import build_or_load_cache
    from ptm_jax.data.pretraining.source import SubsetSource
    from ptm_jax.data.word_vocab import WordVocab, build_word_vocab
    from ptm_jax.families.glove import GloveDataConfig

    vocab_file = work / "vocab.tsv"
    vocab = (WordVocab(vocab_file, lower_case=True) if vocab_file.exists() else
             build_word_vocab(path.read_text(encoding="utf-8").splitlines(), work, min_count=args.min_count,
                              lower_case=True))
    data = GloveDataConfig(corpus=str(path), format="lines", window=args.window, eval_documents=0, seed=1)
    cache = build_or_load_cache(data, vocab, work / "cache")
    return types.SimpleNamespace(tokenizer=vocab, cache=cache, train=SubsetSource(cache, np.arange(cache.num_docs)),
                                 eval=None, data=data)


def run_ptm(args, work: Path, corpus) -> dict:
    import jax
    import numpy as np

    from ptm_jax import fs
    from ptm_jax.config import MeshConfig, RunConfig, TrainConfig
    from ptm_jax.families.glove import FAMILY, GloveConfig, hooks
    from ptm_jax.families.glove.cooccur import build_cooccurrence
    from ptm_jax.parallel.mesh import make_mesh
    from ptm_jax.train.loop import fit
    from word2vec_vs_gensim import evaluate

    model = GloveConfig(vocab_size=corpus.tokenizer.vocab_size, dim=args.dim, x_max=args.x_max)
    fs.rmtree(work / "artifacts")
    cooc, t_cooc, c_cooc = timed(lambda: build_cooccurrence(types.SimpleNamespace(data=corpus.data, model=model),
                                                            corpus, work / "artifacts"))
    corpus.artifacts = {"cooccurrence": cooc}
    steps = math.ceil(args.iter * cooc.nnz / args.batch)
    # glove.c: eta g / sqrt(1 + sum (eta g)^2) is AdaGrad with rate 1 and sums starting at 1 / eta^2
    cfg = RunConfig(objective="glove", model=model, data=corpus.data, train=TrainConfig(
        batch_size=args.batch, steps=steps, optimizer="adagrad", learning_rate=1.0,
        adagrad_initial_accumulator=1.0 / args.eta ** 2, lr_decay="constant", warmup_steps=0, weight_decay=0.0,
        clip_norm=0.0, log_every=max(steps // 20, 1), eval_every=0, checkpoint_every=10 ** 9,
        checkpoint_compression=False, progress_bar=False))  # as configs/glove.toml
    obj = FAMILY.pretraining.objectives["glove"](cfg, corpus)
    fs.rmtree(work / "run")
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    result, t_train, c_train = timed(lambda: fit(obj, cfg.train, mesh, work / "run"))
    rates = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines()]
    rates = [r["examples_per_sec"] for r in rates if r.get("split") == "train" and "examples_per_sec" in r]
    vectors = hooks.word_vectors(jax.device_get(result.state.params)["params"])
    tok = corpus.tokenizer
    ids = [i for i in range(tok.vocab_size) if i not in set(tok.special_ids())]
    return {"cooccur_s": t_cooc, "cooccur_cpu_s": c_cooc, "nnz": cooc.nnz, "steps": steps, "train_s": t_train,
            "train_cpu_s": c_train, "updates_per_s": cooc.nnz * args.iter / t_train,
            "steady_updates_per_s": float(np.median(rates[1:])) if len(rates) > 1 else None,
            "final_cost": result.train_metrics["glove_loss"], "vocab_size": len(ids),
            **evaluate([tok.id_to_token(i) for i in ids], vectors[ids], tok.counts[ids])}, cooc


def profile(args, corpus, repeats: int = 8) -> dict:
    """Seconds per step of: the loop's whole jitted train step, its forward + backward alone (the gathers and
    their scatter-add gradients), the dense AdaGrad update of the tables alone, and the input pipeline's batch
    (TripleOrder.batch), interleaved round-robin so the machine's load hits all alike (median of repeats)."""
    import jax
    import numpy as np
    import optax

    from ptm_jax.config import MeshConfig, RunConfig, TrainConfig
    from ptm_jax.families.glove import FAMILY, GloveConfig
    from ptm_jax.families.glove.cooccur import build_cooccurrence
    from ptm_jax.parallel.feed import to_global
    from ptm_jax.parallel.mesh import make_mesh
    from ptm_jax.train.loop import compile_objective
    from ptm_jax.train.optim import make_optimizer

    model = GloveConfig(vocab_size=corpus.tokenizer.vocab_size, dim=args.dim, x_max=args.x_max)
    corpus.artifacts = {"cooccurrence": build_cooccurrence(types.SimpleNamespace(data=corpus.data, model=model),
                                                           corpus, work_dir(args) / "artifacts")}
    tcfg = TrainConfig(batch_size=args.batch, steps=10 ** 6, optimizer="adagrad", learning_rate=1.0,
                       adagrad_initial_accumulator=1.0 / args.eta ** 2, lr_decay="constant", warmup_steps=0,
                       weight_decay=0.0, clip_norm=0.0, progress_bar=False, donate_state=False)  # re-run one state
    cfg = RunConfig(objective="glove", model=model, data=corpus.data, train=tcfg)
    obj = FAMILY.pretraining.objectives["glove"](cfg, corpus)
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    compiled = compile_objective(obj, tcfg, mesh)
    state = compiled.init_fn(jax.random.key(0))
    host = obj.order.batch(0, args.batch)
    batch = to_global(host, mesh, compiled.batch_keys)
    grad = jax.jit(jax.grad(lambda p, b: obj.loss(p, b, None, None, True)[0]))
    tx, _ = make_optimizer(tcfg, [])
    g = grad(state.params, batch)
    opt = jax.jit(lambda g, s, p: optax.apply_updates(p, tx.update(g, s, p)[0]))
    parts = {"train_step": lambda: compiled.train_step(state, batch, jax.random.key(0))[1]["loss"],
             "forward_backward": lambda: grad(state.params, batch),
             "dense_adagrad_update": lambda: opt(g, state.opt_state, state.params),
             "input_batch": lambda: obj.order.batch(args.batch * 3, args.batch)}
    for f in parts.values():
        jax.block_until_ready(f())
    times: dict[str, list[float]] = {k: [] for k in parts}
    for _ in range(repeats):
        for k, f in parts.items():
            t = time.time()
            jax.block_until_ready(f())
            times[k].append(time.time() - t)
    out = {k: float(np.median(v)) for k, v in times.items()}
    out["entries_per_step"] = args.batch
    out["table_rows"] = model.vocab_size
    return out


def work_dir(args) -> Path:
    return Path(args.work)


def same_matrix(work: Path, cooc, tok) -> dict:
    """The C tool's cooccurrence.bin against ptm_jax's artifact, mapped through the words."""
    import numpy as np

    words = [line.split()[0] for line in open(work / "c_vocab.txt", encoding="utf-8")]
    to_ours = np.array([tok.token_to_id(w) for w in words], np.int64)
    rec = np.fromfile(work / "c_cooc.bin", dtype=np.dtype([("w1", "<i4"), ("w2", "<i4"), ("v", "<f8")]))
    key = to_ours[rec["w1"] - 1] * cooc.vocab_size + to_ours[rec["w2"] - 1]
    order = np.argsort(key)
    ours = cooc.rows.astype(np.int64) * cooc.vocab_size + cooc.cols
    same = bool(np.array_equal(key[order], ours))
    return {"same_entries": same, "max_abs_diff": float(np.abs(rec["v"][order] - cooc.values).max()) if same
            else None, "c_entries": int(rec.size), "ptm_entries": cooc.nnz}


def main(argv=None) -> int:
    args = parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    from word2vec_vs_gensim import prepare_corpus

    path = prepare_corpus(work)
    corpus = load_corpus(path, work, args)
    if args.profile:
        print(json.dumps(profile(args, corpus), indent=2))
        return 0
    report = {"settings": {k: v for k, v in vars(args).items() if k not in ("work", "only")},
              "running_words": int(corpus.cache.num_tokens)}
    if args.only in ("both", "c"):
        report["c"] = run_c(args, work, path)
        print(json.dumps({"c": report["c"]}), flush=True)
    if args.only in ("both", "ptm"):
        report["ptm"], cooc = run_ptm(args, work, corpus)
        print(json.dumps({"ptm": report["ptm"]}), flush=True)
        if args.only == "both":
            report["matrix"] = same_matrix(work, cooc, corpus.tokenizer)
    if args.only == "both":
        c, p = report["c"], report["ptm"]
        report["ratios"] = {"cooccur_speed": c["cooccur_s"] / p["cooccur_s"],
                            "train_speed": p["updates_per_s"] / c["updates_per_s"],
                            "analogy_pt": 100 * ((p["analogy"] or 0) - (c["analogy"] or 0))}
    print(json.dumps(report, indent=2))
    (work / "report.json").write_text(json.dumps(report, indent=2))
    return 0 if report.get("matrix", {}).get("same_entries", True) else 1


if __name__ == "__main__":
    sys.exit(main())
