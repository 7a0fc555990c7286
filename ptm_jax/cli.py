"""`ptm`: the command line. Every subcommand takes a preset (-c) and ``section.key=value`` overrides.

  ptm run                          pretrain -> finetune -> evaluate on the embedded offline corpus and task
  ptm run --glue-dir ../shared/data/glue --task sst2      ... finetuning on real GLUE data
  ptm finetune --init runs/x --task mrpc --glue-dir ../shared/data/glue output_dir=runs/x
  ptm eval --model runs/x/finetune-mrpc/best --task mrpc --glue-dir ../shared/data/glue --split test
  ptm pretrain -c bert_small data.corpus='../shared/data/corpus/gutenberg/*.txt' train.steps=2000
  ptm data -c bert_small           build the tokenizer and tokenized cache only, print corpus figures
  ptm config -c bert_base train.batch_size=256    print the resolved config
  ptm presets                      list the presets in configs/
  ptm families                     what each model family gives: objectives, finetuning, interop, inspection, bench
  ptm import-hf DIR --out OUT      a local Hugging Face BERT, GPT-2 or XLNet folder -> a params directory
  ptm export RUN --format hf --out OUT    a run or params directory -> transformers-loadable folder
  ptm embed MODEL texts.txt --pooling mean     sentence embeddings (file or - for stdin)
  ptm embed MODEL sentences.txt --layers all --mix average --out f.hdf5    per-word contextual features (ELMo, BERT..)
  ptm import bilm-tf options.json weights.hdf5 --out OUT    other toolkits' weights -> a params directory
  ptm predict MODEL texts.txt      a finetuned classifier on lines of text
  ptm bench -c bert_base --steps 10    compile time, step time, tokens/s, MFU, memory (JSON too)
  ptm compile -c bert_large --mesh 2,2,2    ahead-of-time per-device memory, without running
  ptm pretrain -c gpt_small data.corpus='../shared/data/corpus/gutenberg/[0-9]*.txt'   GPT-2-style causal LM
  ptm pretrain -c xlnet_tiny       XLNet permutation LM (two-stream attention) on the embedded corpus
  ptm generate MODEL --prompt "Once upon" --top-p 0.9     KV-cached sampling from a GPT checkpoint
  ptm perplexity MODEL ../shared/data/corpus/wikitext-2-tokenized/test.txt    held-out perplexity
  ptm lm-eval MODEL --tasks my_task --include-path tasks/    a GPT on lm-evaluation-harness tasks (lm_eval)
  ptm pretrain -c word2vec_sg       word2vec skip-gram (also word2vec_cbow, glove, fasttext_sg, nnlm_small)
  ptm pretrain -c elmo_small        ELMo biLM (char-CNN + LSTMP); ulmfit_tiny: AWD-LSTM, `ptm run` does all 3 stages
  ptm neighbors MODEL king queen   static word vectors: also analogy, eval-vectors, vector-map
  ptm finetune --job features --task sst2 finetune.init=MODEL    a TextCNN (features.head) on word features
  ptm finetune --job mtdnn mtdnn.tasks=[rte,mrpc,stsb] --init MODEL   MT-DNN multi-task, best model per task
  ptm probe MODEL --task pos,chunk,ner     linear probes on every layer (also attention, context-neighbors)
  ptm compare -c compare_tiny && ptm report runs/compare_tiny    the families side by side, one HTML page

Errors in the user's input (config, files) are printed as one message and exit with status 2.
"""
from __future__ import annotations

import argparse
import faulthandler
import importlib
import io
import logging
import signal
import sys

from ptm_jax.errors import PtmError

GROUPS = ("stages", "export", "bench", "generate", "perplexity", "lmeval", "vectors", "inspection", "compare")
"""The modules of ``ptm_jax/commands/``, each registering its subcommands (``register(subparsers)``), in the
order they are listed by ``ptm --help``."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ptm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also show the libraries' start-up and INFO logs (TensorFlow, absl, orbax, JAX); "
                        "same as PTM_VERBOSE=1")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:  # imported here, after main() has quietened the libraries' start-up logs
        importlib.import_module(f"ptm_jax.commands.{group}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from ptm_jax import logs

    verbose = logs.wants_verbose(sys.argv[1:] if argv is None else argv)
    logs.quiet_startup(verbose)  # before anything imports TensorFlow or JAX
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # overrides may come after options (`--task sst2 train.steps=10`): argparse leaves them over
    stray = [a for a in extra if a.startswith("-") or "=" not in a or not hasattr(args, "overrides")]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if extra:
        args.overrides = list(args.overrides) + extra
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("absl", "jax._src", "orbax", "tensorflow", "fsspec", "gcsfs"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if verbose:
        logs.verbose_libraries()
    # SIGUSR1 writes every thread's Python stack to stderr (the run's log): launch/tpu_pod.sh's hang check asks
    try:
        faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)
    except (io.UnsupportedOperation, AttributeError, ValueError):  # sys.stderr is no file (ptm called in-process)
        faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True, chain=False)
    if args.command in ("run", "pretrain", "finetune"):
        from ptm_jax.train.loop import install_startup_sigterm_handler

        install_startup_sigterm_handler()
    try:
        return args.handler(args)
    except PtmError as e:
        print(f"ptm {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"ptm {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
