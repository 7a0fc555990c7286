"""word2vec words/s on one accelerator (issue 17: "On the GPU machine: words/s for skip-gram"), on the real
Gutenberg batches, with no TensorFlow on the host (the lent GPU machines have none).

For each run (objective, batch size, ``train.steps_per_call`` k), the objective's batches for ``--epochs``
passes are made by the objective's own builder (``Word2VecObjective.batch_maker``: the C++ example builder
where a compiler is found, else numpy), without tf.data. The calls are ``fit``'s: the compiled step of
``compile_objective`` (``model.kernel='auto'``, which is the XLA path on a GPU, and ``model.updates='batch'``),
or with k > 1 its k steps a call over batches stacked by ``stacked_batches`` (``train/multi_step.py``), the
batches put on the device by the loop's ``Prefetcher``. Timings:

* ``build_words_per_sec_1_thread``: the builder alone on one thread (the first 16 batches);
* ``words_per_sec_streamed``: a whole run from a fresh state, the batches built on the fly by ``--threads``
  threads (the builder releases the GIL); the clock runs from the first batch asked for to the last step's
  parameters ready, compilation excluded (a throw-away call compiles first);
* ``words_per_sec_fed``: the same batches, already built in host memory, through the ``Prefetcher`` (the
  transfers and the calls, no building);
* ``words_per_sec_step_only``: the same calls over the same batches already on the device.

``to_global_ms_per_step`` is the transfer of one step's batch as the loop makes it. "Words" are running words
of the corpus, as gensim counts them: epochs x running words / seconds. After the streamed run the input
vectors are scored as ``word2vec_vs_gensim.py`` scores them (analogy, WordSim353, SimLex-999);
``max_abs_diff_runs`` is the largest difference between the streamed and step-only runs' vectors (the same
batches: a nonzero value is the device's order of floating-point adds in its scatters).

    python benchmarks/word2vec_gpu.py --runs skipgram:4096,skipgram:4096:k=16,skipgram:16384:k=4 --json out.json
    # where ../shared is not beside the checkout: --corpus gutenberg.txt (prepared by word2vec_vs_gensim.py)
    # --eval-dir a folder with questions-words.txt, wordsim353.tsv and simlex999.txt
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import sys
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent


def parse_runs(text: str) -> list[dict]:
    """'skipgram:65536,cbow:16384:cap=256,skipgram:4096:pp:k=16:group' -> one dict per run: objective, batch,
    per_pair (pp: a negative draw per pair), cap (model.duplicate_cap, default 64), alpha (the learning rate,
    default word2vec.c's), k (``train.steps_per_call``, default 1) and group (a call's k batches built by one
    builder call, as ``fit`` builds them (``Word2VecObjective.train_groups``), instead of k calls stacked)."""
    runs = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        bits = part.split(":")
        run = {"objective": bits[0], "batch": bits[1] if len(bits) > 1 else "", "per_pair": False, "cap": 64,
               "alpha": None, "k": 1, "group": False}
        ok = run["objective"] in ("skipgram", "cbow") and run["batch"].isdigit()
        for extra in bits[2:]:
            key, _, value = extra.partition("=")
            if extra in ("pp", "group"):
                run["per_pair" if extra == "pp" else "group"] = True
            elif key in ("cap", "alpha", "k") and value:
                try:
                    run[key] = float(value) if key == "alpha" else int(value)
                except ValueError:
                    ok = False
            else:
                ok = False
        if not ok or run["k"] < 1:
            raise SystemExit(f"--runs: {part!r} is not OBJECTIVE:BATCH[:pp][:cap=N][:alpha=X][:k=N][:group] "
                             "(OBJECTIVE skipgram or cbow; pp: a negative draw per pair; k: train.steps_per_call; "
                             "group: a call's k batches built in one builder call)")
        run["batch"] = int(run["batch"])
        runs.append(run)
    return runs


def train(compiled, state, groups, steps: int, k: int, key, mesh):
    """``fit``'s calls (``loop.train_call``) over ``groups`` (device batches, stacked by k when k > 1), ``steps``
    steps; the state and the last call's metrics once the parameters are ready."""
    import jax

    from ptm_jax.train.loop import train_call

    done, masks = 0, {}
    for batch in groups:
        if done >= steps:
            break
        state, m, n = train_call(compiled, state, batch, key, k, steps - done, mesh, masks)
        done += n
    jax.block_until_ready(state.params)
    return state, m


def one_run(run: dict, corpus, running_words: int, pass_tokens: int, args) -> dict:
    import jax
    import numpy as np

    import word2vec_vs_gensim as bench
    from ptm_jax.config import MeshConfig
    from ptm_jax.families.word2vec import FAMILY, steps_for_epochs
    from ptm_jax.parallel.feed import Prefetcher, to_global
    from ptm_jax.parallel.mesh import make_mesh
    from ptm_jax.train.loop import compile_objective
    from ptm_jax.train.multi_step import stacked_batches

    objective, batch, k = run["objective"], run["batch"], run["k"]
    settings = types.SimpleNamespace(dim=args.dim, window=5, sample=1e-3, negative=5, cap=run["cap"],
                                     kernel=args.kernel, updates="batch", per_pair_negatives=run["per_pair"],
                                     seed=args.seed, batch=batch)
    steps = steps_for_epochs(args.epochs, pass_tokens, batch)
    cfg = bench.run_config(objective, corpus.tokenizer.vocab_size, settings, steps)
    if run["alpha"] is not None:
        cfg.train.learning_rate = run["alpha"]
    cfg.train.steps_per_call = k
    obj = FAMILY.objectives[objective](cfg, corpus)
    make, _ = obj.batch_maker(corpus.train, 0, batch, 0, 1, True)
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    words = steps * batch * running_words / pass_tokens       # running words the steps read (eos excluded)
    calls = -(-steps // k)
    out = {"objective": objective, "batch": batch, "steps_per_call": k, "group_builds": run["group"],
           "per_pair_negatives": run["per_pair"],
           "cap": run["cap"], "alpha": cfg.train.learning_rate, "steps": steps, "epochs": args.epochs,
           "device": str(jax.devices()[0].device_kind), "threads": args.threads}

    t0 = time.perf_counter()
    first = [make(i) for i in range(min(16, steps))]
    out["build_words_per_sec_1_thread"] = len(first) * batch * running_words / pass_tokens / (
        time.perf_counter() - t0)

    group = run["group"] and k > 1
    if group:  # one builder call a call's k batches (what fit's feed does: Word2VecObjective.train_groups)
        def unit(i):
            return make(i * k, k)
        units = calls
    else:
        unit, units = make, calls * k

    def feed_of(host):
        """The loop's feed of host batches (or built groups): stacked by k, put on the device by the Prefetcher."""
        return Prefetcher(stacked_batches(host, k) if k > 1 and not group else host, mesh, compiled.batch_keys,
                          depth=4, stacked=k > 1)

    def as_groups(items):
        return list(stacked_batches(iter(items), k)) if k > 1 and not group else items

    t0 = time.perf_counter()
    compiled = compile_objective(obj, cfg.train, mesh, None)
    key = jax.random.key(args.seed)
    feed = feed_of(iter([unit(0)] if group else first * k))
    train(compiled, compiled.init_fn(key), (b for _, b in feed), min(k, steps), k, key, mesh)
    feed.close()
    out["compile_seconds"] = time.perf_counter() - t0
    del first

    kept: list = []

    def built():
        with concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
            for b in pool.map(unit, range(units)):
                kept.append(b)
                yield b

    state = compiled.init_fn(key)
    jax.block_until_ready(state)
    t0 = time.perf_counter()
    feed = feed_of(built())
    state, m = train(compiled, state, (b for _, b in feed), steps, k, key, mesh)
    secs = time.perf_counter() - t0
    feed.close()
    out.update(streamed_seconds=secs, words_per_sec_streamed=words / secs, last_loss=float(m["loss"]))
    streamed = FAMILY.word_vectors(jax.device_get(state.params), cfg.model)
    del state

    # the feed alone: the same batches, already built, through the Prefetcher (transfers + steps)
    state = compiled.init_fn(key)
    jax.block_until_ready(state)
    t0 = time.perf_counter()
    feed = feed_of(iter(kept))
    state, m = train(compiled, state, (b for _, b in feed), steps, k, key, mesh)
    secs = time.perf_counter() - t0
    feed.close()
    out.update(fed_seconds=secs, words_per_sec_fed=words / secs)
    del state
    probe = as_groups(kept[:64 if group else 64 * k])[:64]
    t0 = time.perf_counter()
    puts = [to_global(b, mesh, compiled.batch_keys, stacked=k > 1) for b in probe]
    jax.block_until_ready(puts)
    out["to_global_ms_per_step"] = (time.perf_counter() - t0) / len(probe) / k * 1e3
    del puts, probe
    groups = as_groups(kept)
    on_device = [to_global(b, mesh, compiled.batch_keys, stacked=k > 1) for b in groups]
    jax.block_until_ready(on_device)
    del kept, groups
    state = compiled.init_fn(key)
    jax.block_until_ready(state)
    t0 = time.perf_counter()
    state, m = train(compiled, state, on_device, steps, k, key, mesh)
    secs = time.perf_counter() - t0
    out.update(step_only_seconds=secs, words_per_sec_step_only=words / secs, step_ms=secs / steps * 1e3)
    again = FAMILY.word_vectors(jax.device_get(state.params), cfg.model)
    out["max_abs_diff_runs"] = float(np.max(np.abs(again - streamed)))
    del state, on_device

    vocab = corpus.tokenizer
    special = set(vocab.special_ids())
    ids = [i for i in range(vocab.vocab_size) if i not in special]
    t0 = time.perf_counter()
    out.update(bench.evaluate([vocab.id_to_token(i) for i in ids], streamed[ids], np.asarray(vocab.counts)[ids],
                              Path(args.eval_dir)))
    out["eval_seconds"] = time.perf_counter() - t0
    return out


_MAKE = None  # the batch builder a forked worker of ``build_scaling`` calls


def _build(i: int):
    return _MAKE(i)


def build_scaling(run: dict, corpus, pass_tokens: int, running_words: int, counts: list[int], args) -> list[dict]:
    """The builder alone (no device): words/s of 256 batches built by N threads and by N forked processes (the
    arrays pickled back), for each N in ``counts``. Runs before JAX starts its backends, so forking is safe."""
    import multiprocessing

    import word2vec_vs_gensim as bench
    from ptm_jax.families.word2vec import FAMILY

    global _MAKE
    settings = types.SimpleNamespace(dim=args.dim, window=5, sample=1e-3, negative=5, cap=run["cap"],
                                     kernel=args.kernel, updates="batch", per_pair_negatives=run["per_pair"],
                                     seed=args.seed, batch=run["batch"])
    cfg = bench.run_config(run["objective"], corpus.tokenizer.vocab_size, settings, 1000)
    _MAKE, _ = FAMILY.objectives[run["objective"]](cfg, corpus).batch_maker(corpus.train, 0, run["batch"], 0, 1, True)
    _MAKE(0)
    batches = max(16, (1 << 20) // run["batch"] * 4)
    words = batches * run["batch"] * running_words / pass_tokens
    out = []
    for n in counts:
        row = {"objective": run["objective"], "batch": run["batch"], "workers": n, "batches": batches}
        with concurrent.futures.ThreadPoolExecutor(n) as pool:
            t0 = time.perf_counter()
            for _ in pool.map(_MAKE, range(batches)):
                pass
            row["threads_words_per_sec"] = words / (time.perf_counter() - t0)
        with concurrent.futures.ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork")) as pool:
            list(pool.map(_build, range(n)))  # the workers started
            t0 = time.perf_counter()
            for _ in pool.map(_build, range(batches), chunksize=2):
                pass
            row["processes_words_per_sec"] = words / (time.perf_counter() - t0)
        out.append(row)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", default="skipgram:4096,skipgram:16384,skipgram:65536,skipgram:16384:pp,cbow:16384",
                    help="OBJECTIVE:BATCH[:pp][:cap=N][:alpha=X][:k=N][:group], comma-separated (pp: a negative "
                         "draw per pair; cap: model.duplicate_cap, default 64; alpha: the learning rate, default "
                         "word2vec.c's; k: train.steps_per_call, default 1; group: a call's k batches built in one "
                         "builder call)")
    ap.add_argument("--epochs", type=float, default=3.0)
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=max(1, min(8, (os.cpu_count() or 2) - 2)),
                    help="host threads building batches in the streamed run")
    ap.add_argument("--kernel", default="auto", help="model.kernel ('xla' forces the XLA path on a CPU)")
    ap.add_argument("--corpus", default="", help="the cleaned Gutenberg text; default: made from ../shared/data")
    ap.add_argument("--eval-dir", default="", help="folder of questions-words.txt, wordsim353.tsv, simlex999.txt")
    ap.add_argument("--work", default="/tmp/word2vec_gpu")
    ap.add_argument("--json", default="")
    ap.add_argument("--build-scaling", default="", metavar="N,N,...",
                    help="instead of the runs: for each, the builder alone on N threads and on N processes")
    args = ap.parse_args(argv)
    runs = parse_runs(args.runs)
    counts = [int(x) for x in args.build_scaling.split(",") if x.strip()]
    sys.path.insert(0, str(HERE.parent))
    sys.path.insert(0, str(HERE))
    import jax

    import word2vec_vs_gensim as bench
    from ptm_jax.data.pretraining.causal_lm import PackedStream

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    args.eval_dir = args.eval_dir or str(bench.DATA / "word2vec")
    path = Path(args.corpus) if args.corpus else bench.prepare_corpus(work)
    t0 = time.perf_counter()
    corpus = bench.load_corpus(path, work, 5)
    vocab = corpus.tokenizer
    running_words = sum(len(line.split()) for line in path.read_text(encoding="utf-8").splitlines())
    pass_tokens = PackedStream(corpus.train, vocab.eos_id, seed=0, shuffle=False).pass_tokens
    results = []
    for run in runs if counts else []:
        for row in build_scaling(run, corpus, pass_tokens, running_words, counts, args):
            print(json.dumps({k: (round(v) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
            results.append(row)
    if counts:
        return 0
    print(json.dumps({"jax": jax.__version__, "devices": [str(d) for d in jax.devices()],
                      "running_words": running_words, "vocab": vocab.vocab_size,
                      "corpus_seconds": round(time.perf_counter() - t0, 2)}), flush=True)
    for run in runs:
        try:
            r = one_run(run, corpus, running_words, pass_tokens, args)
        except Exception as e:  # one failed run does not lose the others' figures
            r = {**run, "error": f"{type(e).__name__}: {e}"[:2000]}
        results.append(r)
        print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
