"""Held-out perplexity of Bengio et al. 2003's NNLM (ptm_jax/families/nnlm) next to an interpolated Kneser-Ney
n-gram model (nltk.lm.KneserNeyInterpolated) built from the same training text with the same word vocabulary.

Data: ../shared/data/corpus/wikitext-2-tokenized holds only WikiText-2's valid and test splits, so valid.txt is
split in two: its last --dev-share of paragraphs (default 10%) is the dev text, the rest the training text; test.txt
is the held-out text. The settings of --grid (learning rate and steps) are each trained and scored on the dev text,
the one with the lowest dev perplexity is chosen, and only that one is scored on test.txt (never used to choose).
All three are read by the project's corpus reader (format 'lines': a document per paragraph) into the token
cache with a word vocabulary (ptm_jax/data/word_vocab.py) built from the training text (words seen fewer than
--min-count times and dev or held-out words outside it are '<unk>'); each document ends with '<eos>'. Both
models predict the same held-out positions (every token of the held-out stream from position n-1 on, the final
'<eos>' included) from the same preceding tokens.

The NNLM trains through ptm_jax.train.loop.fit (one CPU device), evaluated on the dev text by the loop; the
chosen one's full held-out perplexity is the loop's ``evaluate`` over test.txt. nltk scores about ten tokens a
second here (pure Python), so both models are also scored on the same --sample held-out positions drawn at random
(seed 0), and the Kneser-Ney perplexity is given on that sample; the NNLM's sample perplexity next to its full one
shows how representative the sample is. The equal-weight mixture of the two (the paper's "MLP + trigram" rows,
Bengio et al. 2003 Sec. 4) is scored there too.
Run from the repository root (needs `pip install nltk`):

    python benchmarks/nnlm_vs_kneser_ney.py --no-direct --grid 5e-3:600,8e-3:900
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    data = REPO.parent / "shared/data/corpus/wikitext-2-tokenized"
    ap.add_argument("--train", default=str(data / "valid.txt"),
                    help="training and dev text (one paragraph a line); its last --dev-share of lines is dev")
    ap.add_argument("--dev-share", type=float, default=0.1, help="share of --train's paragraphs held out as dev")
    ap.add_argument("--heldout", default=str(data / "test.txt"), help="held-out text")
    ap.add_argument("--min-count", type=int, default=2, help="word vocabulary: keep words seen this often")
    ap.add_argument("--order", type=int, default=5, help="NNLM n (n-1 predecessors)")
    ap.add_argument("--embed-dim", type=int, default=60, help="NNLM m")
    ap.add_argument("--hidden-dim", type=int, default=100, help="NNLM h")
    ap.add_argument("--no-direct", action="store_true", help="NNLM without the direct connections W")
    ap.add_argument("--length", type=int, default=32, help="predictions per row (L)")
    ap.add_argument("--batch", type=int, default=64, help="rows per step")
    ap.add_argument("--grid", default="5e-3:600,8e-3:900",
                    help="candidate settings LR:STEPS, comma-separated; chosen on dev perplexity")
    ap.add_argument("--optimizer", default="adam", choices=["adam", "sgd", "adamw", "adagrad"])
    ap.add_argument("--weight-decay", type=float, default=1e-5, help="L2 on weights and features, not biases")
    ap.add_argument("--kn-order", type=int, default=3, help="Kneser-Ney n-gram order")
    ap.add_argument("--kn-discount", type=float, default=0.75, help="Kneser-Ney absolute discount")
    ap.add_argument("--sample", type=int, default=2000, help="held-out positions scored by both models")
    ap.add_argument("--workdir", default="", help="vocabulary, caches and the run go here (default: temp)")
    return ap.parse_args(argv)


def stream_tokens(source, eos_id: int):
    """The one-pass token stream the NNLM's evaluation reads (documents in order, each followed by eos)."""
    from ptm_jax.data.pretraining.causal_lm import PackedStream

    stream = PackedStream(source, eos_id, seed=0, shuffle=False)
    return stream.span(0, stream.pass_tokens)[0]


def main(argv=None) -> dict:
    args = parse_args(argv)
    import jax
    import numpy as np

    from ptm_jax.config import DataConfig, MeshConfig, RunConfig, TrainConfig
    from ptm_jax.data.cache import build_or_load_cache
    from ptm_jax.data.word_vocab import build_word_vocab
    from ptm_jax.families.nnlm import FAMILY, NnlmConfig
    from ptm_jax.families.nnlm.data import window_rows
    from ptm_jax.parallel.mesh import make_mesh
    from ptm_jax.train.loop import fit

    work = Path(args.workdir or tempfile.mkdtemp(prefix="nnlm_kn_"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    lines = Path(args.train).read_text(encoding="utf-8").splitlines()
    paragraphs = [i for i, line in enumerate(lines) if line.strip()]
    cut = paragraphs[int(round(len(paragraphs) * (1 - args.dev_share)))]
    (work / "train.txt").write_text("\n".join(lines[:cut]) + "\n", encoding="utf-8")
    (work / "dev.txt").write_text("\n".join(lines[cut:]) + "\n", encoding="utf-8")
    vocab = build_word_vocab(lines[:cut], work / "vocab", min_count=args.min_count)
    caches = {name: build_or_load_cache(DataConfig(corpus=str(path), format="lines"), vocab, work / f"cache_{name}")
              for name, path in (("train", work / "train.txt"), ("dev", work / "dev.txt"),
                                 ("heldout", args.heldout))}
    train_toks = stream_tokens(caches["train"], vocab.eos_id)
    dev_toks = stream_tokens(caches["dev"], vocab.eos_id)
    held_toks = stream_tokens(caches["heldout"], vocab.eos_id)
    c = args.order - 1
    print(f"vocabulary {vocab.vocab_size} words (min_count {args.min_count}); train stream {train_toks.size} "
          f"tokens, dev stream {dev_toks.size} ({(dev_toks == vocab.unk_id).mean():.2%} <unk>), held-out stream "
          f"{held_toks.size} tokens ({(held_toks == vocab.unk_id).mean():.2%} <unk>)", flush=True)

    # --- NNLM through the loop: each candidate trained and scored on dev; the best scored on test
    def run_config(lr: float, steps: int, eval_toks) -> RunConfig:
        eval_rows = -(-(eval_toks.size - c) // args.length)
        return RunConfig(
            model=NnlmConfig(vocab_size=vocab.vocab_size, order=args.order, embed_dim=args.embed_dim,
                             hidden_dim=args.hidden_dim, direct=not args.no_direct),
            data=DataConfig(max_seq_length=args.length, seed=0),
            train=TrainConfig(batch_size=args.batch, steps=steps, learning_rate=lr, lr_decay="bert",
                              warmup_steps=min(50, steps // 10), optimizer=args.optimizer,
                              weight_decay=args.weight_decay, clip_norm=1.0, log_every=max(1, steps // 10),
                              eval_every=steps, eval_batches=-(-eval_rows // args.batch), checkpoint_every=steps,
                              progress_bar=False))

    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    candidates = []
    for item in args.grid.split(","):
        lr, steps = float(item.split(":")[0]), int(item.split(":")[1])
        cfg = run_config(lr, steps, dev_toks)
        corpus = types.SimpleNamespace(tokenizer=vocab, train=caches["train"], eval=caches["dev"])
        objective = FAMILY.pretraining.objectives["nnlm"](cfg, corpus)
        t1 = time.perf_counter()
        result = fit(objective, cfg.train, mesh, work / f"run_lr{lr}_steps{steps}",
                     param_groups=FAMILY.layout.param_groups(cfg.model, "pretrain"))
        dev = objective.summarize(result.eval_metrics)["perplexity"]
        candidates.append({"lr": lr, "steps": steps, "dev_perplexity": dev,
                           "train_seconds": round(time.perf_counter() - t1, 1),
                           "final_train_loss": result.train_metrics.get("lm_loss"), "result": result})
        print(f"candidate lr {lr} steps {steps}: dev perplexity {dev:.1f}", flush=True)
    best = min(candidates, key=lambda x: x["dev_perplexity"])
    lr, steps, result = best["lr"], best["steps"], best["result"]
    train_s = best["train_seconds"]
    from ptm_jax.train.loop import compile_objective, evaluate

    cfg = run_config(lr, steps, held_toks)
    objective = FAMILY.pretraining.objectives["nnlm"](cfg, types.SimpleNamespace(tokenizer=vocab, train=caches["train"],
                                                                      eval=caches["heldout"]))
    compiled = compile_objective(objective, cfg.train, mesh, FAMILY.layout.param_groups(cfg.model, "pretrain"))
    nnlm_full = objective.summarize(evaluate(objective, compiled, result.state.params, mesh, args.batch))
    params = jax.device_get(result.state.params)
    n_params = int(sum(np.size(x) for x in jax.tree.leaves(params)))

    # --- both models on the same sampled held-out positions
    rng = np.random.default_rng(0)
    positions = np.sort(rng.choice(np.arange(c, held_toks.size), size=min(args.sample, held_toks.size - c),
                                   replace=False))
    stream = types.SimpleNamespace(pass_tokens=held_toks.size, span=lambda a, b: (held_toks[a:b], None))
    eval_rows = -(-(held_toks.size - c) // args.length)
    rows = window_rows(stream, 0, eval_rows, args.length, c, vocab.pad_id, finite=True)
    apply = jax.jit(lambda p, w: jax.nn.log_softmax(objective.model.apply(p, w).astype(np.float32), -1))
    row_of, col_of = np.divmod(positions - c, args.length)
    nnlm_lp = np.zeros(positions.size)
    for r in np.unique(row_of // args.batch):
        sel = row_of // args.batch == r
        lp = np.asarray(apply(params, rows["window_ids"][r * args.batch:(r + 1) * args.batch]))
        nnlm_lp[sel] = lp[row_of[sel] - r * args.batch, col_of[sel], held_toks[positions[sel]]]

    from nltk.lm import KneserNeyInterpolated
    from nltk.util import everygrams

    words = [vocab.id_to_token(i) for i in range(vocab.vocab_size)]
    train_words = [words[i] for i in train_toks.tolist()]
    t2 = time.perf_counter()
    kn = KneserNeyInterpolated(args.kn_order, discount=args.kn_discount)
    kn.fit([everygrams(train_words, max_len=args.kn_order)], vocabulary_text=train_words)
    kn_fit_s = time.perf_counter() - t2
    k = args.kn_order - 1
    kn_lp = np.array([kn.logscore(words[held_toks[p]], [words[t] for t in held_toks[p - k:p]]) * math.log(2)
                      for p in positions.tolist()])
    kn_score_s = time.perf_counter() - t2 - kn_fit_s

    out = {
        "vocab_size": vocab.vocab_size, "train_tokens": int(train_toks.size), "dev_tokens": int(dev_toks.size),
        "heldout_tokens": int(held_toks.size),
        "candidates_on_dev": [{k: v for k, v in x.items() if k != "result"} for x in candidates],
        "chosen_on_dev": {"lr": lr, "steps": steps},
        "nnlm": {"order": args.order, "embed_dim": args.embed_dim, "hidden_dim": args.hidden_dim,
                 "direct": not args.no_direct, "parameters": n_params, "steps": steps,
                 "predictions_per_step": args.batch * args.length, "optimizer": args.optimizer, "lr": lr,
                 "train_seconds": round(train_s, 1), "final_train_loss": result.train_metrics.get("lm_loss"),
                 "heldout_perplexity_full": nnlm_full["perplexity"],
                 "heldout_perplexity_sample": math.exp(-nnlm_lp.mean())},
        "kneser_ney": {"library": "nltk.lm.KneserNeyInterpolated", "order": args.kn_order,
                       "discount": args.kn_discount, "fit_seconds": round(kn_fit_s, 1),
                       "score_seconds": round(kn_score_s, 1),
                       "heldout_perplexity_sample": math.exp(-kn_lp.mean())},
        "mixture_heldout_perplexity_sample": math.exp(-np.logaddexp(nnlm_lp, kn_lp).mean() + math.log(2)),
        "sample_positions": int(positions.size),
        "sample_mean_logprob_difference_nnlm_minus_kn": float((nnlm_lp - kn_lp).mean()),
        "sample_difference_stderr": float((nnlm_lp - kn_lp).std(ddof=1) / math.sqrt(positions.size)),
        "total_seconds": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
