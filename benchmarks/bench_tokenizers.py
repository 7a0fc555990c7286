"""Tokenizer throughput inside tf.data (WordPiece, SentencePiece unigram and BPE) and token-cache build rate.

Reads the corpus with ptm_jax.data.corpus (format auto), trains each tokenizer on it, then times a full pass
of ``Dataset.from_tensor_slices(sentences).batch(B).map(tok.tf_encode)`` (one py_function per batch), the
same batches through ``encode_batch_flat`` without tf.data, and ``build_cache`` over the corpus.

    python benchmarks/bench_tokenizers.py --corpus ../shared/data/corpus/gutenberg
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--corpus", default=str(REPO.parent / "shared/data/corpus/gutenberg"),
                    help="data.corpus spec: comma-separated files/globs/directories")
    ap.add_argument("--vocab-size", type=int, default=8000, help="vocabulary size of every trained tokenizer")
    ap.add_argument("--batch-size", type=int, default=1024, help="sentences per tf_encode call")
    ap.add_argument("--parallel-calls", default="1,auto",
                    help="comma-separated num_parallel_calls values for the tf.data map ('auto' = AUTOTUNE)")
    ap.add_argument("--sp-input-sentences", type=int, default=300_000,
                    help="SentencePiece trainer sample (input_sentence_size)")
    ap.add_argument("--kinds", default="wordpiece,unigram,bpe", help="tokenizers to measure")
    ap.add_argument("--workdir", default="", help="where tokenizers and the cache go (default: a temp dir)")
    return ap.parse_args(argv)


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def tf_pass(tok, sentences, batch_size: int, parallel) -> tuple[int, float]:
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices(sentences).batch(batch_size)
    ds = ds.map(tok.tf_encode, num_parallel_calls=parallel, deterministic=True).prefetch(2)
    start = time.perf_counter()
    n = sum(int(tf.size(r.flat_values)) for r in ds)
    return n, time.perf_counter() - start


def direct_pass(tok, sentences, batch_size: int) -> tuple[int, float]:
    start = time.perf_counter()
    n = sum(tok.encode_batch_flat(sentences[i: i + batch_size])[0].size
            for i in range(0, len(sentences), batch_size))
    return n, time.perf_counter() - start


def main(argv=None) -> None:
    args = parse_args(argv)
    import tensorflow as tf

    from ptm_jax.config import DataConfig
    from ptm_jax.data.cache import build_cache
    from ptm_jax.data.chunks import iter_documents
    from ptm_jax.data.corpus import resolve_files
    from ptm_jax.data.tokenizers import train_sentencepiece, train_wordpiece

    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench_tok_"))
    cfg = DataConfig(corpus=args.corpus)
    files = resolve_files(cfg.corpus)
    size_mb = sum(f.stat().st_size for f in files) / 1e6
    docs, read_s = timed(lambda: list(iter_documents(cfg)))
    sentences = [s for d in docs for s in d]
    print(f"corpus: {len(files)} files, {size_mb:.1f} MB, {len(docs)} documents, {len(sentences)} sentences; "
          f"read+split {read_s:.2f}s ({size_mb / read_s:.1f} MB/s)")
    print(f"cpus: {os.cpu_count()}, load average: {os.getloadavg()[0]:.2f}, batch {args.batch_size}")

    trainers = {
        "wordpiece": lambda: train_wordpiece(iter(sentences), args.vocab_size, work / "wordpiece"),
        "unigram": lambda: train_sentencepiece(iter(sentences), args.vocab_size, work / "unigram", "unigram",
                                               input_sentence_size=args.sp_input_sentences),
        "bpe": lambda: train_sentencepiece(iter(sentences), args.vocab_size, work / "bpe", "bpe",
                                           input_sentence_size=args.sp_input_sentences),
    }
    parallel = [tf.data.AUTOTUNE if p.strip() == "auto" else int(p) for p in args.parallel_calls.split(",")]
    rows = []
    tokenizers = {}
    for kind in args.kinds.split(","):
        tok, train_s = timed(trainers[kind])
        tokenizers[kind] = tok
        tf_pass(tok, sentences[: 4 * args.batch_size], args.batch_size, 1)  # warm-up (graph tracing)
        n, s = direct_pass(tok, sentences, args.batch_size)
        rows.append((kind, "encode_batch (no tf.data)", train_s, n, s))
        for p in parallel:
            n, s = tf_pass(tok, sentences, args.batch_size, p)
            rows.append((kind, f"tf.data map(tf_encode), parallel={'auto' if p == tf.data.AUTOTUNE else p}",
                         None, n, s))

    print(f"\n{'tokenizer':<10} {'path':<42} {'train s':>8} {'tokens':>10} {'tokens/s':>11} {'sent/s':>9}")
    for kind, path, train_s, n, s in rows:
        train = f"{train_s:8.1f}" if train_s is not None else " " * 8
        print(f"{kind:<10} {path:<42} {train} {n:>10,} {n / s:>11,.0f} {len(sentences) / s:>9,.0f}")

    tok = tokenizers.get("wordpiece") or next(iter(tokenizers.values()))
    cache_dir = work / "cache"
    shutil.rmtree(cache_dir, ignore_errors=True)
    cache, build_s = timed(lambda: build_cache(lambda: iter_documents(cfg), tok, cache_dir, fingerprint="bench"))
    from ptm_jax.data.cache import TokenCache

    _, open_s = timed(lambda: TokenCache.open(cache_dir))
    print(f"\ncache build ({tok.kind}, read + split + tokenize + write): {cache.num_docs} docs, "
          f"{cache.num_sentences:,} sentences, {cache.num_tokens:,} tokens in {build_s:.2f}s = "
          f"{cache.num_tokens / build_s:,.0f} tokens/s, {size_mb / build_s:.2f} MB/s; reopen {open_s * 1e3:.1f} ms")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
