"""word2vec (ptm_jax/families/word2vec) side by side with gensim ``Word2Vec`` in one run, on the same corpus,
dimensions, window, negatives, subsampling, min_count and epochs.

The corpus: every Gutenberg book of ../shared/data/corpus/gutenberg without its Project Gutenberg header and
footer, lower-cased, words = runs of letters and digits (an inner apostrophe kept), one paragraph per document.
Both sides read the same paragraphs (gensim through ``corpus_file``, its fastest mode, one paragraph a line;
ptm_jax through its token cache, one paragraph a document, built with the word vocabulary of ``min_count``).

Reported per side: words/s (running words of the corpus x epochs / wall time of the weight initialisation and
training, vocabulary and token cache excluded on both sides; ptm_jax's includes its compilation, its first batch
and the end-of-run plot and checkpoint; gensim's its ``prepare_weights``, ``init_seconds``;
``train_words_per_sec``: ptm_jax's up to its last step's parameters, without the end-of-run checkpoint and plot,
which gensim's side does not do, gensim's without its initialisation; ``steady_words_per_sec``: ptm_jax's rate
between its first and last logged steps),
analogy accuracy with coverage (questions-words.txt, top 30000 words, compute-accuracy protocol), WordSim353 and
SimLex-999 Spearman, all through ``ptm_jax/evaluate/word_vectors.py`` for both sides.

    python benchmarks/word2vec_vs_gensim.py --epochs 1                 # both architectures, both sides
    python benchmarks/word2vec_vs_gensim.py --only skipgram --profile  # where ptm_jax's step time goes
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import re
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def prepare_corpus(out: Path) -> Path:
    """Writes the cleaned Gutenberg paragraphs to ``out/gutenberg.txt`` (one a line, a blank line between)."""
    path = out / "gutenberg.txt"
    if path.exists():
        return path
    paras: list[str] = []
    for book in sorted((DATA / "corpus/gutenberg").glob("*.txt")):
        text = book.read_text(encoding="utf-8", errors="replace")
        start = re.search(r"\*\*\* ?START OF[^\n]*\n", text)
        end = re.search(r"\*\*\* ?END OF", text)
        text = text[start.end() if start else 0:end.start() if end else len(text)]
        for block in re.split(r"\n\s*\n", text):
            words = WORD.findall(block.lower())
            if words:
                paras.append(" ".join(words))
    out.mkdir(parents=True, exist_ok=True)
    path.write_text("\n\n".join(paras) + "\n", encoding="utf-8")
    return path


def run_config(objective: str, vocab_size: int, args, steps: int):
    from ptm_jax.config import RunConfig, TokenizerConfig, TrainConfig
    from ptm_jax.families.word2vec import Word2VecConfig, Word2VecDataConfig

    return RunConfig(objective=objective, model=Word2VecConfig(vocab_size=vocab_size, dim=args.dim,
                                                           duplicate_cap=args.cap, kernel=args.kernel,
                                                           updates=args.updates,
                                                           sequential_parts=getattr(args, "parts", 1)),
                     data=Word2VecDataConfig(window=args.window, sample=args.sample, negative=args.negative,
                                             shared_negatives=not args.per_pair_negatives, seed=args.seed),
                     tokenizer=TokenizerConfig(),
                     train=TrainConfig(batch_size=args.batch, steps=steps, optimizer="sgd",
                                       learning_rate=alpha(objective), lr_decay="bert", warmup_steps=0,
                                       min_lr_ratio=1e-4, weight_decay=0.0, clip_norm=0.0,
                                       log_every=max(steps // 10, 1), eval_every=10 ** 9,
                                       checkpoint_every=10 ** 9, checkpoint_compression=False,  # as the configs
                                       progress_bar=False, seed=args.seed,
                                       steps_per_call=getattr(args, "steps_per_call", 1)))


def steady_rate(stage_dir: Path, batch: int, words_per_position: float) -> float | None:
    """Running words a second between the first and the last logged train step of a ``fit`` (its
    ``metrics.jsonl`` times): the training rate without the compilation, the first batch and the end-of-run
    plot and checkpoint that the whole run's words/s includes. None with fewer than two records."""
    rows = [json.loads(x) for x in (stage_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r.get("split") == "train"]
    if len(rows) < 2 or rows[-1]["time"] <= rows[0]["time"]:
        return None
    return (rows[-1]["step"] - rows[0]["step"]) * batch * words_per_position / (rows[-1]["time"] - rows[0]["time"])


def last_step_hook(steps: int):
    """A ``fit`` hook whose ``at`` is when the last step's parameters are ready, so a side's training time can be
    read without the end-of-run checkpoint that ``fit`` writes after it (gensim's side writes none).
    Compilation, initialisation and the first batches stay in it."""
    import jax

    from ptm_jax.train.hooks import Hook

    class LastStep(Hook):
        at = None

        def after_step(self, run, metrics):
            if run.step == steps:
                jax.block_until_ready(run.state.params)
                self.at = time.perf_counter()

    return LastStep()


def alpha(objective: str) -> float:
    return 0.025 if objective == "skipgram" else 0.05      # word2vec.c's defaults


def evaluate(words, vectors, counts, folder: Path = DATA / "word2vec") -> dict:
    from ptm_jax.evaluate.word_vectors import WordVectors, evaluate_analogies, evaluate_similarity

    wv = WordVectors(words, vectors, counts)
    an = evaluate_analogies(wv, folder / "questions-words.txt", restrict_vocab=30000)
    ws = evaluate_similarity(wv, folder / "wordsim353.tsv")
    sl = evaluate_similarity(wv, folder / "simlex999.txt")
    return {"analogy": an["accuracy"], "semantic": an["semantic_accuracy"], "syntactic": an["syntactic_accuracy"],
            "coverage": an["coverage"], "wordsim353": ws["spearman"], "ws_coverage": ws["coverage"],
            "simlex999": sl["spearman"], "sl_coverage": sl["coverage"]}


def ours(objective: str, corpus, running_words: int, args, work: Path) -> dict:
    import jax
    import numpy as np

    from ptm_jax.config import MeshConfig
    from ptm_jax.data.pretraining.causal_lm import PackedStream
    from ptm_jax.families.word2vec import FAMILY, steps_for_epochs
    from ptm_jax.parallel.mesh import make_mesh
    from ptm_jax.train.loop import fit

    vocab = corpus.tokenizer
    pass_tokens = PackedStream(corpus.train, vocab.eos_id, seed=0, shuffle=False).pass_tokens
    steps = steps_for_epochs(args.epochs, pass_tokens, args.batch)
    cfg = run_config(objective, vocab.vocab_size, args, steps)
    obj = FAMILY.pretraining.objectives[objective](cfg, corpus)
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    import tensorboardX  # noqa: F401  (the metrics writer's import, 10-20 s under load: not training time)

    last = last_step_hook(steps)
    t0 = time.perf_counter()
    run_dir = work / f"ptm_{objective}_{time.time_ns()}"
    result = fit(obj, cfg.train, mesh, run_dir, hooks=[last])
    secs = time.perf_counter() - t0
    matrix = FAMILY.inspection.word_vectors(jax.device_get(result.state.params), cfg.model)
    special = set(vocab.special_ids())
    ids = [i for i in range(vocab.vocab_size) if i not in special]
    out = {"side": "ptm_jax", "objective": objective, "seconds": secs, "steps": steps,
           "words_per_sec": running_words * args.epochs / secs,
           "train_seconds": last.at - t0, "train_words_per_sec": running_words * args.epochs / (last.at - t0),
           "steady_words_per_sec": steady_rate(result.stage_dir, args.batch, running_words / pass_tokens)}
    shutil.rmtree(run_dir, ignore_errors=True)  # as gensim's saved model: repeated runs do not fill the disk
    out.update(evaluate([vocab.id_to_token(i) for i in ids], matrix[ids], np.asarray(vocab.counts)[ids]))
    return out


def gensim_timed(model, path: Path, epochs: int, running_words: int) -> dict:
    """gensim's seconds and words/s, its weight initialisation and its training on the clock. ``build_vocab`` is
    run in its steps (gensim 4's ``Word2Vec.build_vocab``: scan, prepare the vocabulary, ``prepare_weights``) so
    that the initialisation of the tables (FastText's 2M-bucket n-gram table among them) is timed, as ptm_jax's
    ``fit`` initialises its tables on its own clock; the vocabulary scan is off the clock on both sides.
    ``train_words_per_sec`` leaves the initialisation out. ``save_seconds``: then ``model.save`` into a fresh
    folder beside the corpus (the trained model on disk, as ptm_jax's ``fit`` ends with its checkpoint written),
    deleted after; ``saved_words_per_sec`` counts it in."""
    import shutil

    total_words, corpus_count = model.scan_vocab(corpus_file=str(path))
    model.corpus_count, model.corpus_total_words = corpus_count, total_words
    model.prepare_vocab()
    t0 = time.perf_counter()
    model.prepare_weights()
    t1 = time.perf_counter()
    model.train(corpus_file=str(path), total_words=total_words, total_examples=corpus_count, epochs=epochs)
    t2 = time.perf_counter()
    saved = path.parent / "gensim_model"
    shutil.rmtree(saved, ignore_errors=True)
    saved.mkdir()
    t3 = time.perf_counter()
    model.save(str(saved / "model"))
    t4 = time.perf_counter()
    shutil.rmtree(saved)
    return {"seconds": t2 - t0, "init_seconds": t1 - t0, "words_per_sec": running_words * epochs / (t2 - t0),
            "train_words_per_sec": running_words * epochs / (t2 - t1), "save_seconds": t4 - t3,
            "saved_words_per_sec": running_words * epochs / (t2 - t0 + t4 - t3)}


def speed_ratios(objective: str, ours_row: dict, gensim_row: dict) -> dict:
    """ptm_jax's speed over gensim's three ways, each with the same work on both sides: the whole run with the
    trained model written (ptm_jax's end-of-run checkpoint, gensim's ``model.save``), to the last step with
    nothing written (ptm_jax's ``train_seconds``), and ptm_jax's whole run against gensim without its save (the
    ratio this script reported first)."""
    g = gensim_row
    return {"side": "ratio", "objective": objective,
            "both_saved": round((g["seconds"] + g["save_seconds"]) / ours_row["seconds"], 3),
            "to_last_step": round(g["seconds"] / ours_row["train_seconds"], 3),
            "ours_saved_gensim_not": round(g["seconds"] / ours_row["seconds"], 3)}


def gensim_side(objective: str, path: Path, running_words: int, args) -> dict:
    from gensim.models import Word2Vec

    a = alpha(objective)
    model = Word2Vec(vector_size=args.dim, window=args.window, sample=args.sample, negative=args.negative, hs=0,
                     sg=int(objective == "skipgram"), cbow_mean=1, min_count=args.min_count, alpha=a,
                     min_alpha=a * 1e-4, workers=args.workers, seed=args.seed)
    out = {"side": "gensim", "objective": objective, **gensim_timed(model, path, int(args.epochs), running_words)}
    wv = model.wv
    out.update(evaluate(list(wv.index_to_key), wv.vectors, [wv.get_vecattr(w, "count") for w in wv.index_to_key]))
    return out


def load_corpus(path: Path, work: Path, min_count: int):
    from ptm_jax.config import DataConfig
    from ptm_jax.data.cache import build_or_load_cache
    from ptm_jax.data.word_vocab import WordVocab, build_word_vocab

    vocab_file = work / "vocab.tsv"
    if vocab_file.exists():
        vocab = WordVocab(vocab_file, lower_case=True)
    else:
        vocab = build_word_vocab(path.read_text(encoding="utf-8").splitlines(), work, min_count=min_count,
                                 lower_case=True)
    cache = build_or_load_cache(DataConfig(corpus=str(path), format="lines"), vocab, work / "cache")
    return types.SimpleNamespace(tokenizer=vocab, train=cache, eval=None)


def profile(objective: str, corpus, args) -> dict:
    """Seconds per step of ptm_jax's parts on real batches (wall and process CPU time, which is steadier on a
    loaded machine): the tf.data example generation (numpy), the compiled train step by the fused CPU kernel
    (``model.kernel='auto'``, the default on one CPU device) and by the XLA path (``model.kernel='xla'``),
    interleaved round by round, and within the XLA step the gathers, the loss alone and the row gradients."""
    import dataclasses

    import jax
    import numpy as np

    from ptm_jax.config import MeshConfig
    from ptm_jax.families.word2vec import FAMILY
    from ptm_jax.families.word2vec.model import TRUNK, row_ids
    from ptm_jax.parallel.feed import to_global
    from ptm_jax.parallel.mesh import make_mesh
    from ptm_jax.train.loop import compile_objective

    cfg = run_config(objective, corpus.tokenizer.vocab_size, args, 1000)
    obj = FAMILY.pretraining.objectives[objective](cfg, corpus)
    xla_cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, kernel="xla", updates="batch"))
    xla = FAMILY.pretraining.objectives[objective](xla_cfg, corpus)
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    it = obj.train_batches(0, args.batch, 0, 1)
    n = 12
    t0, c0 = time.perf_counter(), time.process_time()
    batches = [next(it) for _ in range(n)]
    out = {"objective": objective, "batch_words": args.batch, "block": obj.block, "pair_slots": obj.slots,
           "pairs_per_batch": float(np.mean([b["pair_weight"].sum() for b in batches])),
           "slots_per_batch": int(batches[0]["pair_weight"].size),
           "dropped_per_batch": float(np.mean([b["dropped"].sum() for b in batches])),
           "data_s": (time.perf_counter() - t0) / n, "data_cpu_s": (time.process_time() - c0) / n}
    sides = {}
    for name, o, c in (("kernel", obj, cfg), ("xla", xla, xla_cfg)):
        compiled = compile_objective(o, c.train, mesh, None)
        state = compiled.init_fn(jax.random.key(0))
        gb = [to_global(b, mesh, compiled.batch_keys) for b in batches]
        state, m = compiled.train_step(state, gb[0], jax.random.key(0))
        jax.block_until_ready(m)
        sides[name] = [compiled, state, gb]

    def timed(fn, items):
        t0, c0 = time.perf_counter(), time.process_time()
        r = None
        for x in items:
            r = fn(x)
        jax.block_until_ready(r)
        return (time.perf_counter() - t0) / len(items), (time.process_time() - c0) / len(items)

    for rnd in range(2):                               # interleaved: kernel, xla, kernel, xla
        for name, side in sides.items():
            compiled, _, gb = side

            def one(b, side=side, compiled=compiled):
                side[1], m = compiled.train_step(side[1], b, jax.random.key(0))
                return m

            wall, cpu = timed(one, gb[1:])
            out.setdefault(f"{name}_step_s", []).append(round(wall, 5))
            out.setdefault(f"{name}_step_cpu_s", []).append(round(cpu, 5))
    params = sides["xla"][1].params
    gb = sides["xla"][2]
    norms = xla.normalizers

    def gathers(p, b):
        return {k: p["params"][TRUNK][k].at[i].get(mode="promise_in_bounds")
                for k, (i, _) in row_ids(b, xla.model.negative, xla.model.hs).items()}

    parts = {"xla_gathers": jax.jit(gathers),
             "xla_loss_only": jax.jit(lambda p, b: xla.loss(p, b, None, norms(b), True)[0]),
             "xla_row_gradients": jax.jit(lambda p, b: xla.row_gradients(p, b, None, norms(b))[2])}
    for name, fn in parts.items():
        jax.block_until_ready(fn(params, gb[0]))
        wall, cpu = timed(lambda b, fn=fn: fn(params, b), gb[1:])
        out[f"{name}_s"], out[f"{name}_cpu_s"] = round(wall, 5), round(cpu, 5)
    out["words_per_sec_step_only"] = args.batch / min(out["kernel_step_s"])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=["skipgram", "cbow"], default=None)
    ap.add_argument("--epochs", type=float, default=1)
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--window", type=int, default=5)
    ap.add_argument("--negative", type=int, default=5)
    ap.add_argument("--sample", type=float, default=1e-3)
    ap.add_argument("--min-count", type=int, default=5)
    ap.add_argument("--batch", type=int, default=4096, help="ptm_jax: running words per step")
    ap.add_argument("--cap", type=int, default=64, help="ptm_jax: model.duplicate_cap")
    ap.add_argument("--kernel", choices=["auto", "xla", "cpu"], default="auto",
                    help="ptm_jax: model.kernel (auto: the fused CPU kernel on one CPU device)")
    ap.add_argument("--updates", choices=["batch", "sequential"], default="batch",
                    help="ptm_jax: model.updates (sequential: word2vec.c's order, in the fused CPU kernel)")
    ap.add_argument("--per-pair-negatives", action="store_true",
                    help="ptm_jax: data.shared_negatives=false (a draw per skip-gram pair, as word2vec.c)")
    ap.add_argument("--steps-per-call", type=int, default=1, help="ptm_jax: train.steps_per_call")
    ap.add_argument("--parts", type=int, default=1,
                    help="ptm_jax: model.sequential_parts (the sequential updates in parts, side by side)")
    ap.add_argument("--workers", type=int, default=2, help="gensim worker threads")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", default="/tmp/word2vec_bench")
    ap.add_argument("--profile", action="store_true", help="only time ptm_jax's step parts")
    ap.add_argument("--skip-gensim", action="store_true")
    args = ap.parse_args(argv)
    work = Path(args.work)
    path = prepare_corpus(work)
    running_words = sum(len(line.split()) for line in path.read_text(encoding="utf-8").splitlines())
    corpus = load_corpus(path, work, args.min_count)
    print(json.dumps({"corpus": str(path), "running_words": running_words,
                      "vocab": corpus.tokenizer.vocab_size - 3, "documents": corpus.train.num_docs}), flush=True)
    objectives = [args.only] if args.only else ["skipgram", "cbow"]
    for objective in objectives:
        if args.profile:
            print(json.dumps(profile(objective, corpus, args)), flush=True)
            continue
        rows = [ours(objective, corpus, running_words, args, work)]
        if not args.skip_gensim:
            rows.append(gensim_side(objective, path, running_words, args))
            rows.append(speed_ratios(objective, *rows))
        for r in rows:
            print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
