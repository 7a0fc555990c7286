"""Analogy and word-similarity evaluation of static vectors: ptm_jax (evaluate/word_vectors.py) against gensim's
KeyedVectors.evaluate_word_analogies / evaluate_word_pairs on the same vectors, timed interleaved in one process.

The vectors: a gensim Word2Vec (CBOW) trained here on the Gutenberg books (lower-cased letter runs), or a text
vector file given with --vectors. Prints one JSON object: both sides' accuracy, per-section agreement, seconds.

    python benchmarks/word_vector_eval.py [--vectors FILE] [--restrict-vocab 30000] [--repeats 2]
    python benchmarks/word_vector_eval.py --io-rows 100000 --dim 100   # text-file write/read seconds instead
    python benchmarks/word_vector_eval.py --compute-accuracy /tmp/compute-accuracy   # also word2vec.c's tool
"""
from __future__ import annotations

import argparse
import glob
import json
import re
import time
from pathlib import Path

import numpy as np

from ptm_jax.evaluate.word_vectors import WordVectors, evaluate_analogies, evaluate_similarity
from ptm_jax.export.vector_files import read_text_vectors

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vectors", default=None, help="a text vector file (default: train gensim CBOW here)")
    ap.add_argument("--corpus", default=str(DATA / "corpus/gutenberg/[0-9]*.txt"))
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--restrict-vocab", type=int, default=30000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--compute-accuracy", default=None, metavar="BINARY",
                    help="also run word2vec.c's compute-accuracy (compiled: gcc -O2 -o BINARY compute-accuracy.c "
                    "-lm) on the same vectors written in the binary format, and compare section by section")
    ap.add_argument("--io-rows", type=int, default=0,
                    help="instead: time writing and reading a text vector file of N random rows (dim --dim)")
    args = ap.parse_args()
    from gensim.models import KeyedVectors, Word2Vec

    if args.io_rows:
        return file_io(args.io_rows, args.dim, args.repeats)

    if args.vectors:
        words, vectors = read_text_vectors(args.vectors)
        kv = KeyedVectors(vectors.shape[1])
        kv.add_vectors(words, vectors)
    else:
        sentences = [s for f in sorted(glob.glob(args.corpus)) for line in open(f, encoding="utf-8")
                     if (s := re.findall(r"[a-z]+", line.lower()))]
        kv = Word2Vec(sentences, vector_size=args.dim, window=5, min_count=5, workers=2, epochs=args.epochs,
                      seed=1).wv
    wv = WordVectors(kv.index_to_key, kv.vectors)
    questions = DATA / "word2vec/questions-words.txt"
    times: dict[str, list[float]] = {"ptm_jax": [], "gensim": []}
    for _ in range(args.repeats):
        t = time.perf_counter()
        ours = evaluate_analogies(wv, questions, restrict_vocab=args.restrict_vocab)
        times["ptm_jax"].append(time.perf_counter() - t)
        t = time.perf_counter()
        score, sections = kv.evaluate_word_analogies(str(questions), restrict_vocab=args.restrict_vocab)
        times["gensim"].append(time.perf_counter() - t)
    same = [s["correct"] == len(g["correct"]) and s["seen"] == len(g["correct"]) + len(g["incorrect"])
            for s, g in zip(ours["sections"], sections[:-1])]
    sim = {}
    for name in ("wordsim353.tsv", "simlex999.txt"):
        r = evaluate_similarity(wv, DATA / "word2vec" / name, restrict_vocab=args.restrict_vocab)
        _, spear, _ = kv.evaluate_word_pairs(str(DATA / "word2vec" / name), restrict_vocab=args.restrict_vocab)
        sim[name] = {"ptm_jax": r["spearman"], "gensim": float(spear.statistic), "coverage": r["coverage"]}
    c_tool = compute_accuracy(args.compute_accuracy, wv, questions, args.restrict_vocab, ours) \
        if args.compute_accuracy else None
    print(json.dumps({
        "words": len(wv), "dim": wv.dim, "restrict_vocab": args.restrict_vocab, "compute_accuracy": c_tool,
        "analogy": {"ptm_jax": ours["accuracy"], "gensim": score, "semantic": ours["semantic_accuracy"],
                    "syntactic": ours["syntactic_accuracy"], "coverage": ours["coverage"],
                    "sections_equal": f"{sum(same)}/{len(same)}"},
        "similarity_spearman": sim,
        "seconds": {k: [round(x, 2) for x in v] for k, v in times.items()},
        "speedup_median": round(float(np.median(times["gensim"]) / np.median(times["ptm_jax"])), 1),
    }, indent=2))


def compute_accuracy(binary: str, wv: WordVectors, questions: Path, restrict_vocab: int, ours: dict) -> dict:
    """word2vec.c's compute-accuracy on ``wv`` (written with export/vector_files.write_binary_vectors): its
    per-section 'ACCURACY TOP1: x %  (correct / seen)' lines against ours, and its seconds."""
    import subprocess
    import tempfile

    from ptm_jax.export.vector_files import write_binary_vectors

    with tempfile.TemporaryDirectory() as d:
        path = write_binary_vectors(Path(d) / "vectors.bin", wv.words, wv.vectors)
        t = time.perf_counter()
        with open(questions, "rb") as stdin:
            out = subprocess.run([binary, str(path), str(restrict_vocab)], stdin=stdin, capture_output=True,
                                 check=True).stdout.decode()
        seconds = time.perf_counter() - t
    counts = [(int(c), int(n)) for c, n in re.findall(r"ACCURACY TOP1: [\d.]+ %\s+\((\d+) / (\d+)\)", out)]
    # a section with no question seen prints '(0 / 1)': compute-accuracy sets TCN = 1 there to print a percentage
    mine = [(s["correct"], s["seen"] or 1) for s in ours["sections"]]
    seen = re.search(r"Questions seen / total: (\d+) (\d+)", out)
    return {"sections_equal": f"{sum(a == b for a, b in zip(counts, mine))}/{len(mine)}",
            "correct": sum(c for c, _ in counts), "seen": int(seen.group(1)), "questions": int(seen.group(2)),
            "ptm_jax_correct": ours["correct"], "ptm_jax_seen": ours["seen"], "seconds": round(seconds, 2),
            "differing_sections": [(s["section"], a, b) for s, a, b in zip(ours["sections"], mine, counts) if a != b]}


def file_io(rows: int, dim: int, repeats: int) -> None:
    """Seconds to write and read word2vec.c's text format: ptm_jax (export/vector_files.py) against gensim's
    save_word2vec_format / load_word2vec_format, interleaved, on the same random table."""
    import tempfile

    from gensim.models import KeyedVectors

    from ptm_jax.export.vector_files import write_text_vectors

    words = [f"w{i}" for i in range(rows)]
    vectors = np.random.default_rng(0).standard_normal((rows, dim)).astype(np.float32)
    kv = KeyedVectors(dim)
    kv.add_vectors(words, vectors)
    times: dict[str, list[float]] = {k: [] for k in ("ptm_jax_write", "gensim_write", "ptm_jax_read",
                                                     "gensim_read")}
    with tempfile.TemporaryDirectory() as d:
        ours, theirs = Path(d) / "ours.txt", Path(d) / "gensim.txt"
        for _ in range(repeats):
            for name, fn in (("ptm_jax_write", lambda: write_text_vectors(ours, words, vectors)),
                             ("gensim_write", lambda: kv.save_word2vec_format(str(theirs))),
                             ("ptm_jax_read", lambda: read_text_vectors(ours)),
                             ("gensim_read", lambda: KeyedVectors.load_word2vec_format(str(ours)))):
                t = time.perf_counter()
                fn()
                times[name].append(round(time.perf_counter() - t, 2))
        same = np.array_equal(read_text_vectors(ours)[1], vectors)
    print(json.dumps({"rows": rows, "dim": dim, "read_back_exact": bool(same), "seconds": times}, indent=2))


if __name__ == "__main__":
    main()
