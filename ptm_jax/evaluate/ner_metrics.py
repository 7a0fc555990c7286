"""Entity-level NER precision, recall and F1 (conlleval; seqeval's default, non-strict mode).

Chunks are read with the conlleval start/end rules, which accept IOB1, IOB2 and IOBES alike:
a chunk ends before a tag when the previous tag is E or S, when a B/I is followed by B, S or O, or
when the type changes; a chunk starts at B or S, at an I or E following O, E or S, or when the type
changes. Sentences are joined with an O between them. An entity counts as correct only when its type
and exact token span match a gold entity. Micro-averaged totals plus a per-type breakdown.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ptm_jax.errors import DataError


def _split_tag(tag: str) -> tuple[str, str]:
    """('B', 'PER') from 'B-PER'; ('O', '_') from 'O' (type '_' when absent, as conlleval/seqeval)."""
    return tag[:1], tag[1:].split("-", 1)[-1] or "_"


def _ends(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    if prev_tag in ("E", "S"):
        return True
    if prev_tag in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev_tag not in ("O", ".") and prev_type != type_


def _starts(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    if tag in ("B", "S"):
        return True
    if prev_tag in ("E", "S", "O") and tag in ("E", "I"):
        return True
    return tag not in ("O", ".") and prev_type != type_


def get_entities(tags: Sequence[str] | Sequence[Sequence[str]]) -> list[tuple[str, int, int]]:
    """(type, first, last) token spans of the chunks in one tag sequence or a list of sentences
    (offsets then count over the sentences joined with one 'O' between them)."""
    if tags and not isinstance(tags[0], str):
        flat: list[str] = []
        for sent in tags:
            flat.extend(sent)
            flat.append("O")
        tags = flat
    chunks: list[tuple[str, int, int]] = []
    prev_tag, prev_type, begin = "O", "", 0
    for i, raw in enumerate([*tags, "O"]):
        tag, type_ = _split_tag(raw)
        if _ends(prev_tag, tag, prev_type, type_):
            chunks.append((prev_type, begin, i - 1))
        if _starts(prev_tag, tag, prev_type, type_):
            begin = i
        prev_tag, prev_type = tag, type_
    return chunks


@dataclass(frozen=True)
class PRF:
    """Precision, recall, F1 (fractions) and the entity counts behind them."""

    precision: float
    recall: float
    f1: float
    support: int  # gold entities
    predicted: int
    correct: int


def _prf(correct: int, predicted: int, gold: int) -> PRF:
    p = correct / predicted if predicted else 0.0
    r = correct / gold if gold else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return PRF(p, r, f, gold, predicted, correct)


def ner_report(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict[str, PRF]:
    """Per entity type and 'micro' totals for sentence lists of gold and predicted tags."""
    if len(gold) != len(pred):
        raise DataError(f"gold has {len(gold)} sentences but predictions have {len(pred)}")
    for i, (g, p) in enumerate(zip(gold, pred)):
        if len(g) != len(p):
            raise DataError(f"sentence {i}: {len(g)} gold tags but {len(p)} predicted tags")
    gold_set = set(get_entities([list(s) for s in gold]))
    pred_set = set(get_entities([list(s) for s in pred]))
    correct_set = gold_set & pred_set
    types = sorted({t for t, _, _ in gold_set | pred_set})
    out = {}
    for t in types:
        out[t] = _prf(sum(1 for e in correct_set if e[0] == t), sum(1 for e in pred_set if e[0] == t),
                      sum(1 for e in gold_set if e[0] == t))
    out["micro"] = _prf(len(correct_set), len(pred_set), len(gold_set))
    return out


def ner_f1(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> float:
    """Micro-averaged entity F1."""
    return ner_report(gold, pred)["micro"].f1


def ner_metrics(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict[str, float]:
    """Flat dict for logging: precision, recall, f1 and f1_<TYPE> per entity type."""
    rep = ner_report(gold, pred)
    micro = rep.pop("micro")
    out = {"precision": micro.precision, "recall": micro.recall, "f1": micro.f1}
    out.update({f"f1_{t}": v.f1 for t, v in rep.items()})
    return out
