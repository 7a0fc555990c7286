"""Throughput of the XLNet permutation-LM stream (ptm_jax.families.xlnet.plm_data).

Tokenizes Project Gutenberg books with a SentencePiece unigram model trained on them (in a temporary
directory), holds them in an in-memory ArraySource (a document = up to 40 sentences of a book) and reports
examples/s (wall clock, and per CPU-second, which a busy shared machine distorts less) of the numpy batch
builder alone (one thread) and of ``plm_dataset`` through tf.data, for XLNet's two shapes:
L=128 (P=20, reuse 64, perm 32) and L=512 (P=85, reuse 256, perm 256), both with bi_data. Run from the
repository root:

    python benchmarks/bench_plm_stream.py --batches 30
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402

SHAPES = {128: (20, 64, 32), 512: (85, 256, 256)}   # seq_len: (num_predict, reuse_len, perm_size)


def sentencepiece_source(paths: list[str], vocab_size: int, max_tokens: int):
    from ptm_jax.data.corpus import read_documents
    from ptm_jax.data.pretraining.source import ArraySource, SpecialIds
    from ptm_jax.data.tokenizers import train_sentencepiece

    docs = [d for p in paths for d in read_documents(Path(p), doc_max_sentences=40)]
    with tempfile.TemporaryDirectory() as tmp:
        sp = train_sentencepiece((s for d in docs for s in d), vocab_size, tmp, input_sentence_size=50_000)
    out, total = [], 0
    for d in docs:
        sents = [np.asarray(x, np.int32) for x in sp.encode_batch(d) if x]
        if sents:
            out.append(sents)
            total += sum(s.size for s in sents)
        if max_tokens and total >= max_tokens:
            break
    special = SpecialIds(sp.pad_id, sp.cls_id, sp.sep_id, sp.mask_id, sp.vocab_size,
                         continuation=sp.continuation_mask())
    return ArraySource(out), special


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=str(REPO.parent / "shared/data/corpus/gutenberg/*.txt"),
                    help="glob of text files (default: ../shared/data/corpus/gutenberg/*.txt)")
    ap.add_argument("--max-tokens", type=int, default=1_000_000, help="stop tokenizing after this many (0: all)")
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--batches", type=int, default=30, help="timed batches per measurement")
    ap.add_argument("--global-batch", type=int, default=32)
    ap.add_argument("--seq-lens", default="128,512")
    args = ap.parse_args(argv)

    from ptm_jax.families.xlnet.config import XlnetDataConfig
    from ptm_jax.families.xlnet.plm_data import PlmBatchBuilder, plm_dataset

    paths = sorted(glob.glob(args.corpus))
    if not paths:
        sys.exit(f"no files match {args.corpus}")
    t0 = time.perf_counter()
    source, special = sentencepiece_source(paths, args.vocab_size, args.max_tokens)
    print(f"corpus: {source.num_docs} documents, {source.num_tokens} tokens, vocab {special.vocab_size} "
          f"(prepared in {time.perf_counter() - t0:.1f} s); cpu cores: {os.cpu_count()}")
    print("command: python benchmarks/bench_plm_stream.py " + " ".join(sys.argv[1:] if argv is None else argv))
    g = args.global_batch
    for length in map(int, args.seq_lens.split(",")):
        p, reuse, perm = SHAPES[length]
        cfg = XlnetDataConfig(max_seq_length=length, max_predictions_per_seq=p, reuse_len=reuse, perm_size=perm,
                         bi_data=True)
        builder = PlmBatchBuilder(source, special, cfg, seed=1, global_batch=g)
        builder.local_batch(0, 0, 1)
        wall, cpu = time.perf_counter(), time.process_time()
        for s in range(1, args.batches + 1):
            builder.local_batch(s, 0, 1)
        n = args.batches * g
        numpy_wall, numpy_cpu = n / (time.perf_counter() - wall), n / (time.process_time() - cpu)
        ds = plm_dataset(source, special, cfg, seed=1, start_index=0, global_batch=g)
        it = ds.as_numpy_iterator()
        list(islice(it, 2))
        wall, cpu = time.perf_counter(), time.process_time()
        list(islice(it, args.batches))
        tf_wall, tf_cpu = n / (time.perf_counter() - wall), n / (time.process_time() - cpu)
        print(f"L={length} P={p} reuse={reuse} perm={perm} bi_data global_batch={g}: numpy builder "
              f"{numpy_wall:,.0f} examples/s wall, {numpy_cpu:,.0f} per CPU-second; tf.data {tf_wall:,.0f} "
              f"examples/s wall, {tf_cpu:,.0f} per CPU-second (all threads)")

if __name__ == "__main__":
    main()
