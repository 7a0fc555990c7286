"""Finetuning objectives beyond classification: SQuAD span QA, CoNLL-2003 tagging, multiple choice.

Each task trains a tiny random BERT (real WordPiece vocab) through the one training loop on a slice of the
real data, and its scoring path is checked end to end with gold ("one-hot") logits.
"""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from ptm_jax.config import FinetuneConfig, MeshConfig, RunConfig, TrainConfig
from ptm_jax.config_loading import load_config
from ptm_jax.data.tasks.sections import SquadConfig
from ptm_jax.families.bert.config import BertConfig
from ptm_jax.data.tasks.conll import IGNORE_INDEX, read_conll
from ptm_jax.data.tasks.squad import read_squad
from ptm_jax.data.tasks.squad_features import convert_examples_to_features
from ptm_jax.errors import ConfigError, DataError
from ptm_jax.data.tasks import registry as tasks
from ptm_jax.data.tasks.splits import article_folds, conll_file, parse_fold
from ptm_jax.objectives.finetune_registry import TASK_BUILDERS
from ptm_jax.objectives.multiple_choice import ChoiceExample, MultipleChoiceObjective, read_swag
from ptm_jax.objectives.span_qa import SpanQAObjective
from ptm_jax.objectives.tagging import TaggingObjective
from ptm_jax.parallel.mesh import make_mesh
from ptm_jax.train.finetune import build_task
from ptm_jax.train.loop import compile_objective, evaluate, fit


@pytest.fixture(scope="module")
def squad_dev(shared_data):
    examples, _ = read_squad(shared_data / "squad" / "dev-v1.1.json")
    return examples


def tiny_bert(minilm_tok, dropout: float = 0.1) -> BertConfig:
    return BertConfig(vocab_size=minilm_tok.vocab_size, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                       max_position_embeddings=128, hidden_dropout=dropout, attention_dropout=dropout)


def train_cfg(steps: int, lr: float, batch: int = 16) -> TrainConfig:
    return TrainConfig(batch_size=batch, steps=steps, learning_rate=lr, warmup_steps=max(1, steps // 10),
                       log_every=1, eval_every=0, checkpoint_every=10 * steps, progress_bar=False)


def train_losses(stage) -> list[float]:
    rows = [json.loads(line) for line in (stage / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r["split"] == "train"]


def assert_learning(stage, steps: int) -> list[float]:
    losses = train_losses(stage)
    assert len(losses) == steps and all(math.isfinite(x) for x in losses)
    k = max(2, steps // 5)
    assert np.mean(losses[-k:]) < 0.9 * np.mean(losses[:k]), losses
    return losses


def fit_and_predict(objective, tcfg, mesh_shape, stage):
    """fit (no periodic eval), then the loop's evaluate() with predictions, as `ptm eval` runs it."""
    mesh = make_mesh(MeshConfig(*mesh_shape))
    result = fit(objective, tcfg, mesh, stage)
    compiled = compile_objective(objective, tcfg, mesh)
    metrics, outputs = evaluate(objective, compiled, result.state.params, mesh, tcfg.batch_size, return_outputs=True)
    return result, metrics, outputs


# ------------------------------------------------------------------------------------------ SQuAD

def aligned(examples, minilm_tok, fcfg, squad) -> list:
    """Questions whose answer is a whole-piece span (the others, e.g. '8' inside '20–18', cannot be
    extracted exactly by any span model, as in run_squad)."""
    feats = convert_examples_to_features(examples, minilm_tok, fcfg.max_seq_length, squad.doc_stride,
                                         squad.max_query_length, is_training=True)
    answer = {i: minilm_tok.tokenize(e.orig_answer_text) for i, e in enumerate(examples)}
    ok = {f.example_index for f in feats if f.start_position
          and f.tokens[f.start_position:f.end_position + 1] == answer[f.example_index]}
    return [e for i, e in enumerate(examples) if i in ok]


def one_hot_spans(obj: SpanQAObjective, value: float = 10.0) -> dict[str, np.ndarray]:
    n, length = obj.dev["input_ids"].shape
    start, end = np.zeros((n, length), np.float32), np.zeros((n, length), np.float32)
    start[np.arange(n), obj.dev["start_positions"]] = value
    end[np.arange(n), obj.dev["end_positions"]] = value
    return {"start_logits": start, "end_logits": end}


def test_squad_gold_span_logits_score_100_v1_and_v2(squad_dev, minilm_tok):
    fcfg = FinetuneConfig(task="squad", max_seq_length=128)
    squad = SquadConfig(doc_stride=64, max_query_length=32)
    article = [e for e in squad_dev if e.title == squad_dev[0].title]
    assert len(article) == 810
    good = aligned(article, minilm_tok, fcfg, squad)
    assert 780 <= len(good) < 810  # 2% of the answers are parts of a whitespace word or piece
    obj = SpanQAObjective(tiny_bert(minilm_tok), fcfg, [], good, minilm_tok, squad=squad)
    assert len(obj.dev_features) > len(good)  # several windows per question at length 128
    assert obj.score(one_hot_spans(obj)) == {"exact_match": 100.0, "f1": 100.0}
    # v2: every third question made unanswerable -> its gold logits sit on [CLS] in every window
    v2 = [dataclasses.replace(e, is_impossible=True, answers=[], start_position=-1, end_position=-1)
          if i % 3 == 0 else e for i, e in enumerate(good[:120])]
    obj2 = SpanQAObjective(tiny_bert(minilm_tok), fcfg, [], v2, minilm_tok, version_2=True, name="squad_v2",
                           squad=squad)
    m = obj2.score(one_hot_spans(obj2))
    assert m["exact_match"] == m["f1"] == m["HasAns_f1"] == m["NoAns_f1"] == m["best_f1"] == 100.0
    assert set(m) >= {"HasAns_exact", "NoAns_exact", "best_exact", "best_f1_thresh"}


def test_squad_trains_on_first_article_and_writes_predictions(squad_dev, minilm_tok, tmp_path):
    fcfg = FinetuneConfig(task="squad", max_seq_length=128)
    squad = SquadConfig(doc_stride=64, max_query_length=32)
    article = [e for e in squad_dev if e.title == squad_dev[0].title]
    dev = article[:40]
    obj = SpanQAObjective(tiny_bert(minilm_tok), fcfg, article, dev, minilm_tok, squad=squad)
    assert obj.num_train == 1612 and obj.head == "question_answering" and obj.primary_metric == "f1"
    steps = 20
    _, metrics, outputs = fit_and_predict(obj, train_cfg(steps, 1e-3), (2, 2, 2), tmp_path / "squad")
    assert_learning(tmp_path / "squad", steps)
    assert 0.0 <= metrics["exact_match"] <= metrics["f1"] <= 100.0 and math.isfinite(metrics["loss"])
    assert outputs["start_logits"].shape[1] == 128
    assert np.all(outputs["start_logits"][:len(obj.dev_features)][obj.dev["input_mask"] == 0] == -10000.0)
    files = obj.write_predictions(outputs, tmp_path / "pred", "dev")
    preds = json.loads((tmp_path / "pred" / "predictions.json").read_text())
    nbest = json.loads((tmp_path / "pred" / "nbest_predictions.json").read_text())
    assert len(files) == 2 and set(preds) == set(nbest) == {e.qas_id for e in dev}
    assert all(1 <= len(v) <= squad.n_best_size for v in nbest.values())


def test_squad_section_of_the_config_reaches_the_features_and_answers(shared_data, minilm_tok, tmp_path):
    """``squad.doc_stride`` set in the config changes the windows ``build_task`` builds (more at a shorter stride);
    ``squad.n_best_size`` the answers kept; the defaults are run_squad's (128, 64, 20, 30)."""
    full = json.loads((shared_data / "squad" / "dev-v1.1.json").read_text())
    one = {"version": full["version"], "data": [dict(full["data"][0], paragraphs=full["data"][0]["paragraphs"][:3])]}
    for name in ("train-v1.1.json", "dev-v1.1.json"):
        (tmp_path / name).write_text(json.dumps(one))
    objs = {}
    for extra in ([], ["squad.doc_stride=32", "squad.n_best_size=3"]):
        cfg = load_config("bert_tiny", ["finetune.task=squad", f"finetune.data_dir={tmp_path}",
                                        "finetune.max_seq_length=128", *extra])
        objs[int(bool(extra))], desc = build_task(cfg, tiny_bert(minilm_tok), minilm_tok, train=False)
    assert objs[0].squad == SquadConfig() and (objs[0].squad.doc_stride, objs[0].squad.n_best_size) == (128, 20)
    assert "squad.doc_stride 32" in desc and len(objs[1].dev_examples) == len(objs[0].dev_examples)
    assert len(objs[1].dev_features) > len(objs[0].dev_features)
    n = len(objs[1].dev_features)
    rng = np.random.default_rng(0)
    outputs = {k: rng.normal(size=(n, 128)).astype(np.float32) for k in ("start_logits", "end_logits")}
    _, nbest, _ = objs[1].answers(outputs)
    assert max(len(v) for v in nbest.values()) <= 3


def test_squad_builder_folds_and_missing_train_file(shared_data, minilm_tok, squad_dev):
    dev_file = shared_data / "squad" / "dev-v1.1.json"
    train0, held0 = article_folds(squad_dev, 0, 2)
    train1, held1 = article_folds(squad_dev, 1, 2)
    assert len(held0) + len(held1) == 10570 and {e.qas_id for e in held0}.isdisjoint(e.qas_id for e in held1)
    assert {e.title for e in train0} == {e.title for e in held1} and len({e.title for e in held0}) == 24
    assert parse_fold(f"{dev_file}#fold=1/2") == (str(dev_file), 1, 2) and parse_fold(str(dev_file)) is None
    with pytest.raises(ConfigError, match="fold=K/N"):
        parse_fold(f"{dev_file}#fold=2/2")
    model_cfg = dataclasses.replace(tiny_bert(minilm_tok), max_position_embeddings=384)
    cfg = RunConfig(finetune=FinetuneConfig(task="squad", data_dir=str(shared_data / "squad")))
    with pytest.raises(ConfigError, match=r"train-v1\.1\.json does not exist.*#fold=0/2"):
        TASK_BUILDERS["squad"](cfg, model_cfg, minilm_tok)
    cfg = RunConfig(finetune=FinetuneConfig(task="squad", data_dir=f"{dev_file}#fold=1/2", train_subset=30))
    obj, desc = TASK_BUILDERS["squad"](cfg, model_cfg, minilm_tok)
    assert len(obj.dev_examples) == len(held1) and obj.num_train_questions == 30
    assert "article fold 1 of 2" in desc and f"{len(held1)} dev questions" in desc


# ------------------------------------------------------------------------------------------ CoNLL

def test_conll_gold_tags_score_f1_1_and_files_resolve(shared_data, minilm_tok, tmp_path):
    root = shared_data / "conll2003"
    assert [conll_file(str(root), s) for s in ("train", "dev")] == [root / "eng.train", root / "eng.testa"]
    assert conll_file(str(root / "iob2"), "test") == root / "iob2" / "test.txt"
    with pytest.raises(ConfigError, match="no CoNLL-2003 file for split 'test'; expected eng.testb or test.txt"):
        conll_file(str(tmp_path), "test")
    # the task registry reads every split through the task's split reader (TaskDecl.reader)
    testb, source = tasks.read("conll2003", str(root), "test")
    assert source == str(root / "eng.testb") and len(testb) == 3453
    with pytest.raises(ConfigError, match="split must be 'train', 'dev' or 'test'"):
        tasks.read("conll2003", str(root), "valid")
    glue = str(shared_data / "glue")
    assert len(tasks.read("sst2", glue, "dev")[0]) == 872 and len(tasks.read("rte", glue, "train")[0]) == 2490
    assert tasks.read("mrpc_rank", glue, "dev")[0] == tasks.read("mrpc", glue, "dev")[0]  # its GLUE task's rows
    sents, _ = read_conll(root / "eng.testb")
    dev = sents[:200]
    obj = TaggingObjective(tiny_bert(minilm_tok), FinetuneConfig(task="conll2003"), sents[200:400], dev, minilm_tok)
    assert obj.dev_truncated_words == 0 and obj.num_labels == 9
    labels = obj.dev["labels"]
    logits = np.zeros(labels.shape + (obj.num_labels,), np.float32)
    r, c = np.nonzero(labels != IGNORE_INDEX)
    logits[r, c, labels[r, c]] = 1.0
    m = obj.score({"logits": logits})
    assert m["precision"] == m["recall"] == m["f1"] == 1.0 and {"f1_PER", "f1_LOC", "f1_ORG", "f1_MISC"} <= set(m)
    path = obj.write_predictions({"logits": logits}, tmp_path, "test")[0]
    lines = open(path).read().split("\n")
    assert sum(1 for x in lines if x) == sum(len(s.words) for s in dev)
    assert all(x.split()[1] == x.split()[2] for x in lines if x)


def test_conll_trains_on_200_sentences(shared_data, minilm_tok, tmp_path):
    sents, _ = read_conll(shared_data / "conll2003" / "eng.train")
    fcfg = FinetuneConfig(task="conll2003", max_seq_length=64)
    obj = TaggingObjective(tiny_bert(minilm_tok), fcfg, sents[:200], sents[200:264], minilm_tok)
    steps = 20
    _, metrics, outputs = fit_and_predict(obj, train_cfg(steps, 3e-3), (8, 1, 1), tmp_path / "conll")
    assert_learning(tmp_path / "conll", steps)
    assert 0.0 <= metrics["precision"] <= 1.0 and 0.0 <= metrics["recall"] <= 1.0 and 0.0 <= metrics["f1"] <= 1.0
    assert metrics["token_accuracy"] > 0.7  # at least the 'O' majority (about 83% of words) is being learnt
    path = obj.write_predictions(outputs, tmp_path, "dev")[0]
    assert path.endswith("conll2003-dev.txt") and open(path).read().count("\n\n") == 64


# ------------------------------------------------------------------------------------------ multiple choice

WORDS = "apple river stone cloud music paper".split()


def synthetic_choices(n: int, seed: int) -> list[ChoiceExample]:
    """Context: one word; the right option repeats it, the three others are different words."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        w = rng.permutation(len(WORDS))
        label = int(rng.integers(4))
        options = [WORDS[j] for j in w[1:4]]
        options.insert(label, WORDS[w[0]])
        out.append(ChoiceExample(str(i), WORDS[w[0]], options, label))
    return out


def test_multiple_choice_learns_the_repeated_token(minilm_tok, tmp_path):
    fcfg = FinetuneConfig(task="swag", max_seq_length=8, classifier_dropout=0.0)
    obj = MultipleChoiceObjective(tiny_bert(minilm_tok, dropout=0.0), fcfg, synthetic_choices(1000, 0),
                                  synthetic_choices(96, 1), minilm_tok, name="synthetic")
    assert obj.train["input_ids"].shape == (1000, 4, 8) and obj.num_choices == 4
    steps = 150  # lr 1e-3: stable over init seeds 0-2 (dev accuracy 0.59-0.83); 1e-2 can collapse to ln 4
    _, metrics, outputs = fit_and_predict(obj, train_cfg(steps, 1e-3, batch=32), (8, 1, 1), tmp_path / "mc")
    losses = assert_learning(tmp_path / "mc", steps)
    assert losses[0] == pytest.approx(math.log(4), abs=0.05)
    assert metrics["accuracy"] > 0.4  # chance 0.25; 0.4 is 3.5 sd above it on 96 examples
    rows = open(obj.write_predictions(outputs, tmp_path, "dev")[0]).read().splitlines()
    assert rows[0] == "id\tprediction\tlabel" and len(rows) == 97


def test_swag_csv_reader_and_builder(tmp_path, minilm_tok):
    header = ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label"
    rows = [f'{i},v{i},{i},"The man sits. He",The man sits.,He,gold,stands up.,"eats, quickly.",runs.,sleeps.,{i % 4}'
            for i in range(6)]
    (tmp_path / "train.csv").write_text("\n".join([header, *rows]) + "\n")
    (tmp_path / "val.csv").write_text("\n".join([header, *rows[:2]]) + "\n")
    ex = read_swag(tmp_path / "train.csv")
    assert ex[1].context == "The man sits." and ex[1].options[1] == "He eats, quickly." and ex[1].label == 1
    cfg = RunConfig(finetune=FinetuneConfig(task="swag", data_dir=str(tmp_path), max_seq_length=16))
    obj, desc = TASK_BUILDERS["swag"](cfg, tiny_bert(minilm_tok), minilm_tok)
    assert obj.dev["input_ids"].shape == (2, 4, 16) and list(obj.dev["labels"]) == [0, 1]
    assert desc.startswith("SWAG: 6 train / 2 dev")
    (tmp_path / "bad.csv").write_text("\n".join([header, rows[0], rows[1].rsplit(",", 1)[0] + ",7"]) + "\n")
    with pytest.raises(DataError, match=r"bad\.csv:3: label 7"):
        read_swag(tmp_path / "bad.csv")
