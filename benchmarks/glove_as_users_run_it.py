"""GloVe as a user runs it: ``ptm pretrain -c glove`` then ``ptm export --format text_vectors``, as whole
processes, against the GloVe C tool as its demo.sh runs it (``vocab_count``, ``cooccur``, ``shuffle``, ``glove``,
each a whole process), on the same corpus with the same settings; paired and interleaved.

Both sides: the preset's settings, which are demo.sh's (50 dimensions, window 15 weighted 1/distance, symmetric,
min_count 5, x_max 10, 15 iterations, AdaGrad eta 0.05, word + context vectors), on the cleaned Gutenberg
paragraphs of ``word2vec_vs_gensim.py`` (one paragraph a line), for which the preset's ``train.steps`` (1695) is
15 passes over the co-occurrence entries; the C tool with ``-threads 2`` (the machine's cores) and ``-memory 4``.
Timed, quality and pairing as in ``word2vec_as_users_run_it.py``: wall and CPU seconds of the whole processes,
alternating order, the median ratio (the C tool's seconds / ptm_jax's), how many pairs fell below 1.0x, where
ptm_jax's fixed cost goes, and analogy accuracy on the report half of questions-words.txt, WordSim353 and
SimLex-999 through ``ptm eval-vectors``, off the clock.

    python benchmarks/glove_as_users_run_it.py --pairs 3 --glove-dir /tmp/glove_src
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from word2vec_as_users_run_it import PTM, quality, timed  # noqa: E402
from word2vec_vs_gensim import prepare_corpus  # noqa: E402


def c_side(build: Path, corpus: Path, work: Path, vectors: Path, threads: int, env: dict) -> dict:
    """demo.sh's four commands, each timed as a whole process (its shell redirections as file handles)."""
    wall = cpu = 0.0
    steps = [([str(build / "vocab_count"), "-min-count", "5", "-verbose", "0"], corpus, work / "c_vocab.txt"),
             ([str(build / "cooccur"), "-memory", "4.0", "-vocab-file", str(work / "c_vocab.txt"), "-verbose", "0",
               "-window-size", "15"], corpus, work / "c_cooc.bin"),
             ([str(build / "shuffle"), "-memory", "4.0", "-verbose", "0", "-seed", "1"], work / "c_cooc.bin",
              work / "c_cooc.shuf.bin")]
    parts = {}
    for cmd, stdin, stdout in steps:
        w, c, _ = timed(["sh", "-c", f'exec "$0" "$@" < "{stdin}" > "{stdout}"', *cmd], env)
        parts[Path(cmd[0]).name] = w
        wall, cpu = wall + w, cpu + c
    w, c, _ = timed([str(build / "glove"), "-save-file", str(vectors.with_suffix("")), "-threads", str(threads),
                     "-input-file", str(work / "c_cooc.shuf.bin"), "-x-max", "10", "-iter", "15", "-vector-size",
                     "50", "-eta", "0.05", "-binary", "0", "-model", "2", "-vocab-file", str(work / "c_vocab.txt"),
                     "-verbose", "0", "-seed", "1"], env)
    parts["glove"] = w
    return {"wall": wall + w, "cpu": cpu + c, "parts": parts,
            "nnz": (work / "c_cooc.bin").stat().st_size // 16}


def ptm_side(corpus: Path, run: Path, vectors: Path, env: dict) -> dict:
    import time

    shutil.rmtree(run, ignore_errors=True)
    t0 = time.time()
    wall, cpu, _ = timed([PTM, "pretrain", "-c", "glove", f"data.corpus={corpus}", f"output_dir={run}"], env)
    end = time.time()
    ewall, ecpu, _ = timed([PTM, "export", str(run), "--format", "text_vectors", "--out", str(vectors),
                            "--force"], env)
    mt = lambda p: p.stat().st_mtime  # noqa: E731
    chunk = max(run.glob("cache/word-*/chunk-*"), key=mt)
    cooc = max((run / "cache/artifacts").iterdir(), key=mt)
    ckpt = max((run / "pretrain/checkpoints").iterdir(), key=mt)
    marks = [t0, mt(run / "config.json"), mt(run / "tokenizer/vocab.tsv"), mt(chunk), mt(cooc), mt(ckpt), end]
    names = ["start-up to config written", "vocabulary", "token cache", "co-occurrence", "compile+steps+checkpoint",
             "end of run"]
    parts = {n: b - a for n, a, b in zip(names, marks, marks[1:])}
    parts["export"] = ewall
    return {"wall": wall + ewall, "cpu": cpu + ecpu, "parts": parts}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--glove-dir", default="/tmp/glove_src", help="stanfordnlp/GloVe checkout, built (make)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default="/tmp/glove_users")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    build = Path(args.glove_dir) / "build"
    if not (build / "glove").exists():
        raise SystemExit(f"{build / 'glove'} not found: build the C tool (make in {args.glove_dir})")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    corpus = prepare_corpus(work)
    print(f"corpus {corpus}; {args.pairs} pairs; load average {os.getloadavg()[0]:.2f}", flush=True)
    rows = []
    for i in range(args.pairs):
        order = ["ptm", "c"] if i % 2 == 0 else ["c", "ptm"]
        row = {"pair": i, "order": order, "load": os.getloadavg()[0]}
        for side in order:
            vec = work / f"{side}_vectors.txt"
            row[side] = (ptm_side(corpus, work / "run", vec, env) if side == "ptm"
                         else c_side(build, corpus, work, vec, args.threads, env))
            row[side]["quality"] = quality(vec, env)
        rows.append(row)
        print(json.dumps(row), flush=True)
    med = statistics.median
    print(f"\n== GloVe (configs/glove.toml), {len(rows)} paired runs, load average "
          f"{min(r['load'] for r in rows):.2f}-{max(r['load'] for r in rows):.2f}; co-occurrence entries "
          f"{rows[0]['c']['nnz']:,}")
    for side in ("ptm", "c"):
        q = {k: med(r[side]["quality"][k] for r in rows) for k in rows[0][side]["quality"]}
        parts = {k: med(r[side]["parts"][k] for r in rows) for k in rows[0][side]["parts"]}
        wall, cpu = med(r[side]["wall"] for r in rows), med(r[side]["cpu"] for r in rows)
        print(f"{side:4s} wall {wall:6.1f} s  cpu {cpu:6.1f} s"
              f"  analogy(report half) {q['analogy_report_half']:.4f} (coverage {q['coverage']:.3f})"
              f"  ws353 {q['wordsim353']:.4f}  simlex {q['simlex999']:.4f}")
        print("     median s: " + ", ".join(f"{k} {v:.1f}" for k, v in parts.items()))
    ratios = [r["c"]["wall"] / r["ptm"]["wall"] for r in rows]
    cpu = [r["c"]["cpu"] / r["ptm"]["cpu"] for r in rows]
    print(f"ptm_jax (the preset's defaults: the headline): median {med(ratios):.2f}x the C tool's speed in wall time "
          f"[{min(ratios):.2f}-{max(ratios):.2f}], {sum(x < 1.0 for x in ratios)} of {len(ratios)} pairs below "
          f"1.0x; CPU time {med(cpu):.2f}x")
    if args.json:
        Path(args.json).write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
