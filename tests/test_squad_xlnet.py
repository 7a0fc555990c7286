"""XLNet on SQuAD (zihangdai/xlnet run_squad.py layout `doc <sep> query <sep> <cls>`): features, SentencePiece
answer text, the null answer at <cls>, and a short finetuning run through the one loop."""
from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from ptm_jax.config import FinetuneConfig, MeshConfig
from ptm_jax.config_loading import load_config
from ptm_jax.data.tasks.sections import SquadConfig
from ptm_jax.data.tasks.squad import read_squad
from ptm_jax.data.tasks.squad_features import convert_examples_to_features
from ptm_jax.evaluate.squad_eval import normalize_answer
from ptm_jax.evaluate.squad_postprocess import postprocess
from ptm_jax.objectives.span_qa import SpanQAObjective
from ptm_jax.parallel.mesh import make_mesh
from ptm_jax.train.loop import compile_objective, evaluate, fit

LEN, STRIDE, QUERY = 160, 64, 32


@pytest.fixture(scope="module")
def squad_sp(shared_data, tmp_path_factory):
    from ptm_jax.data.tokenizers import train_sentencepiece

    examples, _ = read_squad(shared_data / "squad" / "dev-v1.1.json")
    titles = list(dict.fromkeys(e.title for e in examples))[:2]
    subset = [e for e in examples if e.title in titles]
    texts = list(dict.fromkeys(e.context_text for e in subset)) + [e.question_text for e in subset]
    sp = train_sentencepiece(iter(texts), 1000, tmp_path_factory.mktemp("sp"), "unigram")
    return subset, sp


def test_xlnet_features_are_doc_sep_query_sep_cls_with_labels_at_the_answer(squad_sp):
    subset, sp = squad_sp
    feats = convert_examples_to_features(subset[:200], sp, max_seq_length=LEN, doc_stride=STRIDE,
                                         max_query_length=QUERY, is_training=True, layout="document_first")
    assert len(feats) > 200
    in_window = 0
    for f in feats:
        ex = subset[f.example_index]
        q = sp.tokenize(ex.question_text)[:QUERY]
        d = int((f.token_to_orig >= 0).sum())  # document pieces come first
        assert (f.token_to_orig[:d] >= 0).all() and f.cls_index == d + len(q) + 2
        ids = f.input_ids
        assert ids[d] == sp.sep_id and ids[f.cls_index - 1] == sp.sep_id and ids[f.cls_index] == sp.cls_id
        assert ids[d + 1:f.cls_index - 1].tolist() == [sp.token_to_id(t) for t in q]
        segs = f.segment_ids[:f.cls_index + 1].tolist()
        assert segs == [0] * (d + 1) + [1] * (len(q) + 1) + [2]
        assert f.input_mask.sum() == f.cls_index + 1 and f.sentencepiece
        if f.start_position != f.cls_index:  # the labelled pieces spell the answer
            in_window += 1
            text = "".join(f.tokens[f.start_position:f.end_position + 1]).replace("\u2581", " ")
            assert normalize_answer(ex.orig_answer_text).replace(" ", "") in \
                normalize_answer(text).replace(" ", "")
        else:
            assert f.end_position == f.cls_index
    assert in_window >= 200  # every question's answer lies whole in at least one window


def test_xlnet_gold_logits_round_trip_to_the_answers_and_null_is_read_at_cls(squad_sp):
    subset, sp = squad_sp
    feats = convert_examples_to_features(subset, sp, max_seq_length=LEN, doc_stride=STRIDE, max_query_length=QUERY,
                                         is_training=True, layout="document_first")
    start = np.full((len(feats), LEN), -10.0)
    end = np.full((len(feats), LEN), -10.0)
    for i, f in enumerate(feats):
        start[i, f.start_position] = end[i, f.end_position] = 10.0
    preds, _, _ = postprocess(subset, feats, start, end, do_lower_case=False)
    exact = [normalize_answer(preds[e.qas_id]) == normalize_answer(e.answers[0][0]) for e in subset]
    rate = float(np.mean(exact))
    print(f"XLNet layout round trip: {sum(exact)}/{len(subset)} = {rate:.4f}")
    assert rate >= 0.98
    # v2: the window's null score is start + end at <cls>; with the gold spans suppressed it wins
    start2, end2 = np.full_like(start, -10.0), np.full_like(end, -10.0)
    for i, f in enumerate(feats):
        start2[i, f.cls_index] = end2[i, f.cls_index] = 10.0
    preds2, _, odds = postprocess(subset, feats, start2, end2, version_2=True, null_threshold=0.0,
                                  do_lower_case=False)
    assert all(p == "" for p in preds2.values()) and min(odds.values()) > 0


def test_xlnet_squad_finetunes_through_the_loop_and_scores_officially(squad_sp, tmp_path):
    subset, sp = squad_sp
    model_cfg = dataclasses.replace(load_config("xlnet_tiny").model, vocab_size=sp.vocab_size, mem_len=0)
    fcfg = FinetuneConfig(max_seq_length=LEN, batch_size=16, learning_rate=2e-3)
    train, dev = subset[:96], subset[:48]
    obj = SpanQAObjective(model_cfg, fcfg, train, dev, sp, name="squad", do_lower_case=False,
                          squad=SquadConfig(doc_stride=STRIDE, max_query_length=QUERY))
    assert type(obj.model).__name__ == "XLNetForQuestionAnswering"
    cfg = load_config("xlnet_tiny", ["train.batch_size=16", "train.steps=40", "train.warmup_steps=4",
                                     "train.learning_rate=2e-3", "train.eval_every=1000",
                                     "train.checkpoint_every=1000", "train.progress_bar=false"])
    mesh = make_mesh(MeshConfig(4, 2, 1))
    result = fit(obj, cfg.train, mesh, tmp_path / "finetune-squad")
    assert result.step == 40
    compiled = compile_objective(obj, cfg.train, mesh)
    before = evaluate(obj, compiled, compiled.init_fn(jax.random.key(0)).params, mesh, 16)
    metrics = evaluate(obj, compiled, result.state.params, mesh, 16)
    print("XLNet tiny SQuAD, the 48 evaluated questions are among the 96 trained on: before", before, "after", metrics)
    assert set(metrics) >= {"exact_match", "f1", "loss", "span_accuracy"}
    assert before["loss"] > 0.9 * np.log(LEN) and metrics["loss"] < 0.6 * np.log(LEN)
    assert before["f1"] < 5.0 and metrics["f1"] > before["f1"] + 8.0  # it learned the spans of its questions
