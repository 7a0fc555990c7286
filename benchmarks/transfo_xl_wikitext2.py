"""WikiText-2 test perplexity of a small Transformer-XL (ptm_jax/families/transfo_xl) with and without memory.

Data: ../shared/data/corpus/wikitext-2-tokenized holds only WikiText-2's valid and test splits, so valid.txt is
split by article (a top-level heading ' = Title = ' starts one): its first articles are the training text, its last
--dev-share of articles the dev text; test.txt is the held-out text, used only to score the models chosen on dev.
The training text is read by the project's corpus reader (format 'lines': an article is a document, a paragraph a
line, '<eos>' after every paragraph as the reference's corpus has it) into the token cache with a word vocabulary
built from it (words seen fewer than --min-count times, and dev or test words outside it, are '<unk>').

Two arms train under the same budget (--steps steps of --batch rows x --segment tokens, the same schedule, seed and
data): 'memory' carries a memory of --segment states per layer from step to step (Dai et al. 2019 Sec. 3.2), 'none'
trains every segment on its own (model.mem_len = 0). Each arm's number of steps is chosen on dev among
--candidates (checkpoints of the one --steps-step schedule), scored with the memory it trained with; the chosen
models are then scored on test.txt with memories of 0, --segment and --long-memory states (``ptm perplexity``'s
hook, ``families/transfo_xl/perplexity.py``: --batch-size contiguous rows, segments of --segment tokens).

    python benchmarks/transfo_xl_wikitext2.py --workdir /tmp/txl_wt2 --json /tmp/txl_wt2.json
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

ARTICLE = re.compile(r"^ = [^=].* = $")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    data = REPO.parent / "shared/data/corpus/wikitext-2-tokenized"
    ap.add_argument("--train", default=str(data / "valid.txt"), help="training and dev text")
    ap.add_argument("--dev-share", type=float, default=0.1, help="share of --train's articles held out as dev")
    ap.add_argument("--heldout", default=str(data / "test.txt"), help="held-out text")
    ap.add_argument("--min-count", type=int, default=2)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--inner", type=int, default=512)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--segment", type=int, default=64, help="tokens per segment (tgt_len), training and evaluation")
    ap.add_argument("--long-memory", type=int, default=192, help="the longer evaluation memory")
    ap.add_argument("--batch", type=int, default=16, help="rows per step")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--candidates", default="250,500", help="steps of the schedule whose models are scored on dev")
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--warmup", type=int, default=50, help="linear warmup steps, then linear decay to 0")
    ap.add_argument("--arms", default="memory,none")
    ap.add_argument("--eval-rows", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=0, help="score only the first N tokens (0 = all; smoke runs)")
    ap.add_argument("--workdir", default="/tmp/txl_wt2")
    ap.add_argument("--json", default="")
    return ap.parse_args(argv)


def split_articles(lines: list[str]) -> list[list[str]]:
    articles: list[list[str]] = []
    for line in lines:
        if ARTICLE.match(line) or not articles:
            articles.append([])
        if line.strip():
            articles[-1].append(line.strip())
    return [a for a in articles if a]


def main(argv=None) -> dict:
    args = parse_args(argv)
    import jax

    from ptm_jax.config import DataConfig, MeshConfig, RunConfig, TrainConfig
    from ptm_jax.data.cache import build_or_load_cache
    from ptm_jax.data.word_vocab import build_word_vocab
    from ptm_jax.families.transfo_xl import FAMILY
    from ptm_jax.families.transfo_xl.config import TransfoXlConfig
    from ptm_jax.families.transfo_xl.perplexity import perplexity
    from ptm_jax.parallel.mesh import make_mesh
    from ptm_jax.train.loop import fit

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    articles = split_articles(Path(args.train).read_text(encoding="utf-8").splitlines())
    cut = int(round(len(articles) * (1 - args.dev_share)))
    train, dev = articles[:cut], articles[cut:]
    # a document per article, a line per paragraph, <eos> after each paragraph but the last (the stream adds it)
    (work / "train.txt").write_text("\n\n".join("\n".join(p + " <eos>" for p in a[:-1]) + ("\n" if len(a) > 1 else "")
                                                + a[-1] for a in train) + "\n", encoding="utf-8")
    (work / "dev.txt").write_text("\n".join(p for a in dev for p in a) + "\n", encoding="utf-8")
    vocab = build_word_vocab([p for a in train for p in a], work / "vocab", min_count=args.min_count)
    cache = build_or_load_cache(DataConfig(corpus=str(work / "train.txt"), format="lines"), vocab, work / "cache")
    print(f"{len(train)} training articles, {len(dev)} dev articles; vocabulary {vocab.vocab_size} words "
          f"(min_count {args.min_count})", flush=True)
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    candidates = sorted(int(x) for x in args.candidates.split(","))
    out: dict = {"vocab_size": vocab.vocab_size, "train_articles": len(train), "dev_articles": len(dev),
                 "args": vars(args), "arms": {}}

    def score(params, cfg, path, memory, **kw):
        return perplexity(params, cfg, vocab, path, seq_len=args.segment + memory, stride=args.segment,
                          batch_size=args.eval_rows, max_tokens=args.max_tokens, **kw)

    for arm in args.arms.split(","):
        mem = args.segment if arm == "memory" else 0
        cfg = RunConfig(
            objective="transfo_xl_lm",
            model=TransfoXlConfig(vocab_size=vocab.vocab_size, hidden_size=args.hidden, num_layers=args.layers,
                                  num_heads=args.heads, intermediate_size=args.inner, mem_len=mem,
                                  hidden_dropout=args.dropout, dtype="float32"),
            data=DataConfig(max_seq_length=args.segment, seed=0),
            train=TrainConfig(batch_size=args.batch, steps=args.steps, learning_rate=args.lr, optimizer="adam",
                              lr_decay="bert", warmup_steps=args.warmup, weight_decay=0.0, clip_norm=0.25,
                              log_every=50, eval_every=10 ** 9, checkpoint_every=candidates[0], progress_bar=False))
        corpus = types.SimpleNamespace(tokenizer=vocab, train=cache, eval=None)
        objective = FAMILY.pretraining.objectives["transfo_xl_lm"](cfg, corpus)
        run_dir, arm_out, models = work / f"run_{arm}", {"train_memory": mem, "candidates": []}, {}
        t1 = time.perf_counter()
        for step in candidates:
            result = fit(objective, cfg.train, mesh, run_dir, stop_after=step)
            params = jax.device_get(result.state.params)["params"]
            dev_ppl = score(params, cfg.model, work / "dev.txt", mem)["token_perplexity"]
            models[step] = params
            arm_out["candidates"].append({"steps": step, "dev_perplexity": dev_ppl,
                                          "train_lm_loss": result.train_metrics.get("lm_loss"),
                                          "wall_seconds": round(time.perf_counter() - t1, 1)})
            print(f"{arm}: step {step} dev perplexity {dev_ppl:.2f} "
                  f"({time.perf_counter() - t1:.0f} s)", flush=True)
        best = min(arm_out["candidates"], key=lambda c: c["dev_perplexity"])
        arm_out["chosen_steps"] = best["steps"]
        params = models[best["steps"]]
        arm_out["parameters"] = int(sum(x.size for x in jax.tree.leaves(params)))
        arm_out["test"] = {}
        for memory, kw in ((0, {}), (args.segment, {}), (args.long_memory, {}),
                           (args.long_memory, {"same_length": True})):
            name = f"memory_{memory}" + ("_same_length" if kw else "")
            res = score(params, cfg.model, args.heldout, memory, **kw)
            arm_out["test"][name] = {k: res[k] for k in ("token_perplexity", "word_perplexity", "tokens", "memory",
                                                         "segment", "same_length")}
            print(f"{arm}: test {name}: token perplexity {res['token_perplexity']:.2f}", flush=True)
        out["arms"][arm] = arm_out
    out["total_seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
