"""`ptm`: the command line. Every subcommand takes a preset (-c) and ``section.key=value`` overrides.

  ptm run                          pretrain (then finetune, evaluate) on the embedded offline corpus
  ptm pretrain -c bert_small data.corpus='../shared/data/corpus/gutenberg/*.txt' train.steps=2000
  ptm data -c bert_small           build the tokenizer and tokenized cache only, print corpus figures
  ptm config -c bert_base train.batch_size=256    print the resolved config
  ptm presets                      list the presets in configs/
  ptm import-hf DIR --out OUT      a local Hugging Face BERT folder -> a ptm_jax params directory
  ptm export RUN --format hf --out OUT    a run or params directory -> transformers-loadable folder
  ptm embed MODEL texts.txt --pooling mean     sentence embeddings (file or - for stdin)
  ptm predict MODEL texts.txt      a finetuned classifier on lines of text

Errors in the user's input (config, files) are printed as one message and exit with status 2.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any, Callable

from ptm_jax.errors import PtmError

DEFAULT_PRESET = {"run": "bert_small", "pretrain": "bert_small", "data": "bert_small", "config": "bert_small"}


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("-c", "--config", default=None,
                   help="preset name in configs/ or a .toml path (default: %(default)s -> per command)")
    p.add_argument("overrides", nargs="*", metavar="section.key=value",
                   help="config overrides, e.g. train.steps=100 model.num_layers=2 output_dir=runs/x")
    p.add_argument("--output-dir", default=None, help="shorthand for output_dir=...")
    g = p.add_argument_group("multi-host (auto-detected on Cloud TPU pods and SLURM)")
    g.add_argument("--coordinator", default=None, help="HOST:PORT of process 0")
    g.add_argument("--num-processes", type=int, default=None)
    g.add_argument("--process-id", type=int, default=None)


def _load(args: argparse.Namespace):
    from ptm_jax.config import load_config

    overrides = list(args.overrides)
    if args.output_dir:
        overrides.append(f"output_dir={args.output_dir!r}")
    return load_config(args.config or DEFAULT_PRESET.get(args.command, "bert_small"), overrides)


def _start(args: argparse.Namespace) -> None:
    from ptm_jax.parallel.distributed import initialize

    initialize(args.coordinator, args.num_processes, args.process_id)


def cmd_presets(args) -> int:
    from ptm_jax.config import configs_dir, list_presets

    print(f"presets in {configs_dir()}:")
    for name in list_presets():
        print(f"  {name}")
    return 0


def cmd_config(args) -> int:
    from ptm_jax.config import to_dict

    print(json.dumps(to_dict(_load(args)), indent=2))
    return 0


def cmd_data(args) -> int:
    cfg = _load(args)
    _start(args)
    from ptm_jax.train.stages import prepare_corpus, write_config

    write_config(cfg)
    corpus = prepare_corpus(cfg)
    print(json.dumps({"documents": corpus.cache.num_docs, "sentences": corpus.cache.num_sentences,
                      "tokens": corpus.cache.num_tokens, "vocab_size": corpus.tokenizer.vocab_size,
                      "train_documents": corpus.train.num_docs,
                      "eval_documents": corpus.eval.num_docs if corpus.eval else 0}, indent=2))
    return 0


def _report_pretrain(summary: dict[str, Any]) -> None:
    ev, base = summary.get("eval", {}), summary.get("baseline", {})
    print(f"pretrain: step {summary['step']}"
          + (" (stopped early: checkpoint saved; run the same command to resume)" if summary.get("preempted") else ""))
    if "mlm_accuracy" in ev:
        line = f"  held-out MLM accuracy {ev['mlm_accuracy']:.4f}, MLM loss {ev.get('mlm_loss', float('nan')):.4f}"
        if "majority_accuracy" in base:
            line += f"  |  always predicting the most frequent token: {base['majority_accuracy']:.4f}"
        print(line)
    if "nsp_accuracy" in ev:
        print(f"  held-out NSP accuracy {ev['nsp_accuracy']:.4f} (chance 0.5)")


def cmd_pretrain(args) -> int:
    cfg = _load(args)
    _start(args)
    from ptm_jax.train.stages import pretrain

    _report_pretrain(pretrain(cfg, stop_after=args.stop_after))
    return 0


def cmd_run(args) -> int:
    cfg = _load(args)
    _start(args)
    from ptm_jax.train.stages import run

    summary = run(cfg)
    _report_pretrain(summary["pretrain"])
    print(f"outputs in {cfg.output_dir} (summary.json, pretrain/metrics.jsonl, pretrain/curves.png, tb/)")
    return 0


COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], int], str]] = {
    "run": (cmd_run, "the main job: pretrain -> finetune -> evaluate (embedded offline corpus by default)"),
    "pretrain": (cmd_pretrain, "pretrain a model; resumes from the latest checkpoint in output_dir"),
    "data": (cmd_data, "train/load the tokenizer and build the tokenized corpus cache"),
    "config": (cmd_config, "print the resolved config"),
    "presets": (cmd_presets, "list the presets"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ptm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name != "presets":
            _add_common(p)
        if name == "pretrain":
            p.add_argument("--stop-after", type=int, default=None,
                           help="stop (with a checkpoint) after this many steps of this invocation")
    from ptm_jax.export.commands import register as register_export

    register_export(sub)  # import-hf, export, embed, predict
    return parser


def _quiet_tensorflow() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("USE_TF", "0")


def main(argv: list[str] | None = None) -> int:
    _quiet_tensorflow()
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("absl", "jax._src", "orbax", "tensorflow"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        handler = getattr(args, "handler", None) or COMMANDS[args.command][0]
        return handler(args)
    except PtmError as e:
        print(f"ptm {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"ptm {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
