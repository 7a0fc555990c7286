"""GLUE readers (real files and crafted ones), TFDS record conversion and submission files."""
from __future__ import annotations

import pytest

from ptm_jax.data.tasks.glue import (GLUE_TASKS, examples_from_tfds_records, get_task, read_glue,
                                     task_file)
from ptm_jax.errors import ConfigError, DataError
from ptm_jax.evaluate.predictions import glue_submission_name, write_glue_submission

REAL_COUNTS = {
    ("sst2", "train"): 67349, ("sst2", "dev"): 872, ("sst2", "test"): 1821,
    ("cola", "train"): 8551, ("cola", "dev"): 1043, ("cola", "test"): 1063,
    ("mrpc", "train"): 3668, ("mrpc", "dev"): 408, ("mrpc", "test"): 1725,
    ("stsb", "train"): 5749, ("stsb", "dev"): 1500, ("stsb", "test"): 1379,
    ("rte", "train"): 2490, ("rte", "dev"): 277, ("rte", "test"): 3000,
    ("wnli", "train"): 635, ("wnli", "dev"): 71, ("wnli", "test"): 146,
    ("ax", "test"): 1104,
}


@pytest.mark.parametrize("task,split", sorted(REAL_COUNTS))
def test_real_glue_split_counts_and_label_presence(shared_data, task, split):
    examples, report = read_glue(shared_data / "glue", task, split)
    assert len(examples) == report.examples == report.rows == REAL_COUNTS[(task, split)]
    spec = get_task(task)
    labelled = split != "test"
    assert all((e.label is not None) == labelled for e in examples)
    assert all(e.text_a for e in examples)
    assert all((e.text_b is not None) == spec.is_pair for e in examples)
    if labelled and spec.labels is not None:
        assert sum(report.label_counts.values()) == len(examples)
        assert all(0 <= e.label < spec.num_labels for e in examples)


def test_real_glue_known_label_histograms_and_headers(shared_data):
    glue = shared_data / "glue"
    _, sst_dev = read_glue(glue, "sst2", "dev")
    assert sst_dev.label_counts == {"0": 428, "1": 444} and sst_dev.header_lines == 1
    _, cola_dev = read_glue(glue, "cola", "dev")
    assert cola_dev.label_counts == {"0": 322, "1": 721} and cola_dev.header_lines == 0
    _, rte_dev = read_glue(glue, "rte", "dev")
    assert rte_dev.label_counts == {"entailment": 146, "not_entailment": 131}
    cola_train, _ = read_glue(glue, "cola", "train")  # no header: line 1 is an example
    assert cola_train[0].line == 1 and cola_train[0].label == 1
    assert cola_train[0].text_a.startswith("Our friends won't buy this analysis")


def test_real_mrpc_bom_header_and_columns(shared_data):
    examples, report = read_glue(shared_data / "glue", "mrpc", "train")
    assert report.header_lines == 1
    first = examples[0]
    assert first.label == 1 and first.line == 2
    assert first.text_a.startswith("Amrozi accused his brother")
    assert first.text_b.startswith("Referring to him as only")
    test, _ = read_glue(shared_data / "glue", "mrpc", "test")
    assert test[0].guid == "test-0" and test[-1].guid == "test-1724"


def test_real_stsb_scores_are_floats_in_range(shared_data):
    examples, _ = read_glue(shared_data / "glue", "stsb", "dev")
    scores = [e.label for e in examples]
    assert examples[0].label == 5.0 and examples[1].label == 4.75
    assert min(scores) == 0.0 and max(scores) == 5.0


def test_real_quotes_are_not_csv_quoting(shared_data):
    # MRPC dev line 2 opens a field with '"'; QUOTE_NONE keeps it as a character.
    examples, _ = read_glue(shared_data / "glue", "mrpc", "dev")
    assert examples[0].text_b.startswith('" The foodservice pie business')
    assert len(examples) == 408


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_missing_column_raises_with_file_and_line(tmp_path):
    _write(tmp_path / "RTE" / "train.tsv",
           "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tentailment\n1\tA only\n")
    with pytest.raises(DataError, match=r"RTE/train\.tsv:3: 2 tab-separated columns"):
        read_glue(tmp_path, "rte", "train")


def test_bad_label_and_bad_score_raise_with_line(tmp_path):
    _write(tmp_path / "RTE" / "dev.tsv", "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tmaybe\n")
    with pytest.raises(DataError, match=r"RTE/dev\.tsv:2: label 'maybe'"):
        read_glue(tmp_path, "rte", "dev")
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    _write(tmp_path / "STS-B" / "train.tsv", header + "0\tg\tf\ty\t0\ts\ts\tA.\tB.\t4.0\n"
           "1\tg\tf\ty\t1\ts\ts\tA.\tB.\thigh\n")
    with pytest.raises(DataError, match=r"STS-B/train\.tsv:3: score 'high'"):
        read_glue(tmp_path, "stsb", "train")


def test_blank_line_inside_is_an_error_but_trailing_blank_lines_are_not(tmp_path):
    head = "index\tsentence1\tsentence2\tlabel\n"
    _write(tmp_path / "WNLI" / "train.tsv", head + "0\tA.\tB.\t1\n\n\n")
    ex, rep = read_glue(tmp_path, "wnli", "train")
    assert len(ex) == rep.rows == 1
    _write(tmp_path / "WNLI" / "dev.tsv", head + "0\tA.\tB.\t1\n\n1\tC.\tD.\t0\n")
    with pytest.raises(DataError, match=r"WNLI/dev\.tsv:3: empty line"):
        read_glue(tmp_path, "wnli", "dev")


def test_missing_file_and_unknown_task_or_split(tmp_path):
    with pytest.raises(DataError, match=r"QNLI/train\.tsv: GLUE file not found"):
        read_glue(tmp_path, "qnli", "train")
    with pytest.raises(DataError, match="diagnostic file not found"):
        read_glue(tmp_path, "ax", "test")
    with pytest.raises(ConfigError, match="unknown GLUE task"):
        read_glue(tmp_path, "squad", "train")
    with pytest.raises(ConfigError, match="no split 'dev'"):
        read_glue(tmp_path, "mnli", "dev")


def test_mnli_qqp_qnli_layouts_from_crafted_files(tmp_path):
    mnli_head = ("index\tpromptID\tpairID\tgenre\ts1_bp\ts2_bp\ts1_p\ts2_p\tsentence1\tsentence2\t"
                 "label1\tgold_label\n")
    _write(tmp_path / "MNLI" / "dev_matched.tsv",
           mnli_head + "0\t1\t1n\tgov\tx\tx\tx\tx\tThe cat sat.\tA cat sat.\tentailment\tentailment\n"
           "1\t2\t2c\tgov\tx\tx\tx\tx\tIt rains.\tIt is dry.\tcontradiction\tcontradiction\n")
    ex, rep = read_glue(tmp_path, "mnli", "dev_matched")
    assert [(e.text_a, e.text_b, e.label) for e in ex] == [
        ("The cat sat.", "A cat sat.", 1), ("It rains.", "It is dry.", 0)]
    assert rep.label_counts == {"contradiction": 1, "entailment": 1}
    _write(tmp_path / "MNLI" / "test_mismatched.tsv",
           "index\tpromptID\tpairID\tgenre\ta\tb\tc\td\tsentence1\tsentence2\n"
           "7\t1\t1\tfic\tx\tx\tx\tx\tP.\tH.\n")
    ex, _ = read_glue(tmp_path, "mnli", "test_mismatched")
    assert ex[0].guid == "test_mismatched-7" and ex[0].label is None and ex[0].text_b == "H."
    _write(tmp_path / "QQP" / "train.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
           "5\t1\t2\tHow?\tWhy?\t0\n6\t3\t4\tWho?\tWho is?\t1\n")
    ex, _ = read_glue(tmp_path, "qqp", "train")
    assert [(e.text_a, e.text_b, e.label) for e in ex] == [("How?", "Why?", 0), ("Who?", "Who is?", 1)]
    _write(tmp_path / "QQP" / "test.tsv", "id\tquestion1\tquestion2\n0\tA?\tB?\n")
    assert read_glue(tmp_path, "qqp", "test")[0][0].text_b == "B?"
    _write(tmp_path / "QNLI" / "dev.tsv", "index\tquestion\tsentence\tlabel\n0\tQ?\tS.\tnot_entailment\n")
    assert read_glue(tmp_path, "qnli", "dev")[0][0].label == 1
    _write(tmp_path / "AX" / "AX.tsv", "index\tsentence1\tsentence2\n0\tA.\tB.\n")
    assert task_file(tmp_path, "ax", "test").endswith("AX/AX.tsv")


def test_tfds_records_remap_labels_by_name():
    recs = [{"premise": b"P one.", "hypothesis": b"H one.", "label": 0, "idx": 3},
            {"premise": "P two.", "hypothesis": "H two.", "label": 2, "idx": 4},
            {"premise": "P three.", "hypothesis": "H three.", "label": 1, "idx": 5}]
    ex = examples_from_tfds_records("mnli", "dev_matched", recs)
    labels = GLUE_TASKS["mnli"].labels
    # TFDS order entailment, neutral, contradiction -> ours contradiction, entailment, neutral
    assert [labels[e.label] for e in ex] == ["entailment", "contradiction", "neutral"]
    assert ex[0].text_a == "P one." and ex[0].guid == "dev_matched-3"
    test = examples_from_tfds_records("sst2", "test", [{"sentence": b"ok .", "label": -1, "idx": 0}])
    assert test[0].label is None and test[0].text_b is None
    cola = examples_from_tfds_records("cola", "train", [{"sentence": "x", "label": 1, "idx": 0}])
    assert cola[0].label == 1
    wnli = examples_from_tfds_records("wnli", "train", [{"sentence1": "a", "sentence2": "b", "label": 1}])
    assert wnli[0].label == 1  # TFDS 'entailment' (index 1) is the GLUE file's label "1"
    rte = examples_from_tfds_records("rte", "train", [{"sentence1": "a", "sentence2": "b", "label": 1}])
    assert GLUE_TASKS["rte"].labels[rte[0].label] == "not_entailment"
    stsb = examples_from_tfds_records("stsb", "dev", [{"sentence1": "a", "sentence2": "b", "label": 3.2}])
    assert stsb[0].label == pytest.approx(3.2)
    with pytest.raises(DataError, match="missing feature"):
        examples_from_tfds_records("qqp", "train", [{"sentence1": "a", "label": 0}])


def test_glue_submission_files(tmp_path):
    assert [glue_submission_name(t, s) for t, s in [
        ("sst2", "test"), ("mnli", "test_matched"), ("mnli", "test_mismatched"), ("ax", "test"),
        ("sts-b", "test"), ("cola", "test")]] == [
        "SST-2.tsv", "MNLI-m.tsv", "MNLI-mm.tsv", "AX.tsv", "STS-B.tsv", "CoLA.tsv"]
    path = write_glue_submission(tmp_path, "mnli", [[0.1, 2.0, 0.3], [3.0, 0.0, 0.0]], split="test_matched")
    assert open(path).read() == "index\tprediction\n0\tentailment\n1\tcontradiction\n"
    path = write_glue_submission(tmp_path, "stsb", [4.12345, 0.5])
    assert open(path).read() == "index\tprediction\n0\t4.123\n1\t0.500\n"
    path = write_glue_submission(tmp_path, "rte", [1, 0], indices=[10, 11])
    assert open(path).read().splitlines()[1:] == ["10\tnot_entailment", "11\tentailment"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["MNLI-m.tsv", "RTE.tsv", "STS-B.tsv"]
    with pytest.raises(ConfigError, match="class id 3"):
        write_glue_submission(tmp_path, "sst2", [3])
    with pytest.raises(ConfigError, match="takes submissions"):
        write_glue_submission(tmp_path, "sst2", [1], split="dev")
