"""`ptm lm-eval MODEL --tasks ...`: a GPT checkpoint scored by EleutherAI's lm-evaluation-harness.

The model class and the call of the harness are ``evaluate/lm_eval_model.py``; here are the handler, its
arguments and the printing of the scores (one line per task and metric, and the whole result as JSON with
``--out``).
"""
from __future__ import annotations

import argparse
import json


def _limit(text: str) -> float | int:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text}: must be > 0 (a count of documents, or a fraction below 1)")
    return int(value) if value >= 1 and value == int(value) else value


def cmd_lm_eval(args: argparse.Namespace) -> int:
    from ptm_jax import fs
    from ptm_jax.errors import ConfigError

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not tasks:
        raise ConfigError("--tasks names no task; pass comma-separated task names, e.g. --tasks lambada_openai")
    if not fs.exists(args.model):
        raise ConfigError(f"{args.model}: model not found; pass a GPT params directory, run directory or Hugging "
                          "Face folder")
    from ptm_jax.evaluate.lm_eval_model import run_tasks
    from lm_eval.utils import handle_non_serializable

    out = run_tasks(args.model, tasks, include_path=args.include_path, limit=args.limit,
                    num_fewshot=args.num_fewshot, batch_size=args.batch_size, max_length=args.max_length,
                    seed=args.seed, log_samples=args.log_samples, builtin_tasks=not args.only_include_path)
    for task, metrics in out["results"].items():
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and "stderr" not in key and key != "sample_len":
                print(f"{task}\t{key.split(',')[0]}\t{value:.6g}")
    if args.out:
        keep = {k: out[k] for k in ("results", "n-samples", "versions", "configs", "samples") if k in out}
        keep["model"] = str(args.model)
        fs.write_text_atomic(args.out, json.dumps(keep, indent=2, default=handle_non_serializable,
                                                  ensure_ascii=False))
    return 0


def register(subparsers) -> None:
    """Adds `lm-eval` with ``handler=cmd_lm_eval``."""
    text = "score a GPT checkpoint on lm-evaluation-harness tasks (lm_eval's model class 'ptm')"
    p = subparsers.add_parser("lm-eval", help=text, description=text + ". Needs lm_eval installed (`pip install "
                              "--no-deps --target .venv/lm_eval -r requirements/lm_eval.lock`).")
    p.add_argument("model", help="GPT params directory, run directory or Hugging Face folder")
    p.add_argument("--tasks", required=True, help="comma-separated task (or group) names")
    p.add_argument("--include-path", default=None, help="folder of task YAML files (local tasks)")
    p.add_argument("--only-include-path", action="store_true", help="index only the --include-path tasks, not the "
                   "harness's own (saves about 15 CPU-seconds)")
    p.add_argument("--limit", type=_limit, default=None, help="only the first N documents of each task (N < 1: "
                   "that fraction)")
    p.add_argument("--num-fewshot", type=int, default=None, help="examples in each prompt (default: the task's)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-length", type=int, default=None, help="context (default: the model's)")
    p.add_argument("--seed", type=int, default=0, help="few-shot sampling and do_sample draws")
    p.add_argument("--log-samples", action="store_true", help="also keep every document's requests and answers "
                   "(in --out)")
    p.add_argument("--out", default=None, help="write the harness's results (and samples) to this JSON file")
    p.set_defaults(handler=cmd_lm_eval)
