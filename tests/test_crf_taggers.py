"""The CRF as the output layer of both word taggers (``[tagging] head = "crf"``): the Transformer token
classification of the ``task`` job and the BiLSTM tagger of the ``features`` job, trained on real CoNLL-2003
sentences through the loop, scored by their Viterbi paths, kept and rebuilt by ``ptm eval``."""
from __future__ import annotations

import json

import numpy as np
import pytest

from ptm_jax.config import FinetuneConfig
from ptm_jax.config_loading import load_config
from ptm_jax.data.tasks.conll import read_conll
from ptm_jax.data.tasks.sections import TaggingConfig
from ptm_jax.errors import ConfigError
from ptm_jax.models.crf import allowed_transitions
from ptm_jax.objectives.tagging import TaggingObjective
from tests.test_feature_tasks import _conll_head, _conll_with_vectors
from tests.test_finetune_tasks import assert_learning, fit_and_predict, tiny_bert, train_cfg


def test_transformer_tagger_with_an_iob2_crf_learns_and_decodes_only_allowed_paths(shared_data, minilm_tok,
                                                                                  tmp_path):
    sents, _ = read_conll(shared_data / "conll2003" / "eng.train")
    fcfg = FinetuneConfig(task="conll2003", max_seq_length=48)
    obj = TaggingObjective(tiny_bert(minilm_tok), fcfg, sents[:160], sents[160:224], minilm_tok,
                           tagging=TaggingConfig(head="crf", crf_constraints="iob2"))
    assert obj.extra_info == {"tagging": {"head": "crf", "crf_constraints": "iob2"}}
    gold = np.zeros((len(obj.dev_sentences), 48), np.int32)  # the gold tags as a Viterbi output
    for i, s in enumerate(obj.dev_sentences):
        gold[i, :len(s.tags)] = [obj.label_to_id[t] for t in s.tags[:48]]
    labels = obj.dev["labels"]
    onehot = np.zeros(labels.shape + (obj.num_labels,), np.float32)  # ... and as the softmax's logits
    r, c = np.nonzero(labels >= 0)
    onehot[r, c, labels[r, c]] = 1.0
    assert obj.dev_truncated_words > 0  # words cut by max_seq_length are O on both paths
    assert obj.score({"tags": gold}) == obj.score({"logits": onehot}) and obj.score({"tags": gold})["f1"] > 0.99
    steps = 16
    result, metrics, outputs = fit_and_predict(obj, train_cfg(steps, 3e-3), (8, 1, 1), tmp_path / "conll")
    assert_learning(tmp_path / "conll", steps)
    assert set(result.state.params["params"]["crf"]) == {"transitions", "start", "end"}
    assert 0.0 <= metrics["f1"] <= 1.0 and metrics["token_accuracy"] > 0.7 and metrics["crf_nll"] > 0
    trans, start, _ = allowed_transitions(obj.spec.labels, "iob2")
    for row, first in zip(outputs["tags"], obj.dev_first_piece):
        path = row[:int(np.sum(first >= 0))]
        assert start[path[0]] and trans[path[:-1], path[1:]].all()


def test_bilstm_crf_tagger_through_ptm_finetune_and_ptm_eval(tmp_path, shared_data, capsys):
    from ptm_jax.cli import main

    data, _, _ = _conll_with_vectors(tmp_path, shared_data, 48, 24, 300)
    (data / "eng.testb").write_text(_conll_head(shared_data / "conll2003" / "eng.testb", 20))
    run = ["finetune.task=conll2003", f"finetune.data_dir={data}", f"finetune.init={tmp_path / 'vectors.txt'}",
           "finetune.job=features", "features.head=bilstm", "features.head_hidden=16", "finetune.batch_size=16",
           "finetune.epochs=6", "finetune.learning_rate=3e-2", "finetune.max_seq_length=40", "finetune.eval_every=6",
           "tagging.head=crf", "train.progress_bar=false"]
    assert main(["finetune", "-c", "bert_tiny", f"output_dir={tmp_path / 'run'}", *run]) == 0
    stage = tmp_path / "run" / "finetune-conll2003"
    recorded = json.loads((stage / "best.json").read_text())["metrics"]
    info = json.loads((stage / "best" / "feature_model.json").read_text())
    assert info["tagging"] == {"head": "crf", "crf_constraints": "none"} and "crf output" in info["description"]
    assert recorded["crf_nll"] > 0 and 0 <= recorded["f1"] <= 1
    capsys.readouterr()
    # the run's [tagging] is not given again: the kept model's own output layer is rebuilt
    assert main(["eval", "-c", "bert_tiny", "--model", str(stage / "best"), "--split", "dev",
                 "--predictions", str(tmp_path / "pred"), f"finetune.data_dir={data}", "finetune.batch_size=16"]) == 0
    dev = json.loads((tmp_path / "pred" / "eval.json").read_text())
    assert dev["metrics"]["f1"] == pytest.approx(recorded["f1"], abs=1e-6)
    assert dev["metrics"]["crf_nll"] == pytest.approx(recorded["crf_nll"], rel=1e-5)
    tags = np.load(tmp_path / "pred" / "outputs.npz")["tags"]
    assert tags.dtype.kind == "i" and tags.shape[1] == 40


def test_an_unknown_tag_scheme_or_head_is_refused_in_one_line():
    for key, value, says in (("crf_constraints", "iobes", "is not a tag scheme the CRF knows"),
                             ("head", "'crf2'", "must be 'softmax' or 'crf'")):
        with pytest.raises(ConfigError, match=says) as e:
            load_config("bert_tiny", [f"tagging.{key}={value if value.startswith(chr(39)) else repr(value)}"])
        assert "\n" not in str(e.value) and f"tagging.{key}" in str(e.value)
