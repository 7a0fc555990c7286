"""Throughput of the GPT causal-LM tf.data stream (ptm_jax.data.pretraining.causal_lm) over a real token cache.

Trains a byte-level BPE (ptm_jax.data.byte_bpe) on the corpus, tokenizes it once into a TokenCache
(ptm_jax.data.cache.build_cache; reused from --workdir when present), then streams ``causal_lm_dataset`` at each
requested row length and reports examples (rows) per second and tokens per second, wall and per CPU-second.
Run from the repository root:

    python benchmarks/bench_causal_lm_stream.py --seq-lens 128,1024
"""
from __future__ import annotations

import argparse
import os
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
    ap.add_argument("--format", default="auto", help="data.format of the corpus reader")
    ap.add_argument("--vocab-size", type=int, default=8000, help="byte BPE vocabulary (trained on the corpus)")
    ap.add_argument("--seq-lens", default="128,1024", help="comma-separated row lengths L")
    ap.add_argument("--tokens-per-batch", type=int, default=131072,
                    help="global batch = this / L rows (128 rows of 1024, 1024 rows of 128)")
    ap.add_argument("--batches", type=int, default=500, help="timed batches per row length")
    ap.add_argument("--warmup", type=int, default=10, help="untimed batches first")
    ap.add_argument("--process-count", type=int, default=1,
                    help="time process 0's share of each global batch (rows = global batch / this)")
    ap.add_argument("--workdir", default="", help="tokenizer and cache go here and are reused (default: temp)")
    return ap.parse_args(argv)


def build(args) -> tuple[object, object, float, float]:
    from ptm_jax.config import DataConfig
    from ptm_jax.data.byte_bpe import ByteBPETokenizer, train_byte_bpe
    from ptm_jax.data.cache import TokenCache, build_cache
    from ptm_jax.data.chunks import iter_documents
    from ptm_jax.errors import DataError

    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench_clm_"))
    cfg = DataConfig(corpus=args.corpus, format=args.format)
    tok_dir, cache_dir = work / f"byte_bpe-{args.vocab_size}", work / f"cache-{args.vocab_size}"
    t0 = time.perf_counter()
    if (tok_dir / "vocab.json").is_file():
        tok = ByteBPETokenizer(tok_dir / "vocab.json")
    else:
        tok = train_byte_bpe((s for d in iter_documents(cfg) for s in d), args.vocab_size, tok_dir)
    train_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    try:
        cache = TokenCache.open(cache_dir, fingerprint=tok.fingerprint())
    except DataError:
        cache = build_cache(lambda: iter_documents(cfg), tok, cache_dir, fingerprint=tok.fingerprint())
    return tok, cache, train_s, time.perf_counter() - t0


def main(argv=None) -> None:
    args = parse_args(argv)
    import numpy as np

    from ptm_jax.data.pretraining.causal_lm import causal_lm_dataset, doc_token_counts

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    tok, cache, train_s, cache_s = build(args)
    lengths = doc_token_counts(cache)
    print(f"corpus {args.corpus}: {cache.num_docs:,} documents, {cache.num_tokens:,} byte-BPE tokens "
          f"(vocab {tok.vocab_size}, median document {int(np.median(lengths)):,} tokens); tokenizer "
          f"{train_s:.1f} s, cache {cache_s:.1f} s")
    for seq_len in (int(x) for x in args.seq_lens.split(",")):
        global_batch = max(args.tokens_per_batch // seq_len, args.process_count)
        global_batch -= global_batch % args.process_count
        rows = global_batch // args.process_count
        ds = causal_lm_dataset(cache, tok.eos_id, tok.pad_id, seq_len, seed=1234, start_index=0,
                               global_batch=global_batch, process_index=0, process_count=args.process_count)
        it = iter(ds)
        for _ in range(args.warmup):
            next(it)
        t0, c0 = time.perf_counter(), time.process_time()
        docs_seen = 0
        for _ in range(args.batches):
            batch = next(it)
            docs_seen += int(batch["segment_ids"].numpy().max(axis=1).sum())
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        n = args.batches * rows
        print(f"L={seq_len} rows/batch={rows} (global {global_batch}, process 0 of {args.process_count}): "
              f"{n / wall:,.0f} examples/s, {n * seq_len / wall / 1e6:.2f} M tokens/s wall; "
              f"{n / cpu:,.0f} examples per CPU-second; {docs_seen / n:.2f} segments per row "
              f"({args.batches} batches in {wall:.2f} s, {cores} cores, load {os.getloadavg()[0]:.1f})")
    print("command: python benchmarks/bench_causal_lm_stream.py " + " ".join(argv if argv is not None
                                                                             else sys.argv[1:]))


if __name__ == "__main__":
    main()
