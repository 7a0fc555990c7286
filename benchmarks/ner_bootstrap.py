"""Paired bootstrap over sentences of the entity-F1 difference between two NER systems (conlleval's rules, through
``evaluate/ner_metrics.ner_report``), from the prediction files ``ptm eval --predictions`` writes (one
``token gold pred`` line per token, a blank line between sentences). Used for ERNIE against BERT masking on
CoNLL-2003 (docs/benchmarks.md)::

    python benchmarks/ner_bootstrap.py /tmp/evb/pred_bert/conll2003-test.txt /tmp/evb/pred_ernie/conll2003-test.txt

The interval covers only which evaluation sentences were drawn, not pretraining or finetuning seeds.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from ptm_jax.evaluate.ner_metrics import ner_report


def read_predictions(path: Path) -> list[list[tuple[str, str]]]:
    """Sentences of (gold, predicted) tags; a line with fewer than two fields is an error naming file and line."""
    sents, cur = [], []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fields = line.split()
        if not fields:
            if cur:
                sents.append(cur)
                cur = []
            continue
        if len(fields) < 2:
            sys.exit(f"{path}:{n}: expected 'token gold pred' (ptm eval --predictions), got {line!r}")
        cur.append((fields[-2], fields[-1]))
    if cur:
        sents.append(cur)
    return sents


def sentence_counts(sents) -> np.ndarray:
    """[n, 3]: correct, predicted and gold entities of each sentence."""
    out = np.zeros((len(sents), 3))
    for i, s in enumerate(sents):
        m = ner_report([[g for g, _ in s]], [[p for _, p in s]]).get("micro")
        out[i] = (m.correct, m.predicted, m.support)
    return out


def f1(c: np.ndarray) -> np.ndarray:
    p, r = c[..., 0] / c[..., 1], c[..., 0] / c[..., 2]
    return 2 * p * r / (p + r)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", type=Path, help="prediction file of system A (the baseline)")
    ap.add_argument("b", type=Path, help="prediction file of system B; the difference is B - A")
    ap.add_argument("--resamples", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    for p in (args.a, args.b):
        if not p.is_file():
            sys.exit(f"{p}: no such prediction file (write it with ptm eval ... --predictions DIR)")
    a, b = read_predictions(args.a), read_predictions(args.b)
    if len(a) != len(b) or any([g for g, _ in x] != [g for g, _ in y] for x, y in zip(a, b)):
        sys.exit(f"{args.a} and {args.b} do not hold the same sentences with the same gold tags")
    ca, cb = sentence_counts(a), sentence_counts(b)
    idx = np.random.default_rng(args.seed).integers(0, len(a), size=(args.resamples, len(a)))
    d = f1(cb[idx].sum(1)) - f1(ca[idx].sum(1))
    lo, hi = np.percentile(d, [2.5, 97.5])
    fa, fb = f1(ca.sum(0)), f1(cb.sum(0))
    print(f"{len(a)} sentences, {int(ca[:, 2].sum())} gold entities; F1 A {100 * fa:.2f} B {100 * fb:.2f} "
          f"diff {100 * (fb - fa):+.2f}, 95% interval [{100 * lo:+.2f}, {100 * hi:+.2f}], P(diff<=0) {np.mean(d <= 0):.3f}")


if __name__ == "__main__":
    main()
