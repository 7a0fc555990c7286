"""`ptm run | pretrain | finetune | eval | data | config | presets | families`: the training stages and configs.

The stages are ``train/stages.py``, ``train/finetune.py`` and ``train/evaluation.py``; here are the handlers (each
returns an exit code and raises ``PtmError`` subclasses for user errors), their common arguments (a preset,
``section.key=value`` overrides, multi-host options) and the printing of the summaries.
"""
from __future__ import annotations

import argparse
import json
from typing import Any, Callable

DEFAULT_PRESET = {"run": "bert_small", "pretrain": "bert_small", "data": "bert_small", "config": "bert_small",
                  "finetune": "bert_small", "eval": "bert_small"}


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("-c", "--config", default=None,
                   help="preset name in configs/ or a .toml path (default: %(default)s -> per command)")
    p.add_argument("overrides", nargs="*", metavar="section.key=value",
                   help="config overrides, e.g. train.steps=100 model.num_layers=2 output_dir=runs/x")
    p.add_argument("--output-dir", default=None, help="shorthand for output_dir=...")
    g = p.add_argument_group("multi-host (auto-detected on Cloud TPU VMs, srun steps and mpirun; docs/scaling.md)")
    g.add_argument("--coordinator", default=None, help="HOST:PORT of process 0")
    g.add_argument("--num-processes", type=int, default=None)
    g.add_argument("--process-id", type=int, default=None)


def config_of(args: argparse.Namespace):
    """The RunConfig of a parsed stage command line (preset, overrides, --output-dir); also what
    ``launch/stopped_early.py`` reads output_dir from."""
    from ptm_jax.config_loading import load_config

    overrides = list(args.overrides)
    if args.output_dir:
        overrides.append(f"output_dir={args.output_dir!r}")
    return load_config(args.config or DEFAULT_PRESET.get(args.command, "bert_small"), overrides)


def _start(args: argparse.Namespace, cfg) -> None:
    """Multi-host start-up, then the versions line and the persistent compilation cache (on for multi-host runs)."""
    from ptm_jax import versions
    from ptm_jax.parallel import compile_cache
    from ptm_jax.parallel.distributed import initialize

    initialize(args.coordinator, args.num_processes, args.process_id)
    versions.log_versions()
    compile_cache.enable(cfg.output_dir)


def cmd_presets(args) -> int:
    from ptm_jax.presets import configs_dir, list_presets

    print(f"presets in {configs_dir()}:")
    for name in list_presets():
        print(f"  {name}")
    return 0


def cmd_config(args) -> int:
    from ptm_jax.config_loading import to_dict

    print(json.dumps(to_dict(config_of(args)), indent=2))
    return 0


def cmd_data(args) -> int:
    cfg = config_of(args)
    _start(args, cfg)
    from ptm_jax.train.stages import prepare_corpus, write_config

    write_config(cfg)
    corpus = prepare_corpus(cfg)
    print(json.dumps({"documents": corpus.cache.num_docs, "sentences": corpus.cache.num_sentences,
                      "tokens": corpus.cache.num_tokens, "vocab_size": corpus.tokenizer.vocab_size,
                      "train_documents": corpus.train.num_docs,
                      "eval_documents": corpus.eval.num_docs if corpus.eval else 0}, indent=2))
    if corpus.languages:
        print(f"languages (data.language_alpha={cfg.data.language_alpha}): share of the tokenizer sample (bytes); "
              "share of the pretraining stream (tokens): corpus p -> smoothed q, realised")
        for lang, r in corpus.languages.items():
            print(f"  {lang:<8} tokenizer sample {r['vocab_sample_share']:.4f}; stream {r['corpus_share']:.4f} -> "
                  f"{r['target_share']:.4f} (realised {r['stream_share']:.4f}, {r['stream_documents']} of "
                  f"{r['documents']} documents drawn)")
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
    if "lm_loss" in ev:  # causal LM (GPT) and permutation LM (XLNet): per predicted token
        line = (f"  held-out LM loss {ev['lm_loss']:.4f} (perplexity {ev.get('perplexity', float('nan')):.1f}), "
                f"next-token accuracy {ev.get('lm_accuracy', float('nan')):.4f}")
        if "unigram_perplexity" in base:
            line += f"  |  unigram model perplexity: {base['unigram_perplexity']:.1f}"
        print(line)


def cmd_pretrain(args) -> int:
    cfg = config_of(args)
    _start(args, cfg)
    from ptm_jax.train.stages import pretrain

    _report_pretrain(pretrain(cfg, stop_after=args.stop_after))
    return 0


def _report_finetune(summary: dict[str, Any], scratch: dict[str, Any] | None = None) -> None:
    """The finetuning stage's figures: the dev metric after the last step (no choice made on dev) and the best
    evaluation (chosen on dev, so optimistic); with ``scratch`` (``finetune.scratch_baseline``) the same network
    finetuned from a random initialisation beside it, and the difference."""
    print(f"finetune [{summary['task']}]: {summary['description']}")
    metric = summary.get("primary_metric", "")
    final = (summary.get("final_eval") or {}).get(metric)
    if isinstance(final, float):
        line = f"  dev {metric} after the last step (step {summary['step']}): {final:.4f}"
        other = (scratch or {}).get("final_eval", {}).get(metric)
        if isinstance(other, float):
            line += (f"  |  the same network from random initialisation, same finetuning: {other:.4f} "
                     f"(pretraining added {final - other:+.4f})")
        print(line)
    best = summary.get("best", {})
    if best.get("metrics"):
        figures = ", ".join(f"{k}={v:.4f}" for k, v in best["metrics"].items() if isinstance(v, float))
        print(f"  best dev evaluation ({metric}, chosen on dev) at step {best['step']}: {figures}")


def _task_overrides(args) -> list[str]:
    extra = []
    if getattr(args, "job", None):
        extra.append(f"finetune.job={args.job!r}")
    if getattr(args, "task", None):
        extra.append(f"finetune.task={args.task!r}")
    if getattr(args, "glue_dir", None):
        extra.append(f"finetune.data_dir={args.glue_dir!r}")
    if getattr(args, "data_dir", None):
        extra.append(f"finetune.data_dir={args.data_dir!r}")
    if getattr(args, "init", None):
        extra.append(f"finetune.init={args.init!r}")
    return extra


def cmd_run(args) -> int:
    args.overrides = list(args.overrides) + _task_overrides(args)
    cfg = config_of(args)
    _start(args, cfg)
    from ptm_jax.train.stages import run

    summary = run(cfg)
    _report_pretrain(summary["pretrain"])
    if "finetune" in summary:
        _report_finetune(summary["finetune"], summary.get("from_scratch"))
    print(f"outputs in {cfg.output_dir} (summary.json, */metrics.jsonl, */curves.png, */tb/)")
    return 0


def cmd_finetune(args) -> int:
    args.overrides = list(args.overrides) + _task_overrides(args)
    cfg = config_of(args)
    _start(args, cfg)
    from ptm_jax.train.finetune import finetune

    _report_finetune(finetune(cfg, stop_after=args.stop_after))
    return 0


def cmd_eval(args) -> int:
    args.overrides = list(args.overrides) + _task_overrides(args)
    cfg = config_of(args)
    _start(args, cfg)
    from ptm_jax.train.evaluation import evaluate_task

    result = evaluate_task(cfg, args.model, split=args.split, out_dir=args.predictions)
    print(json.dumps(result, indent=2))
    return 0


def cmd_families(args) -> int:
    from ptm_jax.families.table import parts_table

    print(parts_table(), end="")
    return 0


COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], int], str]] = {
    "run": (cmd_run, "the main job: pretrain -> finetune -> evaluate (embedded offline corpus by default)"),
    "pretrain": (cmd_pretrain, "pretrain a model; resumes from the latest checkpoint in output_dir"),
    "finetune": (cmd_finetune, "finetune a pretrained/imported model on a task (GLUE, SQuAD, CoNLL, embedded)"),
    "eval": (cmd_eval, "evaluate a finetuned model on a task split and write prediction files"),
    "data": (cmd_data, "train/load the tokenizer and build the tokenized corpus cache"),
    "config": (cmd_config, "print the resolved config"),
    "presets": (cmd_presets, "list the presets"),
    "families": (cmd_families, "the registered model families against the parts of the family contract (Markdown)"),
}


def register(subparsers) -> None:
    """Adds the commands of ``COMMANDS``, each with ``handler=``."""
    for name, (handler, help_text) in COMMANDS.items():
        p = subparsers.add_parser(name, help=help_text, description=help_text)
        if name not in ("presets", "families"):
            _add_common(p)
        if name in ("pretrain", "finetune"):
            p.add_argument("--stop-after", type=int, default=None,
                           help="stop (with a checkpoint) after this many steps of this invocation")
        if name in ("run", "finetune", "eval"):
            p.add_argument("--task", default=None, help="finetune.task: embedded | sst2 | cola | mrpc | stsb | "
                           "qqp | mnli | qnli | rte | wnli | squad | squad_v2 | conll2003 | swag")
            p.add_argument("--job", default=None, help="finetune.job: task (default: one task) | mtdnn (the tasks "
                           "of mtdnn.tasks=[...]) | consert | features (a head over word features) | ulmfit "
                           "(target-task LM, then the classifier)")
            p.add_argument("--glue-dir", default=None, help="finetune.data_dir for GLUE tasks")
            p.add_argument("--data-dir", default=None, help="finetune.data_dir (SQuAD/CoNLL folder, or 'tfds')")
        if name in ("finetune", "eval"):
            p.add_argument("--init", default=None, help="finetune.init: a run dir, params dir or HF folder")
        if name == "eval":
            p.add_argument("--model", required=True, help="a finetuned model: <run>/finetune-TASK/best or a run")
            p.add_argument("--split", default="dev", choices=["dev", "test"])
            p.add_argument("--predictions", default=None, help="folder for prediction files")
        p.set_defaults(handler=handler)
