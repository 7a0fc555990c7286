"""word2vec and fastText as a user runs them: ``ptm pretrain -c word2vec_sg|word2vec_cbow|fasttext_sg`` then
``ptm export --format text_vectors``, as whole processes, against a whole gensim process (``Word2Vec`` or
``FastText(corpus_file=...)`` then ``save_word2vec_format``), on the same pre-tokenised corpus with the same
settings; paired and interleaved.

Both sides: the preset's settings (word2vec: word2vec.c's defaults, dim 100, window 5, negative 5, sample 1e-3,
min_count 5, alpha 0.025 skip-gram / 0.05 CBOW; fastText skip-gram: fastText's dim 100, window 5, negative 5,
sample 1e-4, negatives from unigram^0.5, n-grams 3-6 in 2M buckets, alpha 0.025; all decaying linearly to 1e-4 x
alpha) and the presets' 5 passes (``train.steps = 5 x (running words + documents) / 4096``, as the presets'
comments tell users); gensim with ``workers`` threads (default 2, the cores of the machine the figures were taken
on). The corpus: the cleaned Gutenberg paragraphs of ``word2vec_vs_gensim.py`` (lower-cased, one paragraph a
line), ``--repeat`` times.

Timed per side: wall and CPU seconds of the whole processes, imports, vocabulary and file writing included,
nothing left out on either side. Pairs run the sides in alternating order, so drift in the machine's load falls on
both. Reported: the median ratio (gensim's seconds / ptm_jax's: above 1.0x ptm_jax is faster), every pair's
range, how many pairs fell below 1.0x, the load average before each pair, and where ptm_jax's time goes (from the
run folder's file times: until the config is written, vocabulary, token cache, the family's artifacts (sampling
tables, n-grams), compile + steps + checkpoint, end of run, export). ``--tuned`` adds ptm_jax's fastest CPU mode
(the presets' comments: ``model.updates=sequential``, for fastText also two threads and a negative draw per pair;
batches of 16,384 words, a quarter of the steps) as a third side, labelled as such. ``--per-pair`` adds the presets'
batch mode with a negative draw per skip-gram pair (``data.shared_negatives=false``: gensim's work).

Quality, off the clock, for every side's vectors through ``ptm eval-vectors``: analogy accuracy on the *report*
half of questions-words.txt (the half never used to choose settings; top 30,000 words), WordSim353 and
SimLex-999 Spearman.

    python benchmarks/word2vec_as_users_run_it.py --pairs 5 --tuned                      # skip-gram and CBOW
    python benchmarks/word2vec_as_users_run_it.py --pairs 3 --only fasttext --tuned
    python benchmarks/word2vec_as_users_run_it.py --pairs 3 --only skipgram --repeat 5   # a 10M-word corpus
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from word2vec_vs_gensim import DATA, prepare_corpus  # noqa: E402

TUNED_BATCH = 16384
ARCHS = {  # the preset, gensim's class and the preset's settings in gensim's names, ptm_jax's tuned CPU mode
    "skipgram": {"preset": "word2vec_sg", "gensim": "Word2Vec", "kw": {"sg": 1, "alpha": 0.025, "sample": 1e-3},
                 "tuned": ["model.updates=sequential"]},
    "cbow": {"preset": "word2vec_cbow", "gensim": "Word2Vec", "kw": {"sg": 0, "alpha": 0.05, "sample": 1e-3},
             "tuned": ["model.updates=sequential"]},
    "fasttext": {"preset": "fasttext_sg", "gensim": "FastText",
                 "kw": {"sg": 1, "alpha": 0.025, "sample": 1e-4, "ns_exponent": 0.5, "min_n": 3, "max_n": 6,
                        "bucket": 2_000_000},
                 "tuned": ["model.updates=sequential", "model.sequential_parts=2", "data.shared_negatives=false"]},
}
EPOCHS, BATCH = 5, 4096
PTM = str(Path(sys.executable).with_name("ptm"))  # the console script users run

GENSIM = """
import json, sys
import gensim.models
corpus, out, cls, kw = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
model = getattr(gensim.models, cls)(corpus_file=corpus, vector_size=100, window=5, negative=5, hs=0, min_count=5,
                                    min_alpha=kw["alpha"] * 1e-4, seed=1, **kw)
model.wv.save_word2vec_format(out)
"""


def corpus_file(work: Path, repeat: int) -> tuple[Path, int, int]:
    """The corpus ``repeat`` times over, and its running words and documents (non-empty lines)."""
    base = prepare_corpus(work)
    path = base if repeat == 1 else work / f"gutenberg_x{repeat}.txt"
    if not path.exists():
        text = base.read_text(encoding="utf-8")
        path.write_text("\n".join([text.rstrip("\n")] * repeat) + "\n", encoding="utf-8")
    words = docs = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            n = len(line.split())
            words += n
            docs += n > 0
    return path, words, docs


def timed(cmd: list[str], env: dict) -> tuple[float, float, str]:
    """Wall and CPU (user + system, children) seconds of a whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, p.stdout + p.stderr


def ptm_side(arch: str, corpus: Path, steps: int, run: Path, vectors: Path, side: str, env: dict) -> dict:
    shutil.rmtree(run, ignore_errors=True)
    over = [f"data.corpus={corpus}", f"output_dir={run}", f"train.steps={steps}"]
    if side == "ptm_tuned":
        over += [*ARCHS[arch]["tuned"], f"train.batch_size={TUNED_BATCH}"]
    elif side == "ptm_per_pair":
        over += ["data.shared_negatives=false"]
    t0 = time.time()
    wall, cpu, _ = timed([PTM, "pretrain", "-c", ARCHS[arch]["preset"], *over], env)
    end = time.time()
    ewall, ecpu, _ = timed([PTM, "export", str(run), "--format", "text_vectors",
                            "--out", str(vectors), "--force"], env)
    mt = lambda p: p.stat().st_mtime  # noqa: E731
    chunk = max(run.glob("cache/word-*/chunk-*"), key=mt)
    ckpt = max((run / "pretrain/checkpoints").iterdir(), key=mt)
    marks = [t0, mt(run / "config.json"), mt(run / "tokenizer/vocab.tsv"), mt(chunk),
             max(mt(a) for a in (run / "cache/artifacts").iterdir()), mt(ckpt), end]
    names = ["start-up to config written", "vocabulary", "token cache", "artifacts (sampling tables, n-grams)",
             "compile+steps+checkpoint", "end of run"]
    parts = {n: b - a for n, a, b in zip(names, marks, marks[1:])}
    rows = [json.loads(x) for x in (run / "pretrain/metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r.get("split") == "train"]
    steady = ((train[-1]["step"] - train[0]["step"]) / (train[-1]["time"] - train[0]["time"])
              if len(train) > 1 else None)
    parts["export"] = ewall
    return {"wall": wall + ewall, "cpu": cpu + ecpu, "parts": parts, "steady_steps_per_sec": steady}


def gensim_side(arch: str, corpus: Path, vectors: Path, workers: int, env: dict) -> dict:
    kw = {**ARCHS[arch]["kw"], "workers": workers, "epochs": EPOCHS}
    wall, cpu, _ = timed([sys.executable, "-c", GENSIM, str(corpus), str(vectors), ARCHS[arch]["gensim"],
                          json.dumps(kw)], env)
    return {"wall": wall, "cpu": cpu}


def quality(vectors: Path, env: dict) -> dict:
    folder = DATA / "word2vec"
    p = subprocess.run([PTM, "eval-vectors", str(vectors), "--analogies",
                        str(folder / "questions-words.txt"), "--analogy-half", "report", "--similarity",
                        str(folder / "wordsim353.tsv"), "--similarity", str(folder / "simlex999.txt")],
                       capture_output=True, text=True, env=env, check=True)
    r = json.loads(p.stdout)
    return {"analogy_report_half": r["analogies"]["accuracy"], "coverage": r["analogies"]["coverage"],
            "wordsim353": r["similarity"][0]["spearman"], "simlex999": r["similarity"][1]["spearman"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--only", choices=list(ARCHS), nargs="+", default=["skipgram", "cbow"])
    ap.add_argument("--repeat", type=int, default=1, help="the corpus this many times over (1: 2.0M words)")
    ap.add_argument("--workers", type=int, default=2, help="gensim worker threads")
    ap.add_argument("--tuned", action="store_true", help="also ptm_jax's sequential mode (labelled tuned)")
    ap.add_argument("--per-pair", action="store_true",
                    help="also the presets' batch mode with a negative draw per pair, as gensim draws (equal work)")
    ap.add_argument("--no-default", action="store_true", help="leave out the presets' defaults (with --per-pair)")
    ap.add_argument("--work", default="/tmp/word2vec_users")
    ap.add_argument("--json", default="", help="also write every row here")
    args = ap.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    corpus, words, docs = corpus_file(work, args.repeat)
    steps = -(-EPOCHS * (words + docs) // BATCH)
    print(f"corpus {corpus}: {words:,} running words, {docs:,} documents; {EPOCHS} passes = {steps} steps of "
          f"{BATCH}; gensim workers {args.workers}; {args.pairs} pairs; load average {os.getloadavg()[0]:.2f}")
    sides = (["gensim"] if args.no_default else ["ptm", "gensim"]) + (["ptm_tuned"] if args.tuned else []) + \
        (["ptm_per_pair"] if args.per_pair else [])
    rows = []
    for arch in args.only:
        for i in range(args.pairs):
            order = sides if i % 2 == 0 else sides[::-1]
            row = {"arch": arch, "pair": i, "order": order, "load": os.getloadavg()[0]}
            for side in order:
                vec = work / f"{arch}_{side}.txt"
                if side == "gensim":
                    row[side] = gensim_side(arch, corpus, vec, args.workers, env)
                else:
                    row[side] = ptm_side(arch, corpus,
                                         -(-steps * BATCH // TUNED_BATCH) if side == "ptm_tuned" else steps,
                                         work / f"run_{arch}_{side}", vec, side, env)
                row[side]["quality"] = quality(vec, env)
            rows.append(row)
            print(json.dumps(row), flush=True)
        report(arch, [r for r in rows if r["arch"] == arch], sides)
    if args.json:
        Path(args.json).write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return 0


def report(arch: str, rows: list[dict], sides: list[str]) -> None:
    med = statistics.median
    print(f"\n== {arch} ({ARCHS[arch]['preset']}), {len(rows)} paired runs, load average "
          f"{min(r['load'] for r in rows):.2f}-{max(r['load'] for r in rows):.2f}")
    for side in sides:
        q = {k: med(r[side]["quality"][k] for r in rows) for k in rows[0][side]["quality"]}
        wall, cpu = med(r[side]["wall"] for r in rows), med(r[side]["cpu"] for r in rows)
        print(f"{side:10s} wall {wall:7.1f} s  cpu {cpu:7.1f} s"
              f"  analogy(report half) {q['analogy_report_half']:.4f} (coverage {q['coverage']:.3f})"
              f"  ws353 {q['wordsim353']:.4f}  simlex {q['simlex999']:.4f}")
    for side in [s for s in sides if s != "gensim"]:
        ratios = [r["gensim"]["wall"] / r[side]["wall"] for r in rows]
        cpu = [r["gensim"]["cpu"] / r[side]["cpu"] for r in rows]
        label = {"ptm_tuned": " (tuned mode, not the default)", "ptm": " (the preset's defaults: the headline)",
                 "ptm_per_pair": " (equal work: a negative draw per pair, as gensim)"}[side]
        print(f"{side}{label}: median {med(ratios):.2f}x gensim's speed in wall time "
              f"[{min(ratios):.2f}-{max(ratios):.2f}], {sum(x < 1.0 for x in ratios)} of {len(ratios)} pairs "
              f"below 1.0x; CPU time {med(cpu):.2f}x")
        parts = {k: med(r[side]["parts"][k] for r in rows) for k in rows[0][side]["parts"]}
        print("  " + side + " fixed cost and steps (median s): " +
              ", ".join(f"{k} {v:.1f}" for k, v in parts.items()) +
              f"; steady {med(r[side]['steady_steps_per_sec'] for r in rows):.1f} steps/s")


if __name__ == "__main__":
    sys.exit(main())
