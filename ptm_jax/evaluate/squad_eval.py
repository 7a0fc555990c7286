"""SQuAD exact match and F1, following the official v1.1 and v2.0 evaluation scripts.

normalize_answer: lower case, drop string.punctuation, replace the articles \\b(a|an|the)\\b by a
space, collapse whitespace. EM and token-overlap F1 take the max over gold answers and are
reported in percent. v1.1: F1 of an empty side is 0. v2.0: gold answers whose normalized text is
empty are dropped and an unanswerable question's only gold is ""; F1 is int(equal) when either
side has no tokens; answers are replaced by "" where the no-answer probability exceeds
`na_prob_thresh`; HasAns/NoAns breakdowns; best-threshold search over na_probs.
One deliberate difference from both scripts: a question without a prediction scores 0 and stays
in every denominator (v2.0 silently drops it); the missing ids are returned.
"""
from __future__ import annotations

import re
import string
from collections import Counter
from typing import Any, Iterable, Mapping

from ptm_jax.errors import DataError

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """Official SQuAD normalization."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def exact_match(gold: str, pred: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(pred))


def f1_v1(gold: str, pred: str) -> float:
    """v1.1 token F1 (0 when nothing overlaps, including empty strings)."""
    return _f1_tokens(normalize_answer(gold).split(), normalize_answer(pred).split(), empty_is_match=False)


def f1_v2(gold: str, pred: str) -> float:
    """v2.0 token F1: when either side is empty, 1.0 iff both are."""
    g = normalize_answer(gold).split() if gold else []
    p = normalize_answer(pred).split() if pred else []
    return _f1_tokens(g, p, empty_is_match=True)


def _f1_tokens(gold: list[str], pred: list[str], empty_is_match: bool) -> float:
    if empty_is_match and (not gold or not pred):
        return float(gold == pred)
    same = sum((Counter(gold) & Counter(pred)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def _articles(dataset_json: Any) -> list:
    data = dataset_json.get("data") if isinstance(dataset_json, Mapping) else dataset_json
    if not isinstance(data, list):
        raise DataError("SQuAD dataset must be the official JSON (a dict with 'data') or its 'data' list")
    return data


def _questions(dataset_json: Any) -> Iterable[tuple[str, list[str]]]:
    for a, article in enumerate(_articles(dataset_json)):
        for p, para in enumerate(article.get("paragraphs", [])):
            for q, qa in enumerate(para.get("qas", [])):
                if "id" not in qa or "answers" not in qa:
                    raise DataError(f"SQuAD dataset data[{a}].paragraphs[{p}].qas[{q}]: missing "
                                    f"'id' or 'answers'")
                yield qa["id"], [ans["text"] for ans in qa["answers"]]


def evaluate_v1(dataset_json: Any, predictions: Mapping[str, str]) -> dict[str, Any]:
    """Official v1.1 EM and F1 (percent); missing predictions score 0 and are listed."""
    em = f1 = 0.0
    total = 0
    missing: list[str] = []
    for qid, golds in _questions(dataset_json):
        total += 1
        if qid not in predictions:
            missing.append(qid)
            continue
        pred = predictions[qid]
        em += max(exact_match(g, pred) for g in golds) if golds else 0
        f1 += max(f1_v1(g, pred) for g in golds) if golds else 0.0
    if total == 0:
        raise DataError("SQuAD dataset has no questions")
    return {"exact_match": 100.0 * em / total, "f1": 100.0 * f1 / total, "total": total,
            "missing": len(missing), "missing_ids": missing}


def raw_scores_v2(dataset_json: Any, predictions: Mapping[str, str]
                  ) -> tuple[dict[str, float], dict[str, float], dict[str, bool], list[str]]:
    """Per-question EM and F1 before thresholding, has-answer flags, and missing ids (scored 0)."""
    exact: dict[str, float] = {}
    f1: dict[str, float] = {}
    has_ans: dict[str, bool] = {}
    missing: list[str] = []
    for qid, golds in _questions(dataset_json):
        has_ans[qid] = bool(golds)
        golds = [g for g in golds if normalize_answer(g)] or [""]
        if qid not in predictions:
            missing.append(qid)
            exact[qid] = f1[qid] = 0.0
            continue
        pred = predictions[qid]
        exact[qid] = float(max(exact_match(g, pred) for g in golds))
        f1[qid] = max(f1_v2(g, pred) for g in golds)
    return exact, f1, has_ans, missing


def find_best_thresh(predictions: Mapping[str, str], scores: Mapping[str, float],
                     na_probs: Mapping[str, float], has_ans: Mapping[str, bool]) -> tuple[float, float]:
    """Best score (percent) over no-answer thresholds and the threshold giving it.

    Start from predicting "" everywhere, then admit questions in increasing na_prob order
    (official script's sweep). Missing predictions never count as correct.
    """
    answered = [q for q in na_probs if q in predictions and q in scores]
    cur = best = sum(1 for q in has_ans if not has_ans[q] and q in predictions)
    best_thresh = 0.0
    for qid in sorted(answered, key=lambda k: na_probs[k]):
        if has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if predictions[qid] else 0
        cur += diff
        if cur > best:
            best, best_thresh = cur, na_probs[qid]
    return 100.0 * best / len(scores), float(best_thresh)


def evaluate_v2(dataset_json: Any, predictions: Mapping[str, str],
                na_probs: Mapping[str, float] | None = None, na_prob_thresh: float = 1.0
                ) -> dict[str, Any]:
    """Official v2.0 metrics: exact, f1, total, HasAns_*/NoAns_*, and with `na_probs` the
    best_exact/best_f1 and their thresholds; plus missing/missing_ids."""
    exact_raw, f1_raw, has_ans, missing = raw_scores_v2(dataset_json, predictions)
    if not exact_raw:
        raise DataError("SQuAD dataset has no questions")
    probs = dict(na_probs) if na_probs is not None else {q: 0.0 for q in predictions}
    if na_probs is not None:
        lacking = [q for q in predictions if q in has_ans and q not in probs]
        if lacking:
            raise DataError(f"na_probs has no value for {len(lacking)} predicted questions "
                            f"(first: {lacking[0]}); write one per question (null_odds.json)")

    def thresholded(raw: dict[str, float]) -> dict[str, float]:
        return {q: (float(not has_ans[q]) if q in predictions and probs.get(q, 0.0) > na_prob_thresh
                    else s) for q, s in raw.items()}

    exact, f1 = thresholded(exact_raw), thresholded(f1_raw)

    def block(qids: list[str]) -> dict[str, float]:
        n = len(qids)
        return {"exact": 100.0 * sum(exact[q] for q in qids) / n,
                "f1": 100.0 * sum(f1[q] for q in qids) / n, "total": n}

    out: dict[str, Any] = block(list(exact))
    for name, flag in (("HasAns", True), ("NoAns", False)):
        qids = [q for q in exact if has_ans[q] == flag]
        if qids:
            out.update({f"{name}_{k}": v for k, v in block(qids).items()})
    if na_probs is not None:
        out["best_exact"], out["best_exact_thresh"] = find_best_thresh(predictions, exact_raw, probs, has_ans)
        out["best_f1"], out["best_f1_thresh"] = find_best_thresh(predictions, f1_raw, probs, has_ans)
    out["missing"] = len(missing)
    out["missing_ids"] = missing
    return out
