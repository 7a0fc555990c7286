"""SQuAD logits -> answer texts: n-best span search, text projection, v2 null decision.

Follows google-research/bert run_squad.py (write_predictions, get_final_text, _get_best_indexes,
_compute_softmax). Per window, the n_best_size highest start and end logits (ties: lower index
first) form candidate spans; a span is rejected when an end lies outside the document part, the
start is not at its max-context window, end < start, or it is longer than max_answer_length.
Candidates of all windows are ranked by start+end logit. The text of a span is the original
whitespace words it covers, trimmed to the de-tokenized pieces by a character alignment under
BERT's basic tokenization (get_final_text). v2: the null score is the minimum over windows of
start[c] + end[c] at the window's null position c (BERT's [CLS] at 0, XLNet's <cls> at
``cls_index``); the answer is "" iff null_score - best_non_null > null_threshold, and that difference
is returned per question for threshold search.
"""
from __future__ import annotations

import math
import unicodedata
from collections import defaultdict
from typing import Any, Sequence

import numpy as np

from ptm_jax.data.tasks.squad import SquadExample
from ptm_jax.data.tasks.squad_features import SquadFeature
from ptm_jax.errors import ConfigError

NO_SPAN_NULL_ODDS = 1e9  # null odds reported when no valid non-null span exists (run_squad crashes)


# --- BERT basic tokenization (tokenization.py BasicTokenizer), used only to align answer text ---

def _is_whitespace(ch: str) -> bool:
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def _is_control(ch: str) -> bool:
    return ch not in "\t\n\r" and unicodedata.category(ch) in ("Cc", "Cf")


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


_CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
        (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def _is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _CJK)


def basic_tokenize(text: str, do_lower_case: bool = True) -> list[str]:
    """BERT BasicTokenizer: clean, space CJK, lower + strip accents, split off punctuation."""
    chars = []
    for ch in text:
        if ord(ch) == 0 or ord(ch) == 0xFFFD or _is_control(ch):
            continue
        if _is_whitespace(ch):
            chars.append(" ")
        elif _is_cjk(ch):
            chars.append(f" {ch} ")
        else:
            chars.append(ch)
    out: list[str] = []
    for word in "".join(chars).split():
        if do_lower_case:
            word = "".join(c for c in unicodedata.normalize("NFD", word.lower())
                           if unicodedata.category(c) != "Mn")
        current = ""
        for ch in word:
            if _is_punctuation(ch):
                if current:
                    out.append(current)
                out.append(ch)
                current = ""
            else:
                current += ch
        if current:
            out.append(current)
    return out


def _strip_spaces(text: str) -> tuple[str, list[int]]:
    """Text without spaces and, for each kept character, its index in `text`."""
    keep = [i for i, c in enumerate(text) if c != " "]
    return "".join(text[i] for i in keep), keep


def get_final_text(pred_text: str, orig_text: str, do_lower_case: bool = True) -> str:
    """Project de-tokenized prediction `pred_text` onto the original words `orig_text`
    ('steve smith' in "Steve Smith's" -> 'Steve Smith'); falls back to `orig_text`."""
    tok_text = " ".join(basic_tokenize(orig_text, do_lower_case))
    start = tok_text.find(pred_text)
    if start == -1:
        return orig_text
    end = start + len(pred_text) - 1
    orig_ns, orig_map = _strip_spaces(orig_text)
    tok_ns, tok_map = _strip_spaces(tok_text)
    if len(orig_ns) != len(tok_ns):
        return orig_text
    tok_s_to_ns = {s: ns for ns, s in enumerate(tok_map)}
    if start not in tok_s_to_ns or end not in tok_s_to_ns:
        return orig_text
    return orig_text[orig_map[tok_s_to_ns[start]]:orig_map[tok_s_to_ns[end]] + 1]


def _softmax(scores: Sequence[float]) -> list[float]:
    if not scores:
        return []
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def _span_text(feature: SquadFeature, example: SquadExample, s: int, e: int,
               do_lower_case: bool) -> str:
    if feature.sentencepiece:  # U+2581 starts a word
        tok_text = "".join(feature.tokens[s:e + 1]).replace("\u2581", " ")
    else:
        tok_text = " ".join(feature.tokens[s:e + 1]).replace(" ##", "").replace("##", "")
    tok_text = " ".join(tok_text.strip().split())
    orig_text = " ".join(example.doc_tokens[feature.token_to_orig[s]:feature.token_to_orig[e] + 1])
    return get_final_text(tok_text, orig_text, do_lower_case)


def _candidates(feature: SquadFeature, start: np.ndarray, end: np.ndarray, n_best_size: int,
                max_answer_length: int) -> tuple[np.ndarray, np.ndarray]:
    """Valid (start, end) index pairs in run_squad's enumeration order (start rank, then end rank)."""
    # top-n over the whole row, padding included, as run_squad ranks before it filters
    s_idx = np.argsort(-start, kind="stable")[:n_best_size]
    e_idx = np.argsort(-end, kind="stable")[:n_best_size]
    ss, ee = np.meshgrid(s_idx, e_idx, indexing="ij")
    ss, ee = ss.ravel(), ee.ravel()
    in_doc = feature.token_to_orig
    ok = (in_doc[ss] >= 0) & (in_doc[ee] >= 0) & feature.token_is_max_context[ss]
    ok &= (ee >= ss) & (ee - ss + 1 <= max_answer_length)
    return ss[ok], ee[ok]


def postprocess(examples: Sequence[SquadExample], features: Sequence[SquadFeature],
                start_logits: Any, end_logits: Any, n_best_size: int = 20,
                max_answer_length: int = 30, version_2: bool = False, null_threshold: float = 0.0,
                do_lower_case: bool = True
                ) -> tuple[dict[str, str], dict[str, list[dict[str, Any]]], dict[str, float]]:
    """Answer text per question from per-feature logits ([num_features, L], rows in `features`
    order). Returns (predictions, nbest, null_odds); null_odds is filled only with `version_2`."""
    start_all = np.asarray(start_logits, dtype=np.float64)
    end_all = np.asarray(end_logits, dtype=np.float64)
    if start_all.shape != end_all.shape or start_all.ndim != 2 or start_all.shape[0] != len(features):
        raise ConfigError(f"start/end logits must both be [num_features={len(features)}, seq_len]; got "
                          f"{start_all.shape} and {end_all.shape}")
    if features and start_all.shape[1] != len(features[0].token_to_orig):
        raise ConfigError(f"logits have {start_all.shape[1]} positions but features were built with "
                          f"max_seq_length={len(features[0].token_to_orig)}")
    by_example: dict[int, list[int]] = defaultdict(list)
    for i, f in enumerate(features):
        by_example[f.example_index].append(i)

    predictions: dict[str, str] = {}
    nbest_all: dict[str, list[dict[str, Any]]] = {}
    null_odds: dict[str, float] = {}
    for ex_index, ex in enumerate(examples):
        rows = by_example.get(ex_index, [])
        cand_f, cand_s, cand_e, cand_score = [], [], [], []
        score_null, null_row, null_s, null_e = 1e6, -1, 0.0, 0.0
        for row in rows:
            feat, start, end = features[row], start_all[row], end_all[row]
            c = feat.cls_index
            if version_2 and start[c] + end[c] < score_null:
                score_null, null_row, null_s, null_e = start[c] + end[c], row, start[c], end[c]
            ss, ee = _candidates(feat, start, end, n_best_size, max_answer_length)
            cand_f.append(np.full(len(ss), row))
            cand_s.append(ss)
            cand_e.append(ee)
            cand_score.append(start[ss] + end[ee])
        if version_2:  # the null span of the window with the lowest null score
            cand_f.append(np.array([null_row]))
            cand_s.append(np.array([-1]))  # -1: the null answer (a document span never starts there)
            cand_e.append(np.array([-1]))
            cand_score.append(np.array([null_s + null_e]))
        nbest: list[tuple[str, float, float]] = []
        if cand_f:
            fs, ss, ee = np.concatenate(cand_f), np.concatenate(cand_s), np.concatenate(cand_e)
            order = np.argsort(-np.concatenate(cand_score), kind="stable")
            seen: set[str] = set()
            for k in order:
                if len(nbest) >= n_best_size:
                    break
                row, s, e = int(fs[k]), int(ss[k]), int(ee[k])
                if s >= 0:
                    text = _span_text(features[row], ex, s, e, do_lower_case)
                    if text in seen:
                        continue
                    nbest.append((text, float(start_all[row, s]), float(end_all[row, e])))
                else:
                    text = ""
                    nbest.append((text, float(null_s), float(null_e)))
                seen.add(text)
            if version_2 and "" not in seen:
                nbest.append(("", float(null_s), float(null_e)))
        if not nbest:
            nbest.append(("empty", 0.0, 0.0))
        probs = _softmax([s + e for _, s, e in nbest])
        nbest_all[ex.qas_id] = [{"text": t, "probability": p, "start_logit": s, "end_logit": e}
                                for (t, s, e), p in zip(nbest, probs)]
        if not version_2:
            predictions[ex.qas_id] = nbest[0][0]
            continue
        best = next((entry for entry in nbest if entry[0]), None)
        if best is None:
            null_odds[ex.qas_id] = NO_SPAN_NULL_ODDS
            predictions[ex.qas_id] = ""
            continue
        diff = float(score_null - best[1] - best[2])
        null_odds[ex.qas_id] = diff
        predictions[ex.qas_id] = "" if diff > null_threshold else best[0]
    return predictions, nbest_all, null_odds
