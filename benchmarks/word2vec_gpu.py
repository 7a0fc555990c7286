"""Embedding objectives' throughput on one accelerator (words/s for skip-gram on the GPU machine):
word2vec (skip-gram, CBOW), fastText (skip-gram, CBOW) and GloVe on the real Gutenberg batches, with no
TensorFlow on the host (the lent GPU machines have none).

For each run (objective, batch size, ``train.steps_per_call`` k), the objective's batches for its epochs are
made by the objective's own builder without tf.data: word2vec's and fastText's ``batch_maker`` (the C++
example builder where a compiler is found, else numpy), GloVe's ``TripleOrder.batch`` (the entries of the
co-occurrence matrix in each epoch's random order). The calls are ``fit``'s:
the compiled step of ``compile_objective`` (``model.kernel='auto'``, which is the XLA path on a GPU, and
``model.updates='batch'``; GloVe's AdaGrad step), or with k > 1 its k steps a call over batches stacked by
``stacked_batches`` (``train/multi_step.py``), the batches put on the device by the loop's ``Prefetcher``.
Timings ("words" for word2vec and fastText, co-occurrence "entries" for GloVe):

* ``build_words_per_sec_1_thread``: the builder alone on one thread (the first 16 batches; GloVe's include
  the first epoch's permutation);
* ``words_per_sec_streamed``: a whole run from a fresh state, the batches built on the fly by ``--threads``
  threads (the builder releases the GIL; GloVe's by one thread, in order, as ``fit``'s dataset does, since
  ``TripleOrder`` keeps its permutations unlocked); the clock runs from the first batch asked for to the last
  step's parameters ready, compilation excluded (a throw-away call compiles first);
* ``words_per_sec_fed``: the same batches, already built in host memory, through the ``Prefetcher`` (the
  transfers and the calls, no building);
* ``words_per_sec_step_only``: the same calls over the same batches already on the device.

``to_global_ms_per_step`` is the transfer of one step's batch as the loop makes it. "Words" are running words
of the corpus, as gensim counts them: epochs x running words / seconds; GloVe's entries are iterations x
nonzero entries / seconds, with ``epochs_per_sec_*`` and ``epoch_seconds_*`` (one iteration's wall time). The
settings and the scoring are the CPU side-by-sides': after the streamed run the vectors (word2vec: the input
rows; fastText: ``Inspection.subword_vectors``, the mean of a word's own row and its n-gram rows; GloVe: W + W~)
are scored as ``word2vec_vs_gensim.py`` scores them (analogy with coverage, WordSim353, SimLex-999);
``max_abs_diff_runs`` is the largest difference between the streamed and step-only runs' vectors (the same
batches: a nonzero value is the device's order of floating-point adds in its scatters).

    python benchmarks/word2vec_gpu.py --runs skipgram:4096,skipgram:4096:k=16,skipgram:16384:k=4 --json out.json
    python benchmarks/word2vec_gpu.py --runs fasttext_skipgram:16384:k=4:group,glove:65536:k=16
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
WORD2VEC, FASTTEXT = ("skipgram", "cbow"), ("fasttext_skipgram", "fasttext_cbow")
OBJECTIVES = WORD2VEC + FASTTEXT + ("glove",)
GLOVE = {"epochs": 15.0, "dim": 50, "eta": 0.05, "window": 15, "x_max": 10.0}  # glove_vs_c.py's defaults


def parse_runs(text: str) -> list[dict]:
    """'skipgram:65536,cbow:16384:cap=256,fasttext_cbow:16384:k=4:group,glove:65536:k=16' -> one dict per run:
    objective (skipgram, cbow, fasttext_skipgram, fasttext_cbow or glove), batch (running words a step; GloVe:
    co-occurrence entries), per_pair (pp: a negative draw per pair), cap (model.duplicate_cap, default the CPU
    side-by-side's: 64 for word2vec, the config's for fastText), alpha (the learning rate, default the
    side-by-side's; GloVe: its eta), k (``train.steps_per_call``, default 1), group (a call's k batches built by
    one builder call, as ``fit`` builds them (``MakerStreams.train_groups``), instead of k calls stacked), epochs
    (default ``--epochs``; GloVe: 15 iterations) and dim (default ``--dim``; GloVe: 50). GloVe takes no pp, cap or
    group."""
    runs = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        bits = part.split(":")
        run = {"objective": bits[0], "batch": bits[1] if len(bits) > 1 else "", "per_pair": False, "cap": None,
               "alpha": None, "k": 1, "group": False, "epochs": None, "dim": None}
        ok = run["objective"] in OBJECTIVES and run["batch"].isdigit()
        for extra in bits[2:]:
            key, _, value = extra.partition("=")
            if extra in ("pp", "group"):
                run["per_pair" if extra == "pp" else "group"] = True
            elif key in ("cap", "alpha", "k", "epochs", "dim") and value:
                try:
                    run[key] = float(value) if key in ("alpha", "epochs") else int(value)
                except ValueError:
                    ok = False
            else:
                ok = False
        glove = run["objective"] == "glove"
        if not ok or run["k"] < 1 or (glove and (run["per_pair"] or run["group"] or run["cap"] is not None)):
            raise SystemExit(f"--runs: {part!r} is not OBJECTIVE:BATCH[:pp][:cap=N][:alpha=X][:k=N][:group]"
                             "[:epochs=X][:dim=N] (OBJECTIVE one of " + ", ".join(OBJECTIVES) + "; pp: a negative "
                             "draw per pair; k: train.steps_per_call; group: a call's k batches built in one "
                             "builder call; glove takes no pp, cap or group)")
        run["batch"] = int(run["batch"])
        runs.append(run)
    return runs


def family_run(run: dict, ctx, args, steps_per_call: int = 1):
    """What ``one_run`` needs of a run's family, built with the CPU side-by-side's settings and helpers
    (``word2vec_vs_gensim.run_config``, ``fasttext_vs_gensim.build_objective``, ``glove_vs_c.py``'s): cfg, obj,
    make (``make(i)``: batch i's host arrays; word2vec and fastText also ``make(i, k)``: k stacked), steps,
    per_step (words or entries a step), unit, threads (the streamed run's builders), vectors (params -> the
    scored words' vectors), words, counts and extra (figures of the setup)."""
    import numpy as np

    import word2vec_vs_gensim as bench
    from ptm_jax.families.word2vec import steps_for_epochs

    objective, batch = run["objective"], run["batch"]
    s = types.SimpleNamespace(unit="words", threads=args.threads, extra={})
    if objective == "glove":
        return glove_run(run, ctx, s, steps_per_call)
    s.epochs = args.epochs if run["epochs"] is None else run["epochs"]
    s.steps = steps_for_epochs(s.epochs, ctx.pass_tokens, batch)
    s.per_step = batch * ctx.running_words / ctx.pass_tokens       # running words a step reads (eos excluded)
    settings = types.SimpleNamespace(dim=run["dim"] or args.dim, window=5, sample=1e-3, negative=5,
                                     cap=run["cap"], kernel=args.kernel, updates="batch",
                                     per_pair_negatives=run["per_pair"], seed=args.seed, batch=batch,
                                     steps_per_call=steps_per_call)
    corpus, vocab = ctx.corpus, ctx.corpus.tokenizer
    ids = [i for i in range(vocab.vocab_size) if i not in set(vocab.special_ids())]
    s.words, s.counts = [vocab.id_to_token(i) for i in ids], np.asarray(vocab.counts)[ids]
    if objective in WORD2VEC:
        from ptm_jax.families.word2vec import FAMILY

        settings.cap = 64 if run["cap"] is None else run["cap"]
        s.cfg = bench.run_config(objective, vocab.vocab_size, settings, s.steps)
        s.obj = FAMILY.pretraining.objectives[objective](s.cfg, corpus)
        s.vectors = lambda p: FAMILY.inspection.word_vectors(p, s.cfg.model)[ids]
    else:
        import fasttext_vs_gensim as ft
        from ptm_jax.families.fasttext import FAMILY, FastTextConfig

        settings.cap = FastTextConfig.duplicate_cap if run["cap"] is None else run["cap"]
        vars(settings).update(minn=3, maxn=6, bucket=args.bucket, ns_exponent=0.75, alpha=0.025)
        s.cfg, s.obj, table_s = ft.build_objective(objective, corpus, settings, s.steps)
        s.vectors = lambda p: FAMILY.inspection.subword_vectors(p, s.cfg.model, vocab, s.words)
        s.extra = {"bucket": args.bucket, "ngram_table_seconds": table_s, "pair_slots": s.obj.slots,
                   "unit_slots": s.obj.units}
    if run["alpha"] is not None:
        s.cfg.train.learning_rate = run["alpha"]
    s.make, _ = s.obj.batch_maker(corpus.train, 0, batch, 0, 1, True)
    return s


def glove_run(run: dict, ctx, s, steps_per_call: int):
    """``family_run``'s GloVe part: glove_vs_c.py's corpus (the same vocabulary and token cache), co-occurrence
    matrix (built under ``--work``/artifacts, or reused) and config (demo.sh's settings, glove.c's AdaGrad)."""
    import math

    import numpy as np

    from ptm_jax.config import RunConfig, TrainConfig
    from ptm_jax.families.glove import FAMILY, GloveConfig
    from ptm_jax.families.glove.cooccur import build_cooccurrence

    platforms = os.environ.get("JAX_PLATFORMS")
    import glove_vs_c  # sets JAX_PLATFORMS=cpu for its own runs: put back

    if platforms is None:
        os.environ.pop("JAX_PLATFORMS", None)
    corpus = glove_vs_c.load_corpus(ctx.path, ctx.work, types.SimpleNamespace(min_count=5, window=GLOVE["window"]))
    vocab, batch = corpus.tokenizer, run["batch"]
    model = GloveConfig(vocab_size=vocab.vocab_size, dim=run["dim"] or GLOVE["dim"], x_max=GLOVE["x_max"])
    t0 = time.perf_counter()
    cooc = build_cooccurrence(types.SimpleNamespace(data=corpus.data, model=model), corpus, ctx.work / "artifacts")
    corpus.artifacts = {"cooccurrence": cooc}
    s.extra = {"cooccur_seconds": time.perf_counter() - t0, "nnz": cooc.nnz, "dim": model.dim}
    s.epochs = GLOVE["epochs"] if run["epochs"] is None else run["epochs"]
    s.steps, s.per_step, s.unit, s.threads = math.ceil(s.epochs * cooc.nnz / batch), batch, "entries", 1
    eta = GLOVE["eta"] if run["alpha"] is None else run["alpha"]
    s.extra["eta"] = eta
    s.cfg = RunConfig(objective="glove", model=model, data=corpus.data, train=TrainConfig(
        batch_size=batch, steps=s.steps, optimizer="adagrad", learning_rate=1.0,
        adagrad_initial_accumulator=1.0 / eta ** 2, lr_decay="constant", warmup_steps=0, weight_decay=0.0,
        clip_norm=0.0, progress_bar=False, steps_per_call=steps_per_call))  # as glove_vs_c.run_ptm
    s.obj = FAMILY.pretraining.objectives["glove"](s.cfg, corpus)
    order = s.obj.order

    def make(i: int) -> dict:
        return order.batch(i * batch, batch)

    ids = [i for i in range(vocab.vocab_size) if i not in set(vocab.special_ids())]
    s.words, s.counts = [vocab.id_to_token(i) for i in ids], np.asarray(vocab.counts)[ids]
    s.make, s.vectors = make, lambda p: FAMILY.inspection.word_vectors(p["params"])[ids]
    return s


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


def one_run(run: dict, ctx, args) -> dict:
    import jax
    import numpy as np

    import word2vec_vs_gensim as bench
    from ptm_jax.config import MeshConfig
    from ptm_jax.parallel.feed import Prefetcher, to_global
    from ptm_jax.parallel.mesh import make_mesh
    from ptm_jax.train.loop import compile_objective
    from ptm_jax.train.metrics import reduce_terms
    from ptm_jax.train.multi_step import stacked_batches

    objective, batch, k = run["objective"], run["batch"], run["k"]
    s = family_run(run, ctx, args, k)
    cfg, obj, make, steps, unit = s.cfg, s.obj, s.make, s.steps, s.unit
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    amount = steps * s.per_step                       # running words (GloVe: entries) the steps read
    calls = -(-steps // k)
    out = {"objective": objective, "batch": batch, "steps_per_call": k, "group_builds": run["group"],
           "per_pair_negatives": run["per_pair"], "cap": getattr(cfg.model, "duplicate_cap", None),
           "alpha": cfg.train.learning_rate, "dim": cfg.model.dim, "steps": steps, "epochs": s.epochs,
           "device": str(jax.devices()[0].device_kind), "threads": s.threads, **s.extra}

    t0 = time.perf_counter()
    first = [make(i) for i in range(min(16, steps))]
    out[f"build_{unit}_per_sec_1_thread"] = len(first) * s.per_step / (time.perf_counter() - t0)

    group = run["group"] and k > 1
    if group:  # one builder call a call's k batches (what fit's feed does: MakerStreams.train_groups)
        def build(i):
            return make(i * k, k)
        units = calls
    else:
        build, units = make, calls * k

    def feed_of(host):
        """The loop's feed of host batches (or built groups): stacked by k, put on the device by the Prefetcher."""
        return Prefetcher(stacked_batches(host, k) if k > 1 and not group else host, mesh, compiled.batch_keys,
                          depth=4, stacked=k > 1)

    def as_groups(items):
        return list(stacked_batches(iter(items), k)) if k > 1 and not group else items

    def rates(kind: str, secs: float) -> dict:
        extra = {f"epochs_per_sec_{kind}": s.epochs / secs, f"epoch_seconds_{kind}": secs / s.epochs}
        return {f"{kind}_seconds": secs, f"{unit}_per_sec_{kind}": amount / secs, **(extra if unit != "words" else {})}

    t0 = time.perf_counter()
    compiled = compile_objective(obj, cfg.train, mesh, None)
    key = jax.random.key(args.seed)
    feed = feed_of(iter([build(0)] if group else first * k))
    train(compiled, compiled.init_fn(key), (b for _, b in feed), min(k, steps), k, key, mesh)
    feed.close()
    out["compile_seconds"] = time.perf_counter() - t0
    del first

    kept: list = []

    def built():
        with concurrent.futures.ThreadPoolExecutor(s.threads) as pool:
            for b in pool.map(build, range(units)):
                kept.append(b)
                yield b

    state = compiled.init_fn(key)
    jax.block_until_ready(state)
    t0 = time.perf_counter()
    feed = feed_of(built())
    state, m = train(compiled, state, (b for _, b in feed), steps, k, key, mesh)
    secs = time.perf_counter() - t0
    feed.close()
    out.update(rates("streamed", secs), last_loss=reduce_terms(m)["loss"],  # and the objective's own (GloVe's cost)
               **reduce_terms({n: v for n, v in m.items() if n == getattr(obj, "primary_metric", "")}))
    streamed = s.vectors(jax.device_get(state.params))
    del state

    # the feed alone: the same batches, already built, through the Prefetcher (transfers + steps)
    state = compiled.init_fn(key)
    jax.block_until_ready(state)
    t0 = time.perf_counter()
    feed = feed_of(iter(kept))
    state, m = train(compiled, state, (b for _, b in feed), steps, k, key, mesh)
    secs = time.perf_counter() - t0
    feed.close()
    out.update(rates("fed", secs))
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
    out.update(rates("step_only", secs), step_ms=secs / steps * 1e3)
    again = s.vectors(jax.device_get(state.params))
    out["max_abs_diff_runs"] = float(np.max(np.abs(again - streamed)))
    del state, on_device

    t0 = time.perf_counter()
    out.update(bench.evaluate(s.words, streamed, s.counts, Path(args.eval_dir)))
    out["eval_seconds"] = time.perf_counter() - t0
    return out


_MAKE = None  # the batch builder a forked worker of ``build_scaling`` calls


def _build(i: int):
    return _MAKE(i)


def build_scaling(run: dict, ctx, counts: list[int], args) -> list[dict]:
    """The builder alone (no device): words/s of 256 batches built by N threads and by N forked processes (the
    arrays pickled back), for each N in ``counts``. Runs before JAX starts its backends, so forking is safe.
    Not GloVe (its builder is one thread's)."""
    import multiprocessing

    global _MAKE
    if run["objective"] == "glove":
        raise SystemExit("--build-scaling: GloVe's batches are built by one thread (TripleOrder is unlocked)")
    s = family_run(run, ctx, args)
    _MAKE = s.make
    _MAKE(0)
    batches = max(16, (1 << 20) // run["batch"] * 4)
    words = batches * s.per_step
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
                    help="OBJECTIVE:BATCH[:pp][:cap=N][:alpha=X][:k=N][:group][:epochs=X][:dim=N], comma-separated "
                         "(OBJECTIVE: skipgram, cbow, fasttext_skipgram, fasttext_cbow, glove; BATCH: running words a "
                         "step, GloVe's co-occurrence entries; pp: a negative draw per pair; cap: model.duplicate_cap; "
                         "alpha: the learning rate (GloVe: eta); k: train.steps_per_call, default 1; group: a call's "
                         "k batches built in one builder call; defaults: the CPU side-by-sides')")
    ap.add_argument("--epochs", type=float, default=3.0, help="word2vec and fastText (GloVe: 15, or :epochs=X)")
    ap.add_argument("--dim", type=int, default=100, help="word2vec and fastText (GloVe: 50, or :dim=N)")
    ap.add_argument("--bucket", type=int, default=2_000_000, help="fastText's n-gram buckets")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=max(1, min(8, (os.cpu_count() or 2) - 2)),
                    help="host threads building batches in the streamed run (GloVe: one)")
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
    ctx = types.SimpleNamespace(corpus=corpus, path=path, work=work, running_words=running_words,
                                pass_tokens=pass_tokens)
    results = []
    for run in runs if counts else []:
        for row in build_scaling(run, ctx, counts, args):
            print(json.dumps({k: (round(v) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
            results.append(row)
    if counts:
        return 0
    print(json.dumps({"jax": jax.__version__, "devices": [str(d) for d in jax.devices()],
                      "running_words": running_words, "vocab": vocab.vocab_size,
                      "corpus_seconds": round(time.perf_counter() - t0, 2)}), flush=True)
    for run in runs:
        t0 = time.perf_counter()
        try:
            r = one_run(run, ctx, args)
        except Exception as e:  # one failed run does not lose the others' figures
            r = {**run, "error": f"{type(e).__name__}: {e}"[:2000]}
        r["run_seconds"] = time.perf_counter() - t0
        results.append(r)
        print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
