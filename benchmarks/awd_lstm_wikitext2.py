"""AWD-LSTM perplexity on WikiText-2 for a stated CPU budget, next to a plain LSTM of the same size and budget
(the same 3-layer model with every AWD-LSTM regulariser off: no embedding, locked, weight or output dropout, no
AR/TAR; weights tied in both so that only the regularisation differs).

Data: ../shared/data/corpus/wikitext-2-tokenized holds only WikiText-2's valid and test splits, so valid.txt
(217,646 tokens) is the training text and test.txt the held-out text, read as lines (a document per paragraph)
with a word vocabulary built from valid.txt (``--vocab`` most frequent words, the rest '<unk>'). Training runs
through the project's loop (variable BPTT around ``--bptt``, state carried across batches, STLR schedule,
Adam(0.8, 0.99), clip 0.4); the held-out figure is ``families/ulmfit/perplexity.py``: test.txt cut into 16
contiguous rows, state carried from chunk to chunk. The baseline is valid.txt's add-one unigram model scored on
the same test tokens. ``--lower-case`` lower-cases both files (the vocabulary the SST-2 stages read, SST-2 being
lower-cased). Each variant's process CPU seconds (``time.process_time``, all threads) are reported: the budget is
the same number of steps, which costs both variants about the same CPU. ``plain+REG`` variants put one AWD
regulariser back (which one lets the plain LSTM leave the unigram plateau), and each run reports its training
curve and how saturated its last layer's output is on held-out rows. Run from the repository root:

    python benchmarks/awd_lstm_wikitext2.py --steps 300 --out /tmp/awd_wt2
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
DATA = REPO.parent / "shared" / "data" / "corpus" / "wikitext-2-tokenized"


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--bptt", type=int, default=70)
    ap.add_argument("--embed", type=int, default=400)
    ap.add_argument("--hidden", type=int, default=1150)
    ap.add_argument("--vocab", type=int, default=10000)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--lower-case", action="store_true")
    ap.add_argument("--variants", default="awd,plain",
                    help="comma-separated: awd, plain, or plain+REG with one AWD regulariser put back at its "
                    f"preset value ({', '.join(REGULARISERS)})")
    ap.add_argument("--stop-after", type=int, default=0,
                    help="stop each variant after N steps of the --steps schedule (0: run it to the end)")
    ap.add_argument("--out", default="/tmp/awd_lstm_wikitext2")
    ap.add_argument("--json", default="")
    return ap.parse_args(argv)


REGULARISERS = {"ar_tar": ("ar_alpha", "tar_beta"), "weight_p": ("weight_p",), "input": ("embed_p", "input_p"),
                "between": ("hidden_p", "output_p")}
"""plain+NAME: these fields of ulmfit_tiny's [model] keep their preset values, every other regulariser is off."""
PLAIN_OFF = ("output_p", "hidden_p", "input_p", "embed_p", "weight_p", "ar_alpha", "tar_beta")


def overrides(args, out: Path, variant: str) -> list[str]:
    o = [f"output_dir={out}", f"data.corpus={DATA / 'valid.txt'}", "data.format=lines", "data.eval_documents=0",
         f"data.max_seq_length={args.bptt}", "data.bptt_std=5", "data.bptt_bucket=16",
         f"model.vocab_size={args.vocab}", f"tokenizer.vocab_size={args.vocab}",
         f"tokenizer.lower_case={'true' if getattr(args, 'lower_case', False) else 'false'}",
         f"model.embed_dim={args.embed}", f"model.hidden_dim={args.hidden}", f"train.batch_size={args.batch_size}",
         f"train.steps={args.steps}", f"train.learning_rate={args.lr}", "train.lr_decay=slanted_triangular",
         f"train.warmup_steps={max(1, args.steps // 10)}", "train.eval_every=0", f"train.checkpoint_every={args.steps}",
         "train.log_every=25", "mesh.data=1"]
    if variant != "awd":
        kept = REGULARISERS[variant.split("+", 1)[1]] if "+" in variant else ()
        o += [f"model.{k}=0.0" for k in PLAIN_OFF if k not in kept]
    return o


def saturation(params, model_cfg, ids) -> dict:
    """How the last layer's output h (tied to the embedding: logits = h E^T + b) uses its range on held-out rows
    from the zero state: the share of units with |h| > 0.9 (tanh saturated) and the mean over units of h's
    standard deviation across positions (how much the prediction moves with the context)."""
    import jax.numpy as jnp
    import numpy as np

    from ptm_jax.families.ulmfit.model import AwdLstmLanguageModel

    _, raw, _, _ = AwdLstmLanguageModel(model_cfg).apply({"params": params}, jnp.asarray(ids), None, None, True)
    raw = np.asarray(raw, np.float64)
    return {"share_abs_h_over_0.9": round(float((np.abs(raw) > 0.9).mean()), 5),
            "h_std_over_positions": round(float(raw.std(axis=(0, 1)).mean()), 4)}


def unigram_perplexity(tokenizer, train: Path, test: Path) -> float:
    """exp of the mean negative log-probability of test.txt's scored tokens (the perplexity stream's, eos
    included) under train's add-one unigram distribution."""
    import numpy as np

    from ptm_jax.evaluate.perplexity import line_stream_ids as stream_ids

    p = np.bincount(stream_ids(tokenizer, train), minlength=tokenizer.vocab_size) + 1.0
    p /= p.sum()
    return float(np.exp(-np.mean(np.log(p[stream_ids(tokenizer, test)[1:]]))))


def main(argv=None) -> int:
    args = parse_args(argv)
    import jax

    from ptm_jax import config_loading as config_lib
    from ptm_jax.export.params import load_params, load_tokenizer
    from ptm_jax.evaluate.perplexity import line_stream_ids as stream_ids
    from ptm_jax.families.ulmfit.perplexity import perplexity
    from ptm_jax.train.stages import pretrain

    results = {"machine": os.uname().nodename, "cpus": os.cpu_count(), "load_before": os.getloadavg()[0],
               "steps": args.steps, "batch_size": args.batch_size, "bptt": args.bptt, "embed": args.embed,
               "hidden": args.hidden, "vocab": args.vocab, "runs": {}}
    for variant in args.variants.split(","):
        if variant not in ("awd", "plain") and variant.split("+", 1)[-1] not in REGULARISERS:
            raise SystemExit(f"--variants: unknown variant {variant!r} (awd, plain, plain+"
                             f"{'|'.join(REGULARISERS)})")
        out = Path(args.out) / variant
        cfg = config_lib.load_config(str(REPO / "configs" / "ulmfit_tiny.toml"), overrides(args, out, variant))
        t0, c0 = time.time(), time.process_time()
        summary = pretrain(cfg, stop_after=args.stop_after or None)
        train_s, train_cpu = time.time() - t0, time.process_time() - c0
        params, model_cfg, info, tok_dir = load_params(out / "pretrain")
        t1 = time.time()
        ppl = perplexity(params, model_cfg, load_tokenizer(info, tok_dir), DATA / "test.txt", seq_len=args.bptt)
        tok = load_tokenizer(info, tok_dir)
        results.setdefault("unigram_test_token_perplexity",
                           unigram_perplexity(tok, DATA / "valid.txt", DATA / "test.txt"))
        curve = [(r["step"], round(r["lm_loss"], 3), round(r["lm_accuracy"], 3))
                 for r in map(json.loads, (out / "pretrain" / "metrics.jsonl").read_text().splitlines())
                 if r["split"] == "train"]
        rows = stream_ids(tok, DATA / "test.txt")[: 8 * args.bptt].reshape(8, args.bptt)
        results["runs"][variant] = {"train_seconds": round(train_s, 1), "train_cpu_seconds": round(train_cpu, 1),
                                    "eval_seconds": round(time.time() - t1, 1), "step": summary["step"],
                                    "train_lm_loss": summary["train"].get("lm_loss"), "test": ppl,
                                    "train_curve (step, loss, accuracy)": curve,
                                    "last_layer": saturation(params, model_cfg, rows)}
        print(json.dumps({variant: results["runs"][variant]}, indent=2), flush=True)
    results["load_after"] = os.getloadavg()[0]
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
