"""Where a word2vec/fastText training step's time goes in the loop: the table initialisation, the
feed alone (tf.data + the prefetch thread + the device transfer), the compiled step alone on batches already on
the device, and the two together as ``fit`` runs them (the step dispatched, the previous step's counter read).

The objectives, corpus and settings are the side-by-side benchmarks' (``word2vec_vs_gensim.py``,
``fasttext_vs_gensim.py``: Gutenberg, dim 100, window 5, negative 5, sample 1e-3, seed 1). Figures are per
batch: wall and process CPU milliseconds (CPU counts every thread of the process, tf.data's included).

    python benchmarks/embedding_loop_parts.py --objective cbow --updates sequential --batch 16384
    python benchmarks/embedding_loop_parts.py --objective fasttext_skipgram --updates sequential --per-pair-negatives
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent


def timed(n: int, f, finish=lambda: None) -> tuple[float, float]:
    """(wall ms, CPU ms) per call of ``f`` over ``n`` calls and one ``finish()`` (waiting for the device)."""
    t, c = time.perf_counter(), time.process_time()
    for _ in range(n):
        f()
    finish()
    return (time.perf_counter() - t) / n * 1e3, (time.process_time() - c) / n * 1e3


def bench_objective(objective: str, *, updates: str, batch: int, per_pair_negatives: bool, steps: int = 0,
                    epochs: float = 0.0, parts: int = 1):
    """(corpus, config, objective) at the side-by-side benchmarks' settings (word2vec_vs_gensim.py,
    fasttext_vs_gensim.py: Gutenberg, dim 100, window 5, negative 5, sample 1e-3, seed 1; fastText: n-grams 3-6,
    2M buckets, its duplicate cap), ``steps`` steps of ``batch`` running words, or as many as ``epochs`` passes
    take. Needs benchmarks/ on sys.path."""
    from ptm_jax.data.pretraining.causal_lm import PackedStream
    from ptm_jax.families.word2vec import steps_for_epochs

    fasttext = objective.startswith("fasttext")
    if fasttext:
        import fasttext_vs_gensim as bench
        from ptm_jax.families.fasttext import FastTextConfig
        work, cap = Path("/tmp/fasttext_bench"), FastTextConfig.duplicate_cap
    else:
        import word2vec_vs_gensim as bench
        from ptm_jax.families.word2vec import FAMILY
        work, cap = Path("/tmp/word2vec_bench"), 64
    settings = types.SimpleNamespace(dim=100, window=5, sample=1e-3, negative=5, cap=cap, kernel="auto",
                                     updates=updates, per_pair_negatives=per_pair_negatives, seed=1, batch=batch,
                                     minn=3, maxn=6, bucket=2_000_000, ns_exponent=0.75, alpha=0.025,
                                     parts=parts)
    corpus = bench.load_corpus(bench.prepare_corpus(work), work, 5)
    if epochs:
        pass_tokens = PackedStream(corpus.train, corpus.tokenizer.eos_id, seed=0, shuffle=False).pass_tokens
        steps = steps_for_epochs(epochs, pass_tokens, batch)
    if fasttext:
        cfg, obj, _ = bench.build_objective(objective, corpus, settings, steps)
    else:
        cfg = bench.run_config(objective, corpus.tokenizer.vocab_size, settings, steps)
        obj = FAMILY.pretraining.objectives[objective](cfg, corpus)
    return corpus, cfg, obj


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objective", choices=["skipgram", "cbow", "fasttext_skipgram", "fasttext_cbow"],
                    default="cbow")
    ap.add_argument("--updates", choices=["batch", "sequential"], default="sequential")
    ap.add_argument("--batch", type=int, default=16384)
    ap.add_argument("--per-pair-negatives", action="store_true")
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--parts", type=int, default=1, help="model.sequential_parts")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(HERE.parent))
    sys.path.insert(0, str(HERE))
    import jax

    from ptm_jax.config import MeshConfig
    from ptm_jax.parallel.feed import Prefetcher, local_batches
    from ptm_jax.parallel.mesh import make_mesh
    from ptm_jax.train.loop import compile_objective

    _, cfg, obj = bench_objective(args.objective, updates=args.updates, batch=args.batch,
                                  per_pair_negatives=args.per_pair_negatives, steps=1000, parts=args.parts)
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    compiled = compile_objective(obj, cfg.train, mesh, None)
    out = {"objective": args.objective, "updates": args.updates, "parts": args.parts, "batch_words": args.batch}
    init = compiled.init_fn(jax.random.key(0))
    jax.block_until_ready(init)
    t = time.perf_counter()
    state = compiled.init_fn(jax.random.key(1))
    jax.block_until_ready(state)
    out["init_s"] = round(time.perf_counter() - t, 3)
    del init

    def feed():
        host = local_batches(lambda i, n: obj.train_batches(0, args.batch, i, n), mesh, args.batch)
        return Prefetcher(host, mesh, compiled.batch_keys, depth=2, global_rows=args.batch)

    key = jax.random.key(0)
    f = feed()
    on_device = [next(f)[1] for _ in range(args.batches + 1)]
    state, m = compiled.train_step(state, on_device[0], key)
    jax.block_until_ready(m)
    f.close()
    batches = iter(on_device[1:])

    def step():
        nonlocal state, m
        state, m = compiled.train_step(state, next(batches), key)

    out["step_ms"] = timed(args.batches, step, lambda: jax.block_until_ready(m))
    f = feed()
    next(f)
    time.sleep(1.0)                                          # let the prefetch buffers fill, then drain them
    out["feed_ms"] = timed(args.batches, lambda: next(f))
    prev = [None]

    def both():
        nonlocal state, m
        state, m = compiled.train_step(state, next(f)[1], key)
        if prev[0] is not None:
            int(prev[0])                                     # fit's NonFiniteStreak: the previous step's counter
        prev[0] = m["nonfinite_streak"]

    out["feed_and_step_ms"] = timed(args.batches, both, lambda: jax.block_until_ready(m))
    out = {k: ([round(x, 2) for x in v] if isinstance(v, tuple) else v) for k, v in out.items()}
    print(json.dumps(out), flush=True)
    f.close()
    os._exit(0)                                              # skip the tf.data teardown at exit


if __name__ == "__main__":
    sys.exit(main())
