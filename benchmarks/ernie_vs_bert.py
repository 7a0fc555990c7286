"""ERNIE 1.0 knowledge masking against BERT masking: same corpus, model, budget and seed.

Two arms pretrain the same network (``configs/bert_small.toml``: 2 layers, 128 hidden, 2 heads, FFN 512) on the
same Project Gutenberg books (``../shared/data/corpus/gutenberg``), with the same cased WordPiece vocabulary, token
cache, example stream (ERNIE's stream is BERT's ``local_batches`` with the unit codes riding along, so the rows
are the same), steps, learning rate and seed; only the choice of masked tokens differs:

* ``bert``: objective ``mlm``: 15% of the tokens, each on its own (BERT's token masking, no NSP);
* ``ernie``: objective ``ernie_mlm``: the same token budget filled with whole units (Sun et al. 2019 Sec. 3.2),
  staged basic -> phrase -> entity (phrase units from 1/4 of the steps, entity units from 1/2). Units: an
  entity lexicon of the CoNLL-2003 English train entity strings (as ``ernie_masking_stats.py`` builds it) and
  word2phrase PMI phrases of the training documents (min count 5, threshold 100: word2phrase's defaults).

Measured on the last ``--eval-docs`` documents of the cache, which neither arm trains on (``data.eval_documents``):

(a) unit cloze: every phrase/entity unit occurrence in those documents, each in its own window of up to 128
    tokens ([CLS] context [SEP], the unit in the middle), every token of the unit replaced by [MASK]: exact
    recovery (every token of the unit is the argmax) and per-token accuracy, by kind and length, and split by
    whether the unit's text is also a unit somewhere in the training documents ("seen") or not; plus a control,
    a token cloze of 15% single tokens in consecutive windows of the same documents (BERT's task);
(b) CoNLL-2003 NER: ``ptm finetune --task conll2003`` from each pretrained model on the same training subset, with
    the same epochs, learning rate and seed; eng.testa (dev) entity F1.

Resumable in pieces: every stage restarts from its checkpoints (``--stop-after`` steps per call):

    python benchmarks/ernie_vs_bert.py --out /tmp/evb --steps 3000 --stage pretrain --arm bert --stop-after 1500
    python benchmarks/ernie_vs_bert.py --out /tmp/evb --steps 3000 --stage pretrain --arm ernie --stop-after 1500
    ...   (repeat until both reach --steps)
    python benchmarks/ernie_vs_bert.py --out /tmp/evb --steps 3000 --stage cloze
    python benchmarks/ernie_vs_bert.py --out /tmp/evb --steps 3000 --stage ner
    python benchmarks/ernie_vs_bert.py --out /tmp/evb --steps 3000 --stage report
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

DATA = ROOT.parent / "shared" / "data"
KIND = {1: "phrase", 2: "entity"}
ARMS = ("bert", "ernie")


# ---------------------------------------------------------------------------------------------- pretraining

def common(args) -> list[str]:
    out = Path(args.out)
    return [f"data.corpus={args.corpus}", f"data.eval_documents={args.eval_docs}", f"data.cache_dir={out / 'cache'}",
            f"data.seed={args.seed}", f"train.seed={args.seed}", "tokenizer.lower_case=false",
            f"train.steps={args.steps}", f"train.learning_rate={args.lr}", f"train.warmup_steps={args.warmup}",
            f"train.eval_every={args.eval_every}", f"train.checkpoint_every={args.eval_every}",
            "train.eval_batches=16", "train.progress_bar=false", f"model.hidden_dropout={args.dropout}",
            f"model.attention_dropout={args.dropout}"]


def arm_overrides(arm: str, args) -> list[str]:
    out = Path(args.out)
    if arm == "bert":
        return ["objective=mlm", f"output_dir={out / 'bert'}"]
    return ["objective=ernie_mlm", "model.family=ernie", f"output_dir={out / 'ernie'}",
            f"tokenizer.vocab_file={out / 'bert' / 'tokenizer' / 'vocab.txt'}",
            "data.unit_sources=lexicon,pmi", f"data.lexicon_file={out / 'conll2003_entities.tsv'}",
            "data.phrase_min_count=5", "data.phrase_threshold=100",
            f"data.phrase_from_step={args.phrase_from if args.phrase_from >= 0 else args.steps // 4}",
            f"data.entity_from_step={args.entity_from if args.entity_from >= 0 else args.steps // 2}"]


def ptm(*argv: str) -> None:
    cmd = [sys.executable, "-m", "ptm_jax.cli", *argv]
    print("+", " ".join(cmd[2:]), flush=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run(cmd, check=True, env=env)


def write_lexicon(out: Path) -> Path:
    from ernie_masking_stats import conll_entities

    path = out / "conll2003_entities.tsv"
    if not path.exists():
        ents = conll_entities(DATA / "conll2003" / "eng.train")
        out.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"entity\t{e}\n" for e in sorted(ents)), encoding="utf-8")
    return path


def pretrain(arm: str, args) -> None:
    if arm == "ernie" and not (Path(args.out) / "bert" / "tokenizer" / "vocab.txt").exists():
        raise SystemExit("pretrain the bert arm first (at least --stop-after 1): the ernie arm reads its vocabulary")
    extra = ["--stop-after", str(args.stop_after)] if args.stop_after else []
    ptm("pretrain", "-c", "bert_small", *common(args), *arm_overrides(arm, args), *extra)


def step_of(run: Path) -> int:
    ckpt = run / "pretrain" / "checkpoints"
    steps = [int(p.name) for p in ckpt.iterdir() if p.name.isdigit()] if ckpt.is_dir() else []
    return max(steps, default=0)


# ---------------------------------------------------------------------------------------------- unit cloze

def ernie_corpus(args):
    """The ERNIE arm's corpus (tokenizer, cache, unit codes of every document), as its pretraining built it."""
    from ptm_jax.config_loading import load_config
    from ptm_jax.train.stages import prepare_corpus

    return prepare_corpus(load_config("bert_small", [*common(args), *arm_overrides("ernie", args)]))


def unit_occurrences(codes: np.ndarray, lo: int, hi: int) -> list[tuple[int, int, int]]:
    """(start, end, kind) of the phrase/entity units in codes[lo:hi], offsets relative to lo."""
    seg = codes[lo:hi]
    out = []
    for s in np.flatnonzero((seg & 4) > 0).tolist():
        kind = int(seg[s] & 3)
        e = s + 1
        while e < len(seg) and (seg[e] & 3) == kind and not seg[e] & 4:
            e += 1
        out.append((s, e, kind))
    return out


def cloze_sets(corpus, max_len: int, seed: int):
    """Unit-cloze and token-cloze examples over the held-out documents."""
    units = corpus.artifacts["units"]
    sp = corpus.special
    held = corpus.eval
    seen_units: set[tuple[int, ...]] = set()
    for d in corpus.train.doc_indices.tolist():
        toks = np.asarray(corpus.cache.doc_tokens(d))
        lo = int(units.offsets[d])
        for s, e, _ in unit_occurrences(units.codes, lo, lo + len(toks)):
            seen_units.add(tuple(toks[s:e].tolist()))
    ctx = max_len - 2
    unit_rows = []
    token_rows = []
    rng = np.random.default_rng(seed)
    for d in held.doc_indices.tolist():
        toks = np.asarray(corpus.cache.doc_tokens(d)).astype(np.int32)
        lo = int(units.offsets[d])
        for s, e, kind in unit_occurrences(units.codes, lo, lo + len(toks)):
            if e - s > 20:
                continue
            left = max(0, min(s - (ctx - (e - s)) // 2, len(toks) - ctx))
            window = toks[left:left + ctx].copy()
            pos = np.arange(s - left, e - left)
            text = tuple(toks[s:e].tolist())
            unit_rows.append({"window": window, "positions": pos, "kind": kind, "len": e - s,
                              "seen": text in seen_units, "text": text})
        for a in range(0, len(toks) - ctx + 1, ctx):
            window = toks[a:a + ctx].copy()
            k = max(1, round(0.15 * ctx))
            pos = np.sort(rng.choice(ctx, k, replace=False))
            token_rows.append({"window": window, "positions": pos})
    return unit_rows, token_rows, len(seen_units)


def batches(rows, sp, max_len: int, max_pred: int, batch: int):
    for i in range(0, len(rows), batch):
        chunk = rows[i:i + batch]
        n = len(chunk)
        ids = np.full((n, max_len), sp.pad, np.int32)
        mask = np.zeros((n, max_len), np.int32)
        pos = np.zeros((n, max_pred), np.int32)
        gold = np.zeros((n, max_pred), np.int32)
        w = np.zeros((n, max_pred), bool)
        for r, row in enumerate(chunk):
            win = row["window"]
            seq = np.concatenate([[sp.cls], win, [sp.sep]]).astype(np.int32)
            p = row["positions"] + 1
            gold[r, :len(p)] = seq[p]
            seq[p] = sp.mask
            ids[r, :len(seq)] = seq
            mask[r, :len(seq)] = 1
            pos[r, :len(p)] = p
            w[r, :len(p)] = True
        yield chunk, ids, mask, pos, gold, w


def load_mlm(run: Path):
    """(fn, params, step) of a pretraining run's MLM model: fn(params, ids, mask, positions, gold) -> (argmax [B, P],
    log-probability of the gold token [B, P], rank of the gold token [B, P]). ERNIE's trunk key is renamed to
    BERT's (the same network, ``families/ernie/model.py``)."""
    import jax
    import jax.numpy as jnp

    from ptm_jax.export.params import load_params
    from ptm_jax.families.bert.heads import BertForPreTraining

    params, cfg, info, _ = load_params(run)
    if "ernie" in params:
        params = {("bert" if k == "ernie" else k): v for k, v in params.items()}
    model = BertForPreTraining(cfg, with_nsp=False)

    def fn(p, ids, mask, pos, gold):
        logp = jax.nn.log_softmax(model.apply({"params": p}, ids, mask, jnp.zeros_like(ids), pos)[0], axis=-1)
        g = jnp.take_along_axis(logp, gold[..., None], axis=-1)[..., 0]
        return logp.argmax(-1), g, jnp.sum(logp > g[..., None], axis=-1)

    return jax.jit(fn), params, int(info["step"])


def scores(correct: list[np.ndarray], logp: list[np.ndarray], rank: list[np.ndarray]) -> dict:
    """Exact recovery of whole units, per-token accuracy, top-10 accuracy, mean cross-entropy per token (nats) and
    mean log-likelihood per unit (nats) over rows of per-token arrays."""
    if not correct:
        return {"n": 0}
    cat = np.concatenate
    return {"n": len(correct), "exact": float(np.mean([c.all() for c in correct])),
            "token_acc": float(cat(correct).mean()), "top10": float((cat(rank) < 10).mean()),
            "xent": float(-cat(logp).mean()), "unit_loglik": float(np.mean([lp.sum() for lp in logp]))}


def cloze(args) -> dict:
    out = Path(args.out)
    corpus = ernie_corpus(args)
    max_len = 128
    unit_rows, token_rows, n_seen = cloze_sets(corpus, max_len, args.seed)
    vocab = [(out / a / "tokenizer" / "vocab.txt") for a in ARMS]
    same_vocab = vocab[0].read_bytes() == vocab[1].read_bytes() if vocab[1].exists() else "ernie reads bert's file"
    # the unigram model of the training documents (add-one smoothed): a model that ignores the context
    counts = np.bincount(np.concatenate([np.asarray(corpus.cache.doc_tokens(d)) for d in
                                         corpus.train.doc_indices.tolist()]), minlength=corpus.special.vocab_size)
    uni_logp = np.log((counts + 1.0) / (counts.sum() + len(counts)))
    uni_rank = np.argsort(np.argsort(-counts, kind="stable"), kind="stable")
    unigram = int(np.argmax(counts))
    report = {"held_out_documents": int(corpus.eval.num_docs), "held_out_tokens": int(sum(
        len(corpus.cache.doc_tokens(d)) for d in corpus.eval.doc_indices.tolist())),
              "unit_occurrences": len(unit_rows), "distinct_units": len({r["text"] for r in unit_rows}),
              "distinct_training_units": n_seen, "token_cloze_windows": len(token_rows),
              "same_vocabulary_file": same_vocab, "unigram_token": corpus.tokenizer.decode([unigram]), "arms": {}}
    groups = {"all": lambda r: True, "phrase": lambda r: r["kind"] == 1, "entity": lambda r: r["kind"] == 2,
              "1 token": lambda r: r["len"] == 1, ">= 2 tokens": lambda r: r["len"] >= 2,
              "phrase >= 2": lambda r: r["kind"] == 1 and r["len"] >= 2,
              "entity >= 2": lambda r: r["kind"] == 2 and r["len"] >= 2,
              "seen in training": lambda r: r["seen"], "not seen in training": lambda r: not r["seen"]}

    def by_group(correct, logp, rank):
        res = {}
        for name, keep in groups.items():
            idx = [i for i, r in enumerate(unit_rows) if keep(r)]
            res[name] = scores([correct[i] for i in idx], [logp[i] for i in idx], [rank[i] for i in idx])
        return res

    golds = [np.asarray(r["text"]) for r in unit_rows]
    report["unigram_baseline"] = by_group([g == unigram for g in golds], [uni_logp[g] for g in golds],
                                          [uni_rank[g] for g in golds])
    tok_gold = [r["window"][r["positions"]] for r in token_rows]
    report["unigram_baseline"]["token cloze"] = scores([g == unigram for g in tok_gold], [uni_logp[g] for g in tok_gold],
                                                       [uni_rank[g] for g in tok_gold])
    for arm in ARMS:
        fn, params, step = load_mlm(out / arm / "pretrain")
        t0 = time.time()
        per = {"unit": ([], [], []), "token": ([], [], [])}
        for key, rows in (("unit", unit_rows), ("token", token_rows)):
            for chunk, ids, mask, pos, gold, w in batches(rows, corpus.special, max_len, 20, 64):
                pred, lp, rk = (np.asarray(x) for x in fn(params, ids, mask, pos, gold))
                for r, row in enumerate(chunk):
                    n = len(row["positions"])
                    per[key][0].append(pred[r, :n] == gold[r, :n])
                    per[key][1].append(lp[r, :n])
                    per[key][2].append(rk[r, :n])
        res = {"step": step, **by_group(*per["unit"]), "token cloze": scores(*per["token"])}
        res["seconds"] = round(time.time() - t0, 1)
        report["arms"][arm] = res
    common_units = collections.Counter(r["text"] for r in unit_rows if r["len"] >= 2).most_common(12)
    report["commonest_multi_token_units"] = [[corpus.tokenizer.decode(list(t)), c] for t, c in common_units]
    (out / "cloze.json").write_text(json.dumps(report, indent=2))
    return report


# ---------------------------------------------------------------------------------------------- NER

def ner(arm: str, args) -> None:
    out = Path(args.out)
    extra = ["--stop-after", str(args.stop_after)] if args.stop_after else []
    ptm("finetune", "--task", "conll2003", "--init", str(out / arm / "pretrain"), "--data-dir", str(DATA / "conll2003"),
        f"output_dir={out / arm}", f"finetune.train_subset={args.ner_subset}", f"finetune.epochs={args.ner_epochs}",
        f"finetune.learning_rate={args.ner_lr}", "finetune.batch_size=32", "finetune.max_seq_length=128",
        f"finetune.seed={args.seed}", "train.progress_bar=false", *extra)


# ---------------------------------------------------------------------------------------------- report

def pct(x) -> str:
    return "-" if x is None else f"{100 * x:.2f}"


def report(args) -> None:
    out = Path(args.out)
    lines = []
    pre = {a: json.loads((out / a / "pretrain" / "summary.json").read_text()) for a in ARMS
           if (out / a / "pretrain" / "summary.json").exists()}
    if pre:
        lines += ["| arm | step | train mlm_loss | held-out mlm_accuracy (own masking, 80/10/10) | most frequent token |", "|---|---|---|---|---|"]
        for a, s in pre.items():
            lines.append(f"| {a} | {s['step']} | {s['train'].get('mlm_loss', float('nan')):.3f} | "
                         f"{s['eval'].get('mlm_accuracy', float('nan')):.4f} | "
                         f"{(s.get('baseline') or {}).get('majority_accuracy', float('nan')):.4f} |")
    if (out / "cloze.json").exists():
        c = json.loads((out / "cloze.json").read_text())
        arms = list(c["arms"])
        lines += ["", f"held-out documents {c['held_out_documents']} ({c['held_out_tokens']:,} tokens), unit "
                  f"occurrences {c['unit_occurrences']:,} ({c['distinct_units']:,} distinct)", "",
                  "| units | n | " + " | ".join(f"{a}: exact / token acc / top-10 / xent / unit loglik"
                                               for a in ["unigram", *arms]) + " |",
                  "|---|---|" + "---|" * (1 + len(arms))]

        def cell(d):
            f = lambda k, m=100: "-" if d.get(k) is None else f"{m * d[k]:.2f}"
            return " / ".join([f("exact"), f("token_acc"), f("top10"), f("xent", 1), f("unit_loglik", 1)])

        for g, b in c["unigram_baseline"].items():
            lines.append(f"| {g} | {c['arms'][arms[0]][g]['n']:,} | {cell(b)} | "
                         + " | ".join(cell(c['arms'][a][g]) for a in arms) + " |")
    ner_rows = []
    for a in ARMS:
        f = out / a / "finetune-conll2003" / "summary.json"
        if f.exists():
            s = json.loads(f.read_text())
            ner_rows.append(f"| {a} | {s.get('step')} | {json.dumps({k: round(v, 4) for k, v in (s.get('final_eval') or {}).items() if isinstance(v, float)})} |")
    if ner_rows:
        lines += ["", "| arm | NER steps | eng.testa (dev) final eval |", "|---|---|---|", *ner_rows]
    text = "\n".join(lines)
    (out / "report.md").write_text(text + "\n")
    print(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/ernie_vs_bert")
    ap.add_argument("--stage", choices=("pretrain", "cloze", "ner", "report"), required=True)
    ap.add_argument("--arm", choices=ARMS, help="pretrain / ner: one arm (default both, bert first)")
    ap.add_argument("--corpus", default=str(DATA / "corpus" / "gutenberg" / "[0-9]*.txt"))
    ap.add_argument("--eval-docs", type=int, default=16, help="documents held out of pretraining (the last ones)")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--phrase-from", type=int, default=-1, help="ERNIE: phrase units from this step (-1: steps/4)")
    ap.add_argument("--entity-from", type=int, default=-1, help="ERNIE: entity units from this step (-1: steps/2)")
    ap.add_argument("--dropout", type=float, default=0.1, help="model.hidden_dropout and attention_dropout")
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stop-after", type=int, default=0, help="steps per call of a pretrain/ner stage (0: to the end)")
    ap.add_argument("--ner-subset", type=int, default=4000, help="CoNLL-2003 training sentences")
    ap.add_argument("--ner-epochs", type=float, default=3.0)
    ap.add_argument("--ner-lr", type=float, default=5e-4)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_lexicon(out)
    arms = [args.arm] if args.arm else list(ARMS)
    t0 = time.time()
    if args.stage == "pretrain":
        for a in arms:
            pretrain(a, args)
    elif args.stage == "cloze":
        print(json.dumps(cloze(args), indent=2))
    elif args.stage == "ner":
        for a in arms:
            ner(a, args)
    else:
        report(args)
    print(f"stage {args.stage} took {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
