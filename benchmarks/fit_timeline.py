"""Where the seconds of one whole word2vec or fastText ``fit`` go: the start (compiling the
objective, the checkpointer, initialising the state, the first steps with the train step's compilation), the
steps, and the end (the last checkpoint's save and wait, the feed's teardown, the curves). Timestamps are taken
around ``fit``'s own calls, and after steps 1, 2, 3 and the last, when each step's parameters are ready.

The corpus and settings are ``word2vec_vs_gensim.py``'s and ``fasttext_vs_gensim.py``'s (Gutenberg, dim 100,
window 5, negative 5, sample 1e-3, seed 1, sequential updates; fastText: per-pair negatives, 2M buckets, n-grams
3-6; no checkpoint compression).

    python benchmarks/fit_timeline.py --objective cbow --batch 16384 --epochs 3
    python benchmarks/fit_timeline.py --objective fasttext_cbow --parts 2
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objective", choices=["skipgram", "cbow", "fasttext_skipgram", "fasttext_cbow"],
                    default="cbow")
    ap.add_argument("--batch", type=int, default=16384)
    ap.add_argument("--epochs", type=float, default=3)
    ap.add_argument("--parts", type=int, default=1, help="model.sequential_parts")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(HERE.parent))
    sys.path.insert(0, str(HERE))
    import jax
    import tensorboardX  # noqa: F401  (imported before the clock, as in word2vec_vs_gensim.py)

    import ptm_jax.train.loop as loop
    from embedding_loop_parts import bench_objective
    from ptm_jax.checkpoint import Checkpointer
    from ptm_jax.config import MeshConfig
    from ptm_jax.data.pretraining.causal_lm import PackedStream
    from ptm_jax.parallel.feed import Prefetcher
    from ptm_jax.parallel.mesh import make_mesh
    from ptm_jax.train.hooks import Hook
    from ptm_jax.train.metrics import MetricsWriter

    fasttext = args.objective.startswith("fasttext")
    corpus, cfg, obj = bench_objective(args.objective, updates="sequential", batch=args.batch,
                                       per_pair_negatives=fasttext, epochs=args.epochs, parts=args.parts)
    pass_tokens = PackedStream(corpus.train, corpus.tokenizer.eos_id, seed=0, shuffle=False).pass_tokens
    steps = cfg.train.steps
    work = Path("/tmp/fasttext_bench" if fasttext else "/tmp/word2vec_bench")
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])

    marks: list[tuple[str, float]] = []

    def mark_return(owner, name: str, label: str) -> None:
        """Wraps ``owner.name`` (a module's function or a class's method) to record when each call returns."""
        f = getattr(owner, name)

        def wrapper(*a, **k):
            out = f(*a, **k)
            marks.append((label + " returned", time.perf_counter()))
            return out
        setattr(owner, name, wrapper)

    for name in ("compile_objective", "Checkpointer", "Prefetcher", "MetricsWriter"):
        mark_return(loop, name, name)
    for cls, name in ((Checkpointer, "save"), (Checkpointer, "close"), (Prefetcher, "close"),
                      (MetricsWriter, "close")):
        mark_return(cls, name, f"{cls.__name__}.{name}")

    class Steps(Hook):
        def after_step(self, run, metrics):
            if run.step in (1, 2, 3, steps):
                jax.block_until_ready(run.state.params)
                marks.append((f"step {run.step} ready", time.perf_counter()))

    t0 = time.perf_counter()
    loop.fit(obj, cfg.train, mesh, work / f"ptm_timeline_{time.time_ns()}", hooks=[Steps()])
    marks.append(("fit returned", time.perf_counter()))
    prev = t0
    for name, t in marks:
        print(f"{t - t0:8.3f} s  (+{t - prev:6.3f})  {name}")
        prev = t
    print(f"{steps} steps, {pass_tokens * args.epochs / (marks[-1][1] - t0):,.0f} running words/s over the whole fit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
