"""GLUE metrics vs scikit-learn/scipy, SQuAD EM/F1 on crafted cases, NER F1 vs seqeval."""
from __future__ import annotations

import random

import numpy as np
import pytest
from scipy import stats
from seqeval.metrics import classification_report, f1_score as seq_f1
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef as sk_mcc

from ptm_jax.data.tasks.conll import read_conll
from ptm_jax.errors import ConfigError
from ptm_jax.evaluate.glue_metrics import (accuracy, f1_binary, glue_score, matthews_corrcoef,
                                           pearson, rank_average, spearman, task_metrics)
from ptm_jax.evaluate.ner_metrics import get_entities, ner_f1, ner_report
from ptm_jax.evaluate.squad_eval import (evaluate_v1, evaluate_v2, f1_v1, f1_v2, find_best_thresh,
                                         normalize_answer, raw_scores_v2)


# ---------------------------------------------------------------- GLUE

@pytest.mark.parametrize("seed,k", [(0, 2), (1, 2), (2, 3), (3, 5)])
def test_classification_metrics_match_sklearn(seed, k):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, 500)
    p = np.where(rng.random(500) < 0.6, y, rng.integers(0, k, 500))
    assert matthews_corrcoef(p, y) == pytest.approx(sk_mcc(y, p), abs=1e-12)
    assert accuracy(p, y) == pytest.approx(accuracy_score(y, p), abs=1e-12)
    if k == 2:
        assert f1_binary(p, y) == pytest.approx(f1_score(y, p), abs=1e-12)


def test_mcc_hand_computed_and_degenerate():
    # tp=3 tn=2 fp=1 fn=2: (6-2)/sqrt(4*5*3*4) = 4/sqrt(240)
    y = [1, 1, 1, 1, 1, 0, 0, 0]
    p = [1, 1, 1, 0, 0, 0, 0, 1]
    assert matthews_corrcoef(p, y) == pytest.approx(4 / np.sqrt(240), abs=1e-12)
    assert matthews_corrcoef([1, 1, 1], [0, 1, 0]) == 0.0  # one predicted class
    assert matthews_corrcoef([0, 0, 0], [0, 0, 0]) == 0.0
    assert sk_mcc([0, 1, 0], [1, 1, 1]) == 0.0
    assert f1_binary([0, 0], [0, 0]) == 0.0 == f1_score([0, 0], [0, 0], zero_division=0)
    assert f1_binary(p, y) == pytest.approx(2 * 3 / (2 * 3 + 1 + 2))


def test_correlations_match_scipy_including_ties():
    rng = np.random.default_rng(7)
    y = np.round(rng.uniform(0, 5, 400), 1)  # many ties
    p = np.round(y + rng.normal(0, 1.0, 400), 0)  # heavy ties
    assert pearson(p, y) == pytest.approx(stats.pearsonr(p, y)[0], abs=1e-12)
    assert spearman(p, y) == pytest.approx(stats.spearmanr(p, y)[0], abs=1e-12)
    np.testing.assert_allclose(rank_average(p), stats.rankdata(p, method="average"))
    assert spearman([1, 2, 2, 3], [10, 20, 20, 30]) == pytest.approx(1.0)
    assert pearson([1.0, 1.0, 1.0], [1, 2, 3]) == 0.0  # constant side (scipy: nan)


def test_task_metrics_keys_and_logits():
    y = np.array([0, 1, 1, 0])
    logits = np.array([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0], [1.0, 0.5]])  # argmax 0,1,0,0
    m = task_metrics("mrpc", logits, y)
    assert m == {"f1": pytest.approx(2 / 3), "accuracy": 0.75}
    assert set(task_metrics("stsb", [1.0, 2.0, 3.5], [1.0, 2.5, 3.0])) == {"pearson", "spearman"}
    assert set(task_metrics("CoLA", y, y)) == {"mcc"} and task_metrics("cola", y, y)["mcc"] == 1.0
    with pytest.raises(ConfigError, match="differ in length"):
        task_metrics("sst2", [1, 0], [1])


def test_glue_score_reproduces_bert_large_leaderboard():
    # GLUE test leaderboard, BERT-large: score 80.5 (MNLI m/mm averaged as one task, AX not scored).
    per_task = {"cola": {"mcc": .605}, "sst2": {"accuracy": .949},
                "mrpc": {"f1": .893, "accuracy": .854}, "stsb": {"pearson": .876, "spearman": .865},
                "qqp": {"f1": .721, "accuracy": .893}, "mnli_matched": {"accuracy": .867},
                "mnli_mismatched": {"accuracy": .859}, "qnli": {"accuracy": .927},
                "rte": {"accuracy": .701}, "wnli": {"accuracy": .651}, "ax": {"mcc": .396}}
    assert glue_score(per_task) == pytest.approx(7.247 / 9, abs=1e-9)
    assert round(100 * glue_score(per_task), 1) == 80.5
    merged = {k: v for k, v in per_task.items() if not k.startswith("mnli")}
    merged["mnli"] = {"accuracy_m": .867, "accuracy_mm": .859}
    assert glue_score(merged) == pytest.approx(glue_score(per_task))
    assert glue_score({"rte": {"accuracy": 0.5}, "stsb": {"pearson": 0.8, "spearman": 0.6}}) == 0.6


# ---------------------------------------------------------------- SQuAD

def _dataset(qas):
    return {"version": "x", "data": [{"title": "t", "paragraphs": [{"context": "c", "qas": [
        {"id": qid, "question": "q", "answers": [{"text": t, "answer_start": 0} for t in golds]}
        for qid, golds in qas]}]}]}


def test_normalize_answer_rules():
    assert normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert normalize_answer("an apple, a pear") == "apple pear"
    assert normalize_answer("theatre") == "theatre"  # article only as a whole word
    assert normalize_answer("A-B") == "ab"  # hyphen is punctuation, removed without a space
    assert normalize_answer("“quoted”") == "“quoted”"  # only string.punctuation (ASCII) is removed


def test_f1_token_overlap_v1_and_v2():
    assert f1_v1("the cat sat", "cat sat down") == pytest.approx(2 * (2 / 3) * 1 / (2 / 3 + 1))
    assert f1_v1("", "") == 0.0 and f1_v2("", "") == 1.0
    assert f1_v2("", "something") == 0.0 and f1_v2("a", "") == 1.0  # 'a' normalizes to empty
    assert f1_v1("cat cat dog", "cat dog dog") == pytest.approx(2 / 3)


def test_evaluate_v1_max_over_golds_and_missing():
    data = _dataset([("q1", ["Denver Broncos", "the Broncos"]), ("q2", ["1990s", "the 1990s"]),
                     ("q3", ["blue whale"]), ("q4", ["x"])])
    preds = {"q1": "Broncos", "q2": "the 1990s.", "q3": "a whale"}
    out = evaluate_v1(data, preds)
    # q1: EM vs 'the Broncos'; q2: EM; q3: F1 = 2*(1)(1/2)/(1.5) = 2/3; q4 missing -> 0
    assert out["exact_match"] == pytest.approx(100 * 2 / 4)
    assert out["f1"] == pytest.approx(100 * (1 + 1 + 2 / 3 + 0) / 4)
    assert out["total"] == 4 and out["missing"] == 1 and out["missing_ids"] == ["q4"]


def test_evaluate_v2_no_answer_breakdown_threshold_and_best_thresh():
    data = _dataset([("h1", ["Paris"]), ("h2", ["blue whale"]), ("n1", []), ("n2", [])])
    preds = {"h1": "Paris", "h2": "whale", "n1": "", "n2": "London"}
    out = evaluate_v2(data, preds)
    assert out["exact"] == pytest.approx(100 * (1 + 0 + 1 + 0) / 4)
    assert out["f1"] == pytest.approx(100 * (1 + 2 / 3 + 1 + 0) / 4)
    assert out["HasAns_total"] == 2 and out["NoAns_total"] == 2
    assert out["HasAns_exact"] == 50.0 and out["NoAns_exact"] == 50.0 and out["missing"] == 0
    na = {"h1": 0.1, "h2": 0.6, "n1": 0.9, "n2": 0.7}
    # threshold 0.65: n2 (0.7) and n1 become "" -> both right
    out = evaluate_v2(data, preds, na_probs=na, na_prob_thresh=0.65)
    assert out["NoAns_exact"] == 100.0 and out["exact"] == pytest.approx(75.0)
    # sweep: start 2 (all null), +h1 1 -> 3 @0.1, +h2 0 -> 3, +n2 -1 -> 2, +n1 0 -> 2
    assert out["best_exact"] == pytest.approx(75.0) and out["best_exact_thresh"] == 0.1
    # F1: +h1 1 -> 3 @0.1, +h2 2/3 -> 3.667 @0.6, then -1, 0
    assert out["best_f1"] == pytest.approx(100 * (3 + 2 / 3) / 4) and out["best_f1_thresh"] == 0.6


def test_evaluate_v2_missing_prediction_counts_as_wrong():
    data = _dataset([("h1", ["Paris"]), ("n1", [])])
    out = evaluate_v2(data, {"h1": "Paris"}, na_probs={"h1": 0.2})
    assert out["exact"] == 50.0 and out["NoAns_exact"] == 0.0 and out["missing_ids"] == ["n1"]
    exact, _, has_ans, missing = raw_scores_v2(data, {"h1": "Paris"})
    assert find_best_thresh({"h1": "Paris"}, exact, {"h1": 0.2}, has_ans) == (50.0, 0.2)


# ---------------------------------------------------------------- NER

def _perturb(sentences, seed):
    rng = random.Random(seed)
    types = ["PER", "LOC", "ORG", "MISC"]
    out = []
    for tags in sentences:
        tags = list(tags)
        for i, t in enumerate(tags):
            r = rng.random()
            if r < 0.04 and t != "O":
                tags[i] = t[:2] + rng.choice(types)  # wrong type
            elif r < 0.07:
                tags[i] = "O" if t != "O" else rng.choice(["B-", "I-"]) + rng.choice(types)
            elif r < 0.08 and t.startswith("I-"):
                tags[i] = "B-" + t[2:]  # split an entity
        out.append(tags)
    return out


@pytest.mark.parametrize("to_iob2", [True, False])
def test_ner_metrics_match_seqeval_on_conll_testb(shared_data, to_iob2):
    sents, _ = read_conll(shared_data / "conll2003" / "eng.testb", scheme="iob1", to_iob2=to_iob2)
    gold = [s.tags for s in sents]
    pred = _perturb(gold, seed=11 + to_iob2)
    ours = ner_report(gold, pred)
    ref = classification_report(gold, pred, output_dict=True, digits=6)
    assert ours["micro"].f1 == pytest.approx(seq_f1(gold, pred), abs=1e-12)
    assert 0.6 < ours["micro"].f1 < 0.95
    for t in ("LOC", "MISC", "ORG", "PER"):
        assert ours[t].precision == pytest.approx(ref[t]["precision"], abs=1e-12)
        assert ours[t].recall == pytest.approx(ref[t]["recall"], abs=1e-12)
        assert ours[t].f1 == pytest.approx(ref[t]["f1-score"], abs=1e-12)
        assert ours[t].support == ref[t]["support"]
    assert ours["micro"].support == 5648  # CoNLL-2003 test set entity count
    assert ner_f1(gold, gold) == 1.0


def test_chunk_rules_on_iob1_iob2_iobes():
    assert get_entities(["I-PER", "I-PER", "B-PER", "O", "I-LOC"]) == [
        ("PER", 0, 1), ("PER", 2, 2), ("LOC", 4, 4)]
    assert get_entities(["B-PER", "I-PER", "I-LOC", "O"]) == [("PER", 0, 1), ("LOC", 2, 2)]
    assert get_entities(["S-PER", "B-LOC", "E-LOC", "E-LOC"]) == [
        ("PER", 0, 0), ("LOC", 1, 2), ("LOC", 3, 3)]
    assert get_entities([["B-PER"], ["I-PER"]]) == [("PER", 0, 0), ("PER", 2, 2)]
    rep = ner_report([["B-PER", "I-PER", "O"]], [["B-PER", "O", "O"]])
    assert (rep["micro"].precision, rep["micro"].recall, rep["micro"].f1) == (0.0, 0.0, 0.0)
