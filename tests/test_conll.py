"""CoNLL-2003 reader (IOB1 and IOB2 files), label alignment to WordPiece and the tag writer."""
from __future__ import annotations

import numpy as np
import pytest
from wordpiece_adapter import WordPiece

from ptm_jax.data.tasks.conll import (IGNORE_INDEX, align_labels, detect_scheme,
                                      examples_from_conll_records, iob1_to_iob2, read_conll,
                                      word_predictions)
from ptm_jax.errors import ConfigError, DataError
from ptm_jax.evaluate.ner_metrics import get_entities, ner_f1, ner_report
from ptm_jax.evaluate.predictions import write_conll_predictions

SPLITS = [("eng.train", "iob2/train.txt", 14041), ("eng.testa", "iob2/valid.txt", 3250),
          ("eng.testb", "iob2/test.txt", 3453)]


@pytest.mark.parametrize("iob1_name,iob2_name,count", SPLITS)
def test_real_iob1_and_iob2_files_agree(shared_data, iob1_name, iob2_name, count):
    root = shared_data / "conll2003"
    s1, r1 = read_conll(root / iob1_name, scheme="auto")
    s2, r2 = read_conll(root / iob2_name, scheme="auto")
    assert len(s1) == len(s2) == r1.sentences == r2.sentences == count
    assert (r1.scheme, r2.scheme) == ("iob1", "iob2") and r2.converted_tags == 0
    assert r1.converted_tags > 0 and r1.tokens == r2.tokens
    assert [s.words for s in s1] == [s.words for s in s2]
    gold1, gold2 = [s.tags for s in s1], [s.tags for s in s2]
    assert gold1 == gold2  # IOB1 converted to IOB2 equals the IOB2 release tag for tag
    assert set(get_entities(gold1)) == set(get_entities(gold2))
    raw, _ = read_conll(root / iob1_name, scheme="iob1", to_iob2=False)  # same chunks, unconverted
    assert get_entities([s.tags for s in raw]) == get_entities(gold1)
    assert ner_f1(gold1, gold1) == 1.0 and ner_f1(gold2, gold1) == 1.0
    assert r1.labels == r2.labels == ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG",
                                      "B-PER", "I-PER"]


def test_real_train_details(shared_data):
    sents, report = read_conll(shared_data / "conll2003" / "eng.train")
    assert report.documents == 946 and report.tokens == 203621
    assert sents[0].words == ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."]
    assert sents[0].tags == ["B-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O", "O"]
    assert sents[0].pos[:2] == ["NNP", "VBZ"] and sents[0].chunks[:2] == ["I-NP", "I-VP"]
    assert sents[0].line == 3
    assert ner_report([s.tags for s in sents], [s.tags for s in sents])["micro"].support == 23499


def test_iob1_to_iob2_and_detection():
    assert iob1_to_iob2(["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG", "I-ORG"]) == [
        "B-PER", "I-PER", "B-PER", "O", "B-LOC", "B-ORG", "I-ORG"]
    assert detect_scheme([["B-PER", "I-PER", "O"]]) == "iob2"
    assert detect_scheme([["O"], ["O", "I-LOC"]]) == "iob1"


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_malformed_lines_raise_with_file_and_line(tmp_path):
    p = _write(tmp_path / "a.txt", "-DOCSTART- -X- O O\n\nEU NNP I-NP I-ORG\nrejects VBZ I-VP\n")
    with pytest.raises(DataError, match=r"a\.txt:4: 3 columns where the file has 4"):
        read_conll(p)
    p = _write(tmp_path / "b.txt", "EU NNP I-NP I-ORG\nx NN I-NP PER\n")
    with pytest.raises(DataError, match=r"b\.txt:2: NER tag 'PER'"):
        read_conll(p)
    p = _write(tmp_path / "c.txt", "EU NNP I-NP B-ORG\n\nBonn NNP I-NP O\nis VBZ I-VP I-LOC\n")
    with pytest.raises(DataError, match=r"c\.txt:4: I-LOC opens an entity.*scheme='iob1'"):
        read_conll(p, scheme="iob2")
    sents, rep = read_conll(p, scheme="auto")
    assert rep.scheme == "iob1" and sents[1].tags == ["O", "B-LOC"] and sents[1].line == 3
    with pytest.raises(ConfigError, match="scheme"):
        read_conll(p, scheme="bio")
    with pytest.raises(DataError, match="not found"):
        read_conll(tmp_path / "missing.txt")


def test_tfds_records_conversion():
    recs = [{"tokens": [b"EU", b"rejects"], "pos": [1, 2], "chunks": [1, 2], "ner": np.array([3, 0])},
            {"tokens": ["Peter", "Blackburn"], "ner": ["B-PER", "I-PER"]}]
    sents = examples_from_conll_records(recs)
    assert sents[0].words == ["EU", "rejects"] and sents[0].tags == ["B-ORG", "O"]
    assert sents[1].tags == ["B-PER", "I-PER"]
    with pytest.raises(DataError, match="2 tokens but 1 tags"):
        examples_from_conll_records([{"tokens": ["a", "b"], "ner": [0]}])


def test_align_labels_first_piece_and_truncation():
    tok = WordPiece()
    words = ["Blackburn", "visited", "Gelsenkirchen", "."]
    labels = [7, 0, 5, 0]
    out = align_labels(words, labels, tok, max_seq_length=16)
    pieces = [tok.tokenize(w) for w in words]
    n = 2 + sum(map(len, pieces))
    assert out.input_ids[0] == tok.cls_id and out.input_ids[n - 1] == tok.sep_id
    assert out.input_mask.sum() == n and (out.input_ids[n:] == tok.pad_id).all()
    expect = [IGNORE_INDEX]
    for p, lab in zip(pieces, labels):
        expect += [lab] + [IGNORE_INDEX] * (len(p) - 1)
    expect += [IGNORE_INDEX] * (16 - len(expect))
    assert out.label_ids.tolist() == expect and out.truncated_words == 0
    assert len(pieces[2]) > 1  # a multi-piece word exercises the ignore index
    short = align_labels(words, labels, tok, max_seq_length=2 + len(pieces[0]) + 1)
    assert short.truncated_words == 2 and short.first_piece.tolist()[2:] == [-1, -1]
    id_to_label = ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-LOC", "I-ORG", "B-PER", "I-PER"]
    assert word_predictions(short.label_ids.clip(0), short.first_piece, id_to_label) == [
        "B-PER", "O", "O", "O"]


def test_align_and_inverse_round_trip_on_real_sentences(shared_data):
    tok = WordPiece()
    sents, report = read_conll(shared_data / "conll2003" / "eng.testa")
    label_to_id = {t: i for i, t in enumerate(report.labels)}
    sample = sents[:300]
    recovered, truncated = [], 0
    for s in sample:
        out = align_labels(s.words, [label_to_id[t] for t in s.tags], tok, max_seq_length=128)
        truncated += out.truncated_words
        logits = np.eye(len(report.labels))[out.label_ids.clip(0)]  # perfect tagger, [L, C]
        recovered.append(word_predictions(logits, out.first_piece, report.labels))
    assert truncated == 0
    assert recovered == [s.tags for s in sample]


def test_conll_writer_is_conlleval_readable(tmp_path):
    words = [["EU", "rejects", "German"], ["Peter"]]
    gold = [["B-ORG", "O", "B-MISC"], ["B-PER"]]
    pred = [["B-ORG", "O", "O"], ["B-PER"]]
    path = write_conll_predictions(tmp_path / "out" / "pred.txt", words, gold, pred)
    text = open(path).read()
    assert text == "EU B-ORG B-ORG\nrejects O O\nGerman B-MISC O\n\nPeter B-PER B-PER\n\n"
    blocks = [b.split("\n") for b in text.strip("\n").split("\n\n")]
    back_gold = [[ln.split()[1] for ln in b] for b in blocks]
    back_pred = [[ln.split()[2] for ln in b] for b in blocks]
    assert ner_f1(back_gold, back_pred) == pytest.approx(2 * (2 / 2) * (2 / 3) / (1 + 2 / 3))
    with pytest.raises(DataError, match="whitespace"):
        write_conll_predictions(tmp_path / "x.txt", [["New York"]], [["B-LOC"]], [["B-LOC"]])
