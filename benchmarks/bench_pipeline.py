"""Throughput of the BERT MLM+NSP tf.data pipeline (ptm_jax.families.bert.mlm_nsp_data).

Builds an in-memory ArraySource from text files (one sentence per line, blank line between documents, lower-cased
whitespace words mapped to ids in order of first appearance), streams ``mlm_nsp_dataset`` and reports examples/s
in total and per CPU core. Run from the repository root:

    python benchmarks/bench_pipeline.py --batches 200
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402


def whitespace_source(paths: list[str], max_tokens: int, books: bool = False):
    """Sentences = lines, ids = lower-cased words (first seen first); documents = blank-line-separated blocks
    (the reference input format), or whole files when ``books`` (long documents, so examples fill the length)."""
    from ptm_jax.data.pretraining.source import ArraySource

    vocab: dict[str, int] = {}
    docs, cur, total = [], [], 0
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                words = line.lower().split()
                if not words:
                    if cur and not books:
                        docs.append(cur)
                        cur = []
                    continue
                cur.append(np.fromiter((vocab.setdefault(w, len(vocab) + 5) for w in words), np.int32, len(words)))
                total += len(words)
                if max_tokens and total >= max_tokens:
                    break
        if cur:
            docs.append(cur)
            cur = []
        if max_tokens and total >= max_tokens:
            break
    return ArraySource(docs), len(vocab) + 5


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=str(REPO.parent / "shared/data/corpus/gutenberg/*.txt"),
                    help="glob of text files (default: ../shared/data/corpus/gutenberg/*.txt)")
    ap.add_argument("--max-tokens", type=int, default=0, help="stop reading after this many tokens (0: all)")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--max-predictions", type=int, default=20)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--batches", type=int, default=200, help="timed batches")
    ap.add_argument("--warmup", type=int, default=20, help="untimed batches first")
    ap.add_argument("--whole-word", action="store_true", help="whole-word masking (every 3rd id continues)")
    ap.add_argument("--books", action="store_true", help="one document per file instead of per blank-line block")
    ap.add_argument("--threads", type=int, default=0, help="TF intra/inter-op threads (0: available cores)")
    args = ap.parse_args(argv)

    import tensorflow as tf

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threads = args.threads or cores
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)

    from ptm_jax.families.bert.config import BertDataConfig
    from ptm_jax.data.pretraining.source import SpecialIds
    from ptm_jax.families.bert.mlm_nsp_data import mlm_nsp_dataset

    paths = sorted(glob.glob(args.corpus))
    if not paths:
        sys.exit(f"no files match {args.corpus}")
    t0 = time.perf_counter()
    source, vocab_size = whitespace_source(paths, args.max_tokens, args.books)
    print(f"corpus: {len(paths)} files, {source.num_docs} documents, {source.num_tokens} tokens, "
          f"vocab {vocab_size} ({time.perf_counter() - t0:.1f} s to build)")
    continuation = (np.arange(vocab_size) % 3 == 0) if args.whole_word else None
    special = SpecialIds(pad=0, cls=1, sep=2, mask=3, vocab_size=vocab_size, continuation=continuation)
    cfg = BertDataConfig(max_seq_length=args.seq_len, max_predictions_per_seq=args.max_predictions,
                     whole_word_masking=args.whole_word)
    ds = mlm_nsp_dataset(source, special, cfg, seed=12345, start_index=0, global_batch=args.batch)
    it = iter(ds)
    for _ in range(args.warmup):
        next(it)
    t0, c0 = time.perf_counter(), time.process_time()
    real_tokens = 0
    for _ in range(args.batches):
        batch = next(it)
        real_tokens += int(batch["input_mask"].numpy().sum())
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    n = args.batches * args.batch
    rate = n / dt
    print(f"L={args.seq_len} P={args.max_predictions} batch={args.batch} whole_word={args.whole_word}: "
          f"{args.batches} batches in {dt:.2f} s wall, {cpu:.2f} CPU-s (all threads of this process), "
          f"mean {real_tokens / n:.1f} real tokens per example")
    print(f"examples/s: {rate:,.0f} total, {rate / cores:,.0f} per CPU core (wall) "
          f"(cores available {cores}, os.cpu_count() {os.cpu_count()}, TF threads {threads})")
    print(f"examples per CPU-second: {n / cpu:,.0f} (robust to other load on the machine; "
          f"load average now {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
