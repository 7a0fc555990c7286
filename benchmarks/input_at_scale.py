"""Input at pod scale: what one host's training stream costs when it is process p of P.

BERT MLM+NSP at seq 128 (masking included) from a WordPiece token cache of a text corpus (default: the Project
Gutenberg books in ../shared/data/corpus/gutenberg), global batch 1,024 (``--batch``). For P = 1, 8, 64, 256
and two row layouts it opens the stream that process ``p`` (default 0) runs and prints

* local examples per CPU-second of this process (all its threads: the rate per core) and per wall-second, over
  ``--seconds`` of batches after the first;
* the time from opening the stream to its first batch at global example 0, 10^6 and 4x10^8 (``--starts``, each
  rounded down to a multiple of the global batch, as the loop's data cursor is).

Layouts: ``host`` (a GPU cluster: process p holds rows [p*B/P, (p+1)*B/P), one share of the objective's
``train_batches``) and ``interleaved`` (a TPU-like mesh: the host's 4 devices sit in two pairs half a batch
apart, so its rows are two blocks, read as the loop reads them, ``parallel/feed.py``'s ``rows_batches``: one
stream of exactly those rows for an objective that ``ReadsRows`` (BERT, ERNIE 1.0, GPT, XLNet, NNLM), else one
stream per block; either way the exact row-to-example mapping) and ``interleaved-one`` (the same rows fed by one
stream of the host's share, ``feed.local_batches(exact=False)``).
Run from the repository root:

    python benchmarks/input_at_scale.py --processes 1 8 64 256 --starts 0 1000000 400000000

``--max-first-batch S``: a start whose first batch is predicted to take longer than S seconds (the time at
example 0 plus the replay rate measured at a smaller start, where that grew by more than a second) is not run;
its extrapolated time is printed instead, marked "est".
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402


def interleaved_rows(p: int, count: int, batch: int, devices: int = 4) -> np.ndarray:
    """Rows of process ``p`` of ``count`` on a TPU-like mesh: its ``devices`` devices are two pairs, the first at
    device positions [2p, 2p+2), the second half a batch later (for count=1 the rows are one block)."""
    per_device = batch // (count * devices)
    half = count * devices // 2
    positions = [2 * p, 2 * p + 1, half + 2 * p, half + 2 * p + 1]
    return np.concatenate([np.arange(d * per_device, (d + 1) * per_device) for d in sorted(positions)])


def open_stream(objective, layout: str, start: int, batch: int, p: int, count: int):
    if layout == "host":
        return objective.train_batches(start, batch, p, count)
    from ptm_jax.objectives.base import ReadsRows
    from ptm_jax.parallel import feed

    rows = interleaved_rows(p, count, batch)
    share = (p, count) if layout == "interleaved-one" else None
    # as the loop does: one stream of the host's rows where the objective reads any rows, else one per block
    open_rows = ((lambda r: objective.train_row_batches(start, batch, r))
                 if isinstance(objective, ReadsRows) else None)
    return feed.rows_batches(lambda i, n: objective.train_batches(start, batch, i, n), rows, batch, share=share,
                             open_rows=open_rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=str(REPO.parent / "shared/data/corpus/gutenberg/*.txt"))
    ap.add_argument("--out", default="/tmp/ptm_input_at_scale", help="run folder (tokenizer and token cache)")
    ap.add_argument("--batch", type=int, default=1024, help="global batch")
    ap.add_argument("--processes", type=int, nargs="+", default=[1, 8, 64, 256])
    ap.add_argument("--layouts", nargs="+", default=["host", "interleaved", "interleaved-one"],
                    choices=["host", "interleaved", "interleaved-one"])
    ap.add_argument("--process", type=int, default=0, help="which process p of P to run")
    ap.add_argument("--starts", type=int, nargs="+", default=[0, 1_000_000, 400_000_000])
    ap.add_argument("--seconds", type=float, default=8.0, help="timed stream per (P, layout)")
    ap.add_argument("--max-first-batch", type=float, default=120.0)
    ap.add_argument("--preset", default="bert_small",
                    help="another family's preset (gpt_small, xlnet_small, ...): its objective's stream, same measures")
    ap.add_argument("overrides", nargs="*", help="more config overrides, key=value")
    args = ap.parse_args(argv)

    from ptm_jax.config_loading import load_config
    from ptm_jax.objectives.registry import build_objective
    from ptm_jax.train.stages import prepare_corpus

    bert = ["data.max_seq_length=128", "data.max_predictions_per_seq=20"] if args.preset == "bert_small" else []
    cfg = load_config(args.preset, [f"data.corpus={args.corpus}", f"output_dir={args.out}", *bert,
                                    *args.overrides])
    t0 = time.perf_counter()
    corpus = prepare_corpus(cfg)
    print(f"corpus: {corpus.cache.num_docs} documents, {corpus.cache.num_tokens:,} tokens, "
          f"{corpus.train.num_docs} for training; prepare_corpus {time.perf_counter() - t0:.1f} s")
    objective = build_objective(cfg, corpus)
    print(f"{args.preset} ({cfg.objective}), seq {cfg.data.max_seq_length}, global batch {args.batch}, "
          f"process {args.process} of P; "
          f"cpu count {os.cpu_count()}, load {os.getloadavg()[0]:.1f}")

    for count in args.processes:
        for layout in args.layouts:
            rows = args.batch // count
            p = min(args.process, count - 1)
            it = open_stream(objective, layout, 0, args.batch, p, count)
            first = next(it)
            if "example_id" in first:
                assert len(first["example_id"]) == rows, (len(first["example_id"]), rows)
            n, t0, c0 = 0, time.perf_counter(), time.process_time()
            while time.perf_counter() - t0 < args.seconds or n < 3:
                next(it)
                n += 1
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            getattr(it, "close", lambda: None)()
            print(f"P={count:4d} {layout:15s} rows {rows:5d}: {n * rows / cpu:10,.0f} local examples per CPU-s, "
                  f"{n * rows / wall:10,.0f} per wall-s ({n} batches, {wall:.1f} s)")
    for count in args.processes:
        for layout in args.layouts:
            p = min(args.process, count - 1)
            times, slope, t_zero = [], 0.0, 0.0  # slope: seconds per example replayed before the first batch
            for start in (s // args.batch * args.batch for s in args.starts):
                if start and t_zero + slope * start > args.max_first_batch:
                    times.append(f"{start:,}: {t_zero + slope * start:8.1f} s est")
                    continue
                t0 = time.perf_counter()
                it = open_stream(objective, layout, start, args.batch, p, count)
                b = next(it)
                dt = time.perf_counter() - t0
                assert "example_id" not in b or int(b["example_id"].min()) >= start
                getattr(it, "close", lambda: None)()
                if start == 0:
                    t_zero = dt
                elif dt - t_zero > 1.0:
                    slope = (dt - t_zero) / start
                times.append(f"{start:,}: {dt:8.2f} s")
            print(f"first batch P={count:4d} {layout:15s} " + " | ".join(times))


if __name__ == "__main__":
    main()
