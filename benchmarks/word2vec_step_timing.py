"""The word2vec train step alone on real batches, many rounds, for A/B timings of the fused CPU kernel.

The batches are the benchmark's (``word2vec_vs_gensim.py``: the Gutenberg corpus, dim 100, window 5, negative 5,
sample 1e-3, 4096 running words a batch, seed 1), built once; then ``--rounds`` rounds each run the compiled step
(``model.kernel='auto'``: the fused kernel on one CPU device) over all of them, and the minimum and median per
step of the rounds' wall and process CPU time are printed, with the last loss (the same work on both sides of an
A/B). The machine's own noise moves single rounds by up to 1.5x; the medians of interleaved runs are the figure.

    python benchmarks/word2vec_step_timing.py --objective skipgram --rounds 12
    # A/B against an older commit: a worktree of it beside this checkout (so ../shared resolves), this script
    # copied into its benchmarks/, the two runs interleaved
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objective", choices=["skipgram", "cbow"], default="skipgram")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--updates", choices=["batch", "sequential"], default="batch")
    ap.add_argument("--per-pair-negatives", action="store_true")
    ap.add_argument("--work", default="/tmp/word2vec_bench")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(HERE.parent))
    sys.path.insert(0, str(HERE))
    import jax

    import word2vec_vs_gensim as bench
    from ptm_jax.config import MeshConfig
    from ptm_jax.families.word2vec import FAMILY
    from ptm_jax.parallel.feed import to_global
    from ptm_jax.parallel.mesh import make_mesh
    from ptm_jax.train.loop import compile_objective
    from ptm_jax.train.metrics import reduce_terms

    settings = types.SimpleNamespace(dim=100, window=5, sample=1e-3, negative=5, cap=64, kernel="auto",
                                     per_pair_negatives=args.per_pair_negatives, seed=1, batch=4096,
                                     updates=args.updates)
    work = Path(args.work)
    corpus = bench.load_corpus(bench.prepare_corpus(work), work, 5)
    cfg = bench.run_config(args.objective, corpus.tokenizer.vocab_size, settings, 1000)
    obj = FAMILY.pretraining.objectives[args.objective](cfg, corpus)
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    it = obj.train_batches(0, settings.batch, 0, 1)
    host = [next(it) for _ in range(args.batches)]
    compiled = compile_objective(obj, cfg.train, mesh, None)
    state = compiled.init_fn(jax.random.key(0))
    batches = [to_global(b, mesh, compiled.batch_keys) for b in host]
    key = jax.random.key(0)
    state, m = compiled.train_step(state, batches[0], key)
    jax.block_until_ready(m)
    walls, cpus = [], []
    for _ in range(args.rounds):
        t0, c0 = time.perf_counter(), time.process_time()
        for b in batches:
            state, m = compiled.train_step(state, b, key)
        jax.block_until_ready(m)
        walls.append((time.perf_counter() - t0) / len(batches) * 1e3)
        cpus.append((time.process_time() - c0) / len(batches) * 1e3)
    print(json.dumps({"objective": args.objective, "rounds": args.rounds, "batches": len(batches),
                      "step_ms_wall_min": round(min(walls), 3),
                      "step_ms_wall_median": round(statistics.median(walls), 3),
                      "step_ms_cpu_min": round(min(cpus), 3), "step_ms_cpu_median": round(statistics.median(cpus), 3),
                      "last_loss": reduce_terms(m)["loss"]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
