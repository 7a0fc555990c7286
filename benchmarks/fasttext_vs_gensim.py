"""fastText (ptm_jax/families/fasttext) side by side with gensim ``FastText`` in one run, on the same corpus,
dimensions, window, negatives, subsampling, negative-sampling exponent, min_count, n-gram range, buckets and
epochs.

The corpus and the evaluation are word2vec's benchmark's (``benchmarks/word2vec_vs_gensim.py``: the cleaned
Gutenberg paragraphs, gensim through ``corpus_file``, ptm_jax through its token cache; analogy accuracy with
coverage by the compute-accuracy protocol over the top 30,000 words, WordSim353 and SimLex-999 Spearman, all
through ``ptm_jax/evaluate/word_vectors.py``). Both sides are scored on their in-vocabulary word vectors, each
the mean of the word's own row and its n-gram rows (gensim ``FastTextKeyedVectors.vectors``, ptm_jax
``Inspection.subword_vectors``). words/s: running words x epochs / wall time of the weight initialisation and
training (vocabulary, token cache and n-gram ids excluded on both sides; ptm_jax's includes its compilation and its
end-of-run checkpoint, gensim's its ``prepare_weights``: the 2M-bucket table's initialisation on both sides;
``train_words_per_sec`` stops at ptm_jax's last step, without the checkpoint, and leaves out gensim's
initialisation). gensim's side then times ``model.save`` (``save_seconds``), and a ``ratio`` line compares the
sides with the same work: both writing their trained model, neither (to ptm_jax's last step), and ptm_jax's whole
run against gensim's without its save (``word2vec_vs_gensim.speed_ratios``).
The sides run one after the other in one process, each side on both cores (gensim ``workers=2``, XLA:CPU's
thread pool).

    python benchmarks/fasttext_vs_gensim.py --epochs 1                          # skip-gram, both sides
    python benchmarks/fasttext_vs_gensim.py --epochs 1 --only fasttext_cbow     # CBOW
    python benchmarks/fasttext_vs_gensim.py --profile                           # where ptm_jax's step time goes
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from word2vec_vs_gensim import (evaluate, gensim_timed, last_step_hook, load_corpus, prepare_corpus,  # noqa: E402
                                speed_ratios, steady_rate)


def run_config(objective: str, vocab_size: int, args, steps: int):
    from ptm_jax.config import RunConfig, TokenizerConfig, TrainConfig
    from ptm_jax.families.fasttext import FastTextConfig, FastTextDataConfig

    return RunConfig(objective=objective,
                     model=FastTextConfig(vocab_size=vocab_size, dim=args.dim, minn=args.minn, maxn=args.maxn,
                                          bucket=args.bucket, duplicate_cap=args.cap, kernel=args.kernel,
                                          updates=args.updates, sequential_parts=getattr(args, "parts", 1)),
                     data=FastTextDataConfig(window=args.window, sample=args.sample, negative=args.negative,
                                             ns_exponent=args.ns_exponent, seed=args.seed,
                                             shared_negatives=not (args.per_pair_negatives
                                                                   and objective == "fasttext_skipgram")),
                     tokenizer=TokenizerConfig(),
                     train=TrainConfig(batch_size=args.batch, steps=steps, optimizer="sgd",
                                       learning_rate=args.alpha, lr_decay="bert", warmup_steps=0,
                                       min_lr_ratio=1e-4, weight_decay=0.0, clip_norm=0.0,
                                       log_every=max(steps // 10, 1), eval_every=10 ** 9,
                                       checkpoint_every=10 ** 9, checkpoint_compression=False,  # as the configs
                                       progress_bar=False, seed=args.seed,
                                       steps_per_call=getattr(args, "steps_per_call", 1)))


def build_objective(objective: str, corpus, args, steps: int):
    from ptm_jax.families.fasttext import FAMILY
    from ptm_jax.families.fasttext.subwords import build_table

    cfg = run_config(objective, corpus.tokenizer.vocab_size, args, steps)
    t0 = time.perf_counter()
    corpus.artifacts = {"subwords": build_table(cfg.model, corpus.tokenizer)}
    table_s = time.perf_counter() - t0
    return cfg, FAMILY.pretraining.objectives[objective](cfg, corpus), table_s


def ours(objective: str, corpus, running_words: int, args, work: Path) -> dict:
    import jax

    from ptm_jax.config import MeshConfig
    from ptm_jax.data.pretraining.causal_lm import PackedStream
    from ptm_jax.families.fasttext import FAMILY
    from ptm_jax.families.word2vec import steps_for_epochs
    from ptm_jax.parallel.mesh import make_mesh
    from ptm_jax.train.loop import fit

    vocab = corpus.tokenizer
    pass_tokens = PackedStream(corpus.train, vocab.eos_id, seed=0, shuffle=False).pass_tokens
    steps = steps_for_epochs(args.epochs, pass_tokens, args.batch)
    cfg, obj, table_s = build_objective(objective, corpus, args, steps)
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    last = last_step_hook(steps)
    t0 = time.perf_counter()
    run_dir = work / f"ptm_{objective}_{time.time_ns()}"
    result = fit(obj, cfg.train, mesh, run_dir, hooks=[last])
    secs = time.perf_counter() - t0
    special = set(vocab.special_ids())
    ids = [i for i in range(vocab.vocab_size) if i not in special]
    words = [vocab.id_to_token(i) for i in ids]
    matrix = FAMILY.inspection.subword_vectors(jax.device_get(result.state.params), cfg.model, vocab, words)
    out = {"side": "ptm_jax", "objective": objective, "seconds": secs, "steps": steps,
           "ngram_table_s": table_s, "pair_slots": obj.slots, "unit_slots": obj.units,
           "words_per_sec": running_words * args.epochs / secs,
           "train_seconds": last.at - t0, "train_words_per_sec": running_words * args.epochs / (last.at - t0),
           "steady_words_per_sec": steady_rate(result.stage_dir, args.batch, running_words / pass_tokens)}
    shutil.rmtree(run_dir, ignore_errors=True)  # as gensim's saved model: repeated runs do not fill the disk
    out.update(evaluate(words, matrix, vocab.counts[ids]))
    return out


def gensim_side(objective: str, path: Path, running_words: int, args) -> dict:
    from gensim.models import FastText

    a = args.alpha
    model = FastText(vector_size=args.dim, window=args.window, sample=args.sample, negative=args.negative, hs=0,
                     sg=int(objective == "fasttext_skipgram"), cbow_mean=1, min_count=args.min_count, alpha=a,
                     min_alpha=a * 1e-4, workers=args.workers, seed=args.seed, min_n=args.minn, max_n=args.maxn,
                     bucket=args.bucket, ns_exponent=args.ns_exponent)
    out = {"side": "gensim", "objective": objective, **gensim_timed(model, path, int(args.epochs), running_words)}
    wv = model.wv
    out.update(evaluate(list(wv.index_to_key), wv.vectors, [wv.get_vecattr(w, "count") for w in wv.index_to_key]))
    return out


def profile(objective: str, corpus, args) -> dict:
    """Seconds per step of ptm_jax's parts on real batches (wall and process CPU time): the tf.data example
    generation, the compiled train step by the fused CPU kernel (``model.kernel='auto'``) and by the XLA path
    (``model.kernel='xla'``), interleaved, and the units a trained row uses against its slots."""
    import dataclasses

    import jax
    import numpy as np

    from ptm_jax.config import MeshConfig
    from ptm_jax.families.fasttext import FAMILY
    from ptm_jax.parallel.feed import to_global
    from ptm_jax.parallel.mesh import make_mesh
    from ptm_jax.train.loop import compile_objective

    cfg, obj, _ = build_objective(objective, corpus, args, 1000)
    xla_cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, kernel="xla", updates="batch"))
    xla = FAMILY.pretraining.objectives[objective](xla_cfg, corpus)
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    it = obj.train_batches(0, args.batch, 0, 1)
    t0, c0 = time.perf_counter(), time.process_time()
    batches = [next(it) for _ in range(12)]
    out = {"objective": objective, "batch_words": args.batch, "bucket": args.bucket, "block": obj.block,
           "pair_slots": obj.slots, "unit_slots": obj.units, "longest_word_units": int(obj.subwords.ids.shape[1]),
           "units_used_per_row": float(np.mean([b["unit_weight"].sum() / b["unit_weight"].shape[0]
                                                for b in batches])),
           "dropped_per_batch": float(np.mean([b["dropped"].sum() for b in batches])),
           "data_s": (time.perf_counter() - t0) / len(batches), "data_cpu_s": (time.process_time() - c0) / len(batches)}
    sides = {}
    for name, o, c in (("kernel", obj, cfg), ("xla", xla, xla_cfg)):
        compiled = compile_objective(o, c.train, mesh, None)
        state = compiled.init_fn(jax.random.key(0))
        gb = [to_global(b, mesh, compiled.batch_keys) for b in batches]
        state, m = compiled.train_step(state, gb[0], jax.random.key(0))
        jax.block_until_ready(m)
        sides[name] = [compiled, state, gb]
    for rnd in range(2):
        for name, side in sides.items():
            compiled, _, gb = side
            t0, c0 = time.perf_counter(), time.process_time()
            for b in gb[1:]:
                side[1], m = compiled.train_step(side[1], b, jax.random.key(0))
            jax.block_until_ready(m)
            out.setdefault(f"{name}_step_s", []).append(round((time.perf_counter() - t0) / (len(gb) - 1), 5))
            out.setdefault(f"{name}_step_cpu_s", []).append(round((time.process_time() - c0) / (len(gb) - 1), 5))
    out["words_per_sec_step_only"] = args.batch / min(out["kernel_step_s"])
    return out


def main(argv=None) -> int:
    from ptm_jax.families.fasttext import FastTextConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=["fasttext_skipgram", "fasttext_cbow"], default=None,
                    help="one objective (default: skip-gram, then CBOW)")
    ap.add_argument("--epochs", type=float, default=1)
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--window", type=int, default=5)
    ap.add_argument("--negative", type=int, default=5)
    ap.add_argument("--sample", type=float, default=1e-3, help="gensim's default (fastText's is 1e-4)")
    ap.add_argument("--ns-exponent", type=float, default=0.75, help="gensim's default (fastText's is 0.5)")
    ap.add_argument("--alpha", type=float, default=0.025, help="gensim's default (fastText's is 0.05)")
    ap.add_argument("--min-count", type=int, default=5)
    ap.add_argument("--minn", type=int, default=3)
    ap.add_argument("--maxn", type=int, default=6)
    ap.add_argument("--bucket", type=int, default=2_000_000)
    ap.add_argument("--batch", type=int, default=4096, help="ptm_jax: running words per step")
    ap.add_argument("--cap", type=int, default=FastTextConfig.duplicate_cap,
                    help="ptm_jax: model.duplicate_cap (default: the config's)")
    ap.add_argument("--kernel", choices=["auto", "xla", "cpu"], default="auto",
                    help="ptm_jax: model.kernel (auto: the fused CPU kernel on one CPU device)")
    ap.add_argument("--updates", choices=["batch", "sequential"], default="batch",
                    help="ptm_jax: model.updates (sequential: fastText's order, in the fused CPU kernel)")
    ap.add_argument("--per-pair-negatives", action="store_true",
                    help="ptm_jax skip-gram: data.shared_negatives=false (a draw per pair, as fastText and gensim)")
    ap.add_argument("--steps-per-call", type=int, default=1, help="ptm_jax: train.steps_per_call")
    ap.add_argument("--parts", type=int, default=1,
                    help="ptm_jax: model.sequential_parts (the sequential updates in parts, side by side)")
    ap.add_argument("--workers", type=int, default=2, help="gensim worker threads")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", default="/tmp/fasttext_bench")
    ap.add_argument("--profile", action="store_true", help="only time ptm_jax's step parts")
    ap.add_argument("--skip-gensim", action="store_true")
    ap.add_argument("--skip-ours", action="store_true")
    args = ap.parse_args(argv)
    work = Path(args.work)
    path = prepare_corpus(work)
    running_words = sum(len(line.split()) for line in path.read_text(encoding="utf-8").splitlines())
    corpus = load_corpus(path, work, args.min_count)
    print(json.dumps({"corpus": str(path), "running_words": running_words, "vocab": corpus.tokenizer.vocab_size - 3,
                      "documents": corpus.train.num_docs, "settings": {k: v for k, v in vars(args).items()
                                                                       if k not in ("work",)}}), flush=True)
    for objective in [args.only] if args.only else ["fasttext_skipgram", "fasttext_cbow"]:
        if args.profile:
            print(json.dumps(profile(objective, corpus, args)), flush=True)
            continue
        rows = [] if args.skip_ours else [ours(objective, corpus, running_words, args, work)]
        if rows:
            print(json.dumps(rows[0]), flush=True)
        if not args.skip_gensim:
            rows.append(gensim_side(objective, path, running_words, args))
            print(json.dumps(rows[-1]), flush=True)
        if len(rows) == 2:
            print(json.dumps(speed_ratios(objective, *rows)), flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
