"""SQuAD reader, run_squad featurization, postprocessing round trip, evaluation and writers."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from wordpiece_adapter import WordPiece

from ptm_jax.data.tasks.squad import (examples_from_squad_records, read_squad, split_context)
from ptm_jax.data.tasks.squad_features import (convert_examples_to_features, doc_windows,
                                               features_to_arrays, improve_answer_span,
                                               max_context_window)
from ptm_jax.errors import ConfigError, DataError
from ptm_jax.evaluate.predictions import write_squad_predictions
from ptm_jax.evaluate.squad_eval import evaluate_v1, evaluate_v2, normalize_answer
from ptm_jax.evaluate.squad_postprocess import basic_tokenize, get_final_text, postprocess


@pytest.fixture(scope="module")
def tok() -> WordPiece:
    return WordPiece()


@pytest.fixture(scope="module")
def dev(shared_data):
    path = shared_data / "squad" / "dev-v1.1.json"
    examples, report = read_squad(path)
    return json.loads(path.read_text(encoding="utf-8")), examples, report


def _squad_file(tmp_path, qas, context="The leader was John Smith (1895-1943).", version="v2.0"):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"version": version, "data": [
        {"title": "T", "paragraphs": [{"context": context, "qas": qas}]}]}), encoding="utf-8")
    return path


# ------------------------------------------------------------------ reader

def test_real_dev_counts_and_gold_predictions_score_100(dev):
    data, examples, report = dev
    assert len(examples) == report.questions == 10570
    assert report.articles == 48 and report.paragraphs == 2067 and report.answers == 34726
    assert report.unmatched == [] and report.version == "1.1"
    preds = {e.qas_id: e.answers[0][0] for e in examples}
    out = evaluate_v1(data, preds)
    assert out["exact_match"] == 100.0 and out["f1"] == 100.0 and out["missing"] == 0
    e = examples[0]
    assert e.doc_tokens[e.start_position:e.end_position + 1] == ["Denver", "Broncos"]


def _reference_split(context):
    """run_squad's character loop, written out as the specification."""
    words, c2w, prev_ws = [], [], True
    for c in context:
        if c in " \t\r\n" or ord(c) == 0x202F:
            prev_ws = True
        else:
            if prev_ws:
                words.append(c)
            else:
                words[-1] += c
            prev_ws = False
        c2w.append(len(words) - 1)
    return words, c2w


def test_split_context_matches_run_squad_loop(dev):
    data = dev[0]
    contexts = [p["context"] for a in data["data"][:6] for p in a["paragraphs"]]
    contexts += ["  lead\tspace\u202fnarrow\u00a0nbsp  end \n", ""]
    for ctx in contexts:
        words, c2w = split_context(ctx)
        ref_words, ref_c2w = _reference_split(ctx)
        assert words == ref_words and c2w.tolist() == ref_c2w


def test_unfound_answer_is_reported_and_skipped_for_training_only(tmp_path, tok):
    path = _squad_file(tmp_path, [
        {"id": "ok", "question": "Born?", "answers": [{"text": "1895", "answer_start": 27}],
         "is_impossible": False},
        {"id": "bad", "question": "Who?", "answers": [{"text": "Jane Doe", "answer_start": 15}],
         "is_impossible": False},
        {"id": "none", "question": "Why?", "answers": [], "is_impossible": True,
         "plausible_answers": [{"text": "John", "answer_start": 15}]}])
    examples, report = read_squad(path)
    assert [e.qas_id for e in examples] == ["ok", "bad", "none"]
    assert report.unmatched == ["bad"] and report.impossible == 1 and report.trainable == 2
    assert examples[1].start_position is None and examples[2].start_position == -1
    train = convert_examples_to_features(examples, tok, max_seq_length=32, max_query_length=8,
                                         is_training=True)
    assert sorted({f.example_index for f in train}) == [0, 2]
    none_feat = [f for f in train if f.example_index == 2][0]
    assert (none_feat.start_position, none_feat.end_position, none_feat.is_impossible) == (0, 0, True)
    evalf = convert_examples_to_features(examples, tok, max_seq_length=32, max_query_length=8)
    assert sorted({f.example_index for f in evalf}) == [0, 1, 2]
    assert all(f.start_position is None for f in evalf)


def test_malformed_files_raise_with_location(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"data": [\n  {"paragraphs": [}\n]}', encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.json:2: malformed JSON"):
        read_squad(bad)
    path = _squad_file(tmp_path, [{"id": "q9", "answers": []}])
    with pytest.raises(DataError, match=r"data\[0\]\.paragraphs\[0\]\.qas\[0\] \(id q9\): missing key 'question'"):
        read_squad(path)
    path = _squad_file(tmp_path, [{"id": "q1", "question": "?", "answers": [{"text": "x"}]}])
    with pytest.raises(DataError, match=r"answers\[0\]: missing key 'answer_start'"):
        read_squad(path)
    with pytest.raises(DataError, match="not found"):
        read_squad(tmp_path / "nope.json")


def test_tfds_records_conversion():
    ctx = "Super Bowl 50 was an American football game."
    recs = [{"id": b"a1", "title": b"SB", "context": ctx.encode(), "question": b"What game?",
             "answers": {"text": [b"American football"], "answer_start": np.array([21])}},
            {"id": "a2", "title": "SB", "context": ctx, "question": "Which?", "is_impossible": True,
             "answers": {"text": [], "answer_start": []}}]
    examples, report = examples_from_squad_records(recs)
    assert report.paragraphs == 1 and report.impossible == 1 and report.unmatched == []
    assert examples[0].doc_tokens is examples[1].doc_tokens  # shared parse
    assert examples[0].doc_tokens[examples[0].start_position:examples[0].end_position + 1] == [
        "American", "football"]
    assert examples[1].is_impossible and examples[1].start_position == -1


# ------------------------------------------------------------------ features

def test_windows_and_max_context_follow_run_squad():
    assert doc_windows(10, 4, 2) == [(0, 4), (2, 4), (4, 4), (6, 4)]
    assert doc_windows(10, 4, 8) == [(0, 4), (4, 4), (8, 2)]  # advance by min(length, stride)
    assert doc_windows(3, 4, 2) == [(0, 3)]
    rng = np.random.default_rng(0)
    for _ in range(20):
        n, m, s = int(rng.integers(1, 60)), int(rng.integers(1, 12)), int(rng.integers(1, 12))
        spans = doc_windows(n, m, s)
        best = max_context_window(spans, n)
        for pos in range(n):  # the rule, written out: min(left, right) + 0.01 * length, first max
            scores = [(min(pos - st, st + ln - 1 - pos) + 0.01 * ln, i)
                      for i, (st, ln) in enumerate(spans) if st <= pos <= st + ln - 1]
            top = max(sc for sc, _ in scores)
            assert best[pos] == min(i for sc, i in scores if sc == top)


def test_improve_answer_span_finds_inner_piece(tok):
    pieces = tok.tokenize("(1895-1943).")
    assert pieces == ["(", "1895", "-", "1943", ")", "."]
    assert improve_answer_span(pieces, 0, 5, tok, "1895") == (1, 1)
    assert improve_answer_span(pieces, 0, 5, tok, "1895-1943") == (1, 3)
    assert improve_answer_span(tok.tokenize("Japanese"), 0, 0, tok, "Japan") == (0, 0)


def test_feature_layout_labels_and_out_of_window(tmp_path, tok):
    context = " ".join(f"w{i}" for i in range(40)) + " The leader was John Smith (1895-1943)."
    ans_start = context.index("1895")
    path = _squad_file(tmp_path, [{"id": "q", "question": "When was he born?",
                                   "answers": [{"text": "1895", "answer_start": ans_start}]}], context=context)
    examples, _ = read_squad(path)
    q = tok.tokenize("When was he born?")
    feats = convert_examples_to_features(examples, tok, max_seq_length=40, doc_stride=16,
                                         max_query_length=16, is_training=True)
    doc_pieces = [p for w in examples[0].doc_tokens for p in tok.tokenize(w)]
    window = 40 - len(q) - 3
    spans = doc_windows(len(doc_pieces), window, 16)
    assert len(feats) == len(spans) >= 3
    for f, (start, length) in zip(feats, spans):
        n = len(q) + 2 + length + 1
        assert f.tokens == ["[CLS]", *q, "[SEP]", *doc_pieces[start:start + length], "[SEP]"]
        assert f.input_ids[:n].tolist() == [tok.token_to_id(t) for t in f.tokens]
        assert (f.input_ids[n:] == tok.pad_id).all() and f.input_mask.sum() == n
        assert f.segment_ids[:len(q) + 2].sum() == 0 and f.segment_ids[len(q) + 2:n].all()
        assert f.segment_ids[n:].sum() == 0
        assert set(f.token_to_orig_map) == set(range(len(q) + 2, len(q) + 2 + length))
        if f.start_position > 0:
            assert f.tokens[f.start_position:f.end_position + 1] == ["1895"]
            assert examples[0].doc_tokens[f.token_to_orig_map[f.start_position]] == "(1895-1943)."
    labels = [(f.start_position, f.end_position) for f in feats]
    assert sum(s > 0 for s, _ in labels) >= 1 and (0, 0) in labels  # first window lacks the answer
    arrays = features_to_arrays(feats)
    assert arrays["input_ids"].shape == (len(feats), 40) and arrays["start_positions"].tolist() == [
        s for s, _ in labels]
    assert arrays["unique_ids"][0] == 1_000_000_000
    with pytest.raises(ConfigError, match="max_query_length"):
        convert_examples_to_features(examples, tok, max_seq_length=10, max_query_length=8)


def test_real_dev_round_trip_through_postprocess(dev, tok):
    _, examples, _ = dev
    titles = list(dict.fromkeys(e.title for e in examples))[:2]
    subset = [e for e in examples if e.title in titles]
    feats = convert_examples_to_features(subset, tok, is_training=True)
    assert len(subset) == 1057 and len(feats) >= len(subset)
    start = np.full((len(feats), 384), -10.0)
    end = np.full((len(feats), 384), -10.0)
    containing = 0
    for i, f in enumerate(feats):  # one-hot logits at the gold span of every window that holds it
        start[i, f.start_position] = end[i, f.end_position] = 10.0
        containing += f.start_position > 0
    preds, nbest, _ = postprocess(subset, feats, start, end)
    exact = [normalize_answer(preds[e.qas_id]) == normalize_answer(e.answers[0][0]) for e in subset]
    rate = float(np.mean(exact))
    print(f"round trip: {sum(exact)}/{len(subset)} = {rate:.4f} ({containing} answer windows)")
    assert rate >= 0.98
    for e, ok in zip(subset, exact):  # misses: the gold is a piece of a word (e.g. '8' in '20–18')
        if not ok:
            assert normalize_answer(e.answers[0][0]) in normalize_answer(preds[e.qas_id])
    assert all(len(v) >= 1 and v[0]["probability"] > 0.99 for v in nbest.values())


# ------------------------------------------------------------------ postprocess

def test_get_final_text_alignment():
    assert get_final_text("steve smith", "Steve Smith's") == "Steve Smith"
    assert get_final_text("1895", "(1895-1943).") == "1895"
    assert get_final_text("cafe", "Café!") == "Café"
    assert get_final_text("zzz", "Steve") == "Steve"  # not found -> original words
    assert basic_tokenize("Héllo, WORLD!\x00 北京") == ["hello", ",", "world", "!", "北", "京"]
    assert basic_tokenize("Héllo", do_lower_case=False) == ["Héllo"]


def _one_window(tok, context, question, max_seq_length=32):
    recs = [{"id": "q", "question": question, "context": context, "is_impossible": True,
             "answers": {"text": [], "answer_start": []}}]
    examples, _ = examples_from_squad_records(recs)
    feats = convert_examples_to_features(examples, tok, max_seq_length=max_seq_length, max_query_length=8)
    assert len(feats) == 1
    return examples[0], feats


def test_postprocess_rejection_rules_and_v2_null(tok):
    ex, feats = _one_window(tok, "Paris is the capital of France .", "capital?")
    f = feats[0]
    doc0 = len(tok.tokenize("capital?")) + 2  # first document position
    L = 32
    s, e = np.zeros((1, L)), np.zeros((1, L))
    s[0, 1], e[0, 1] = 50, 50  # question span: rejected (outside the document)
    s[0, doc0 + 3], e[0, doc0 + 1] = 40, 40  # end < start: rejected
    s[0, doc0], e[0, doc0] = 5, 5  # 'Paris'
    preds, _, _ = postprocess([ex], feats, s, e, n_best_size=2)
    assert preds == {"q": "empty"}  # top-2 pairs all rejected: run_squad's nonce answer
    preds, nbest, odds = postprocess([ex], feats, s, e, n_best_size=3)
    assert preds == {"q": "Paris is"} and odds == {}  # start 5 + end 40 beats 'Paris' (10)
    assert [n["text"] for n in nbest["q"]] == ["Paris is", "Paris"]
    preds, _, _ = postprocess([ex], feats, s, e, n_best_size=3, max_answer_length=1)
    assert preds == {"q": "Paris"}
    preds, _, _ = postprocess([ex], feats, s, e, n_best_size=3, max_answer_length=0)
    assert preds == {"q": "empty"}
    s2, e2 = np.zeros((1, L)), np.zeros((1, L))
    s2[0, 0], e2[0, 0] = 4.0, 4.0  # null score 8
    s2[0, doc0], e2[0, doc0 + 5] = 3.0, 3.5  # 'Paris ... France' score 6.5
    preds, nbest, odds = postprocess([ex], feats, s2, e2, version_2=True, null_threshold=0.0)
    assert odds["q"] == pytest.approx(1.5) and preds["q"] == ""
    preds, _, _ = postprocess([ex], feats, s2, e2, version_2=True, null_threshold=2.0)
    assert preds["q"] == "Paris is the capital of France"
    assert "" in [n["text"] for n in nbest["q"]]
    assert sum(n["probability"] for n in nbest["q"]) == pytest.approx(1.0)
    assert f.token_is_max_context[doc0:doc0 + 7].all()


def test_postprocess_v2_end_to_end_with_evaluate_v2(tmp_path, tok):
    ex, feats = _one_window(tok, "Paris is the capital of France .", "capital?")
    data = {"data": [{"paragraphs": [{"context": ex.context_text, "qas": [
        {"id": "q", "question": "capital?", "answers": [], "is_impossible": True}]}]}]}
    s, e = np.zeros((1, 32)), np.zeros((1, 32))
    s[0, 0] = e[0, 0] = 1.0
    preds, nbest, odds = postprocess([ex], feats, s, e, version_2=True)
    out = evaluate_v2(data, preds, na_probs=odds)
    assert out["exact"] == 100.0 and out["NoAns_total"] == 1
    written = write_squad_predictions(tmp_path, preds, nbest, odds)
    assert sorted(os.path.basename(p) for p in written.values()) == [
        "nbest_predictions.json", "null_odds.json", "predictions.json"]
    assert json.loads(open(written["predictions"]).read()) == preds
    assert json.loads(open(written["null_odds"]).read())["q"] == pytest.approx(odds["q"])
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]
