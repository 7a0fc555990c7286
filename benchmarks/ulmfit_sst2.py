"""SST-2 accuracy with the ULMFiT recipe against the same classifier trained from scratch on the same budget, and
the ablations with each of discriminative rates, slanted triangular rates and gradual unfreezing switched off.

Stage 1 is a finished general-domain LM run of ``benchmarks/awd_lstm_wikitext2.py`` (``--lm``, its 'awd'
output directory, with the sizes it was trained with). Stage 2 finetunes that LM on the text of SST-2's training
sentences (``--lm-steps``; ``families/ulmfit/pipeline.py lm_finetune``): all 67,349 of them, labels unused, by
default (ULMFiT's target-task LM reads the task's text; ``--lm-text subset``: only the classifier's sentences).
Stage 3 trains the
concat-pooling classifier on ``--train-subset`` SST-2 training sentences for ``--epochs`` epochs and reports
dev accuracy (872 sentences) after the last step (no selection on dev) and the best of the per-epoch evaluations:

- ulmfit: stage 2's LM, discriminative rates (lr / 2.6 per group), STLR (cut_frac 0.1, ratio 32), gradual
  unfreezing (one more group of the five per epoch from the top: the embedding group starts with epoch 5, so a
  4-epoch run never trains it);
- no_discriminative / no_stlr (constant rate) / no_unfreezing: one technique off;
- scratch: the same classifier, schedule (STLR) and budget from a freshly initialised AWD-LSTM (no pretraining),
  every layer trained from the first step at the full rate (a frozen random trunk or rates divided by 2.6 per
  layer would only handicap it).

Classifier dropouts are fastai's ``awd_lstm_clas_config`` times 0.5 (fastai's ``drop_mult`` of its ULMFiT
example). Run from the repository root:

    python benchmarks/ulmfit_sst2.py --lm /tmp/awd_wt2/awd --out /tmp/ulmfit_sst2
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
GLUE = REPO.parent / "shared" / "data" / "glue"
CLAS_DROPOUT = {"output_p": 0.4, "hidden_p": 0.3, "input_p": 0.4, "embed_p": 0.05, "weight_p": 0.5}
VARIANTS = {
    "ulmfit": [],
    "no_discriminative": ["model.discriminative_factor=1.0"],
    "no_stlr": ["train.lr_decay=constant"],
    "no_unfreezing": ["model.gradual_unfreezing=false"],
    "scratch": ["model.discriminative_factor=1.0", "model.gradual_unfreezing=false"],
}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lm", required=True, help="output dir of a finished awd_lstm_wikitext2.py 'awd' run")
    ap.add_argument("--lm-args", default="", help="the awd_lstm_wikitext2.py arguments it was run with")
    ap.add_argument("--lm-steps", type=int, default=60)
    ap.add_argument("--lm-text", choices=("all", "subset"), default="all",
                    help="stage 2's text: all SST-2 training sentences (no labels) or the classifier's subset")
    ap.add_argument("--train-subset", type=int, default=1000)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--drop-mult", type=float, default=0.5)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", default="/tmp/ulmfit_sst2")
    ap.add_argument("--json", default="")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    import awd_lstm_wikitext2 as lm_bench
    import jax

    from ptm_jax import config_loading as config_lib
    from ptm_jax.export.params import load_params, save_params
    from ptm_jax.families.ulmfit import pipeline
    from ptm_jax.families.ulmfit.model import AwdLstmLanguageModel
    from ptm_jax.train.finetune import finetune

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lm_args = lm_bench.parse_args(args.lm_args.split())
    base = config_lib.load_config(str(REPO / "configs" / "ulmfit_tiny.toml"),
                                  lm_bench.overrides(lm_args, out, plain=False))
    if not (out / "pretrain").exists():
        (out / "pretrain").symlink_to(Path(args.lm).resolve() / "pretrain")
        (out / "tokenizer").symlink_to(Path(args.lm).resolve() / "tokenizer")
    per_epoch = math.ceil(args.train_subset / args.batch_size)
    fine = ["finetune.job=task", "finetune.task=sst2", f"finetune.data_dir={GLUE}",
            f"finetune.train_subset={args.train_subset}",
            f"finetune.epochs={args.epochs}", f"finetune.batch_size={args.batch_size}",
            f"finetune.max_seq_length={args.max_len}", f"finetune.learning_rate={args.lr}",
            "finetune.warmup_proportion=0.1", "finetune.weight_decay=0.01", "finetune.clip_norm=0.4",
            "finetune.optimizer=adamw", "train.adam_bias_correction=true", f"finetune.eval_every={per_epoch}",
            "train.lr_decay=slanted_triangular", f"model.unfreeze_every={per_epoch}",
            *[f"model.{k}={v * args.drop_mult}" for k, v in CLAS_DROPOUT.items()]]
    cfg = config_lib.load_config(str(REPO / "configs" / "ulmfit_tiny.toml"),
                                 lm_bench.overrides(lm_args, out, plain=False) + fine)
    results = {"machine": os.uname().nodename, "load_before": os.getloadavg()[0], "args": vars(args),
               "steps_per_epoch": per_epoch, "runs": {}}
    t0, c0 = time.time(), time.process_time()
    stage2 = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps=lm_args.steps))
    if args.lm_text == "all":
        stage2 = dataclasses.replace(stage2, finetune=dataclasses.replace(stage2.finetune, train_subset=0))
    results["lm_finetune"] = pipeline.lm_finetune(stage2, args.lm_steps)
    results["lm_finetune_seconds"] = round(time.time() - t0, 1)
    results["lm_finetune_cpu_seconds"] = round(time.process_time() - c0, 1)
    lm_dir = out / "lm_finetune" / "pretrain"
    pretrained, model_cfg, info, tok_dir = load_params(lm_dir)
    scratch = out / "scratch_init"
    if not (scratch / "ptm.json").exists():
        fresh = AwdLstmLanguageModel(model_cfg).init(jax.random.key(0), jax.numpy.zeros((1, 4), jax.numpy.int32))
        files = [tok_dir / f for f in (info.get("tokenizer") or {}).get("files", [])]
        save_params(scratch, jax.tree.map(lambda x: x, fresh["params"]) if "params" in fresh else fresh,
                    model_cfg, "language_model", extra={"tokenizer": info.get("tokenizer")}, tokenizer_files=files)
    for name in args.variants.split(","):
        run_cfg = config_lib.load_config(str(REPO / "configs" / "ulmfit_tiny.toml"),
                                         lm_bench.overrides(lm_args, out / name, plain=False) + fine + VARIANTS[name]
                                         + [f"finetune.init={scratch if name == 'scratch' else lm_dir}"])
        t1, c1 = time.time(), time.process_time()
        s = finetune(run_cfg)
        results["runs"][name] = {"seconds": round(time.time() - t1, 1),
                                 "cpu_seconds": round(time.process_time() - c1, 1), "steps": s["steps"],
                                 "final_dev_accuracy": s["final_eval"].get("accuracy"),
                                 "best_dev_accuracy": s["best"]["metrics"].get("accuracy"),
                                 "best_step": s["best"]["step"]}
        print(json.dumps({name: results["runs"][name]}), flush=True)
    results["load_after"] = os.getloadavg()[0]
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    print(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
