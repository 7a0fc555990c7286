"""GPT and XLNet finetuning on GLUE: GPT's input transformations (Radford et al. 2018 Sec. 3.3), the
task + lambda * LM loss, and XLNet's `A <sep> B <sep> <cls>` layout read at <cls>, on real RTE / STS-B rows."""
import dataclasses

import jax
import numpy as np
import pytest

from ptm_jax.config import FinetuneConfig
from ptm_jax.config_loading import load_config
from ptm_jax.families.gpt.config import GptFinetuneConfig
from ptm_jax.data.byte_bpe import train_byte_bpe
from ptm_jax.data.tasks.glue import get_task, read_glue
from ptm_jax.families.gpt.classification import GptClassificationObjective
from ptm_jax.families.gpt.transforms import gpt_features, transform_for
from ptm_jax.families.xlnet.classification import (
    XLNetClassificationObjective,
    xlnet_inputs,
)


@pytest.fixture(scope="module")
def glue(shared_data):
    return shared_data / "glue"


@pytest.fixture(scope="module")
def bpe(glue, tmp_path_factory):
    rte, _ = read_glue(glue, "rte", "train")
    texts = [e.text_a for e in rte[:600]] + [e.text_b for e in rte[:600]]
    return train_byte_bpe(texts, 600, tmp_path_factory.mktemp("bpe"))


def test_transform_choice_follows_the_gpt_paper():
    assert transform_for("sst2", False) == "classification"
    assert transform_for("rte", True) == "entailment" and transform_for("mnli", True) == "entailment"
    assert {transform_for(t, True) for t in ("stsb", "mrpc", "qqp")} == {"similarity"}


def test_gpt_rows_are_start_premise_delim_hypothesis_extract(bpe):
    f = gpt_features(bpe, ["a cat sat"], ["it sat"], 16, "entailment")
    a, b = bpe.encode("a cat sat"), bpe.encode("it sat")
    row = [bpe.start_id, *a, bpe.delim_id, *b, bpe.extract_id]
    assert f["input_ids"].shape == (1, 1, 16)
    assert f["input_ids"][0, 0, : len(row)].tolist() == row and f["input_ids"][0, 0, len(row):].sum() == 0
    assert f["segment_ids"][0, 0].tolist() == [1] * len(row) + [0] * (16 - len(row))
    assert f["extract_index"][0, 0] == len(row) - 1
    # the LM loss predicts every real token after the first, from the one before it
    w = f["lm_weights"][0, 0]
    assert w.sum() == len(row) - 1 and f["lm_targets"][0, 0, : len(row) - 1].tolist() == row[1:]
    s = gpt_features(bpe, ["a cat sat"], ["it sat"], 16, "similarity")
    assert s["input_ids"].shape == (1, 2, 16)
    assert s["input_ids"][0, 1, : len(row)].tolist() == [bpe.start_id, *b, bpe.delim_id, *a, bpe.extract_id]
    c = gpt_features(bpe, ["x" * 200], None, 12, "classification")
    assert c["extract_index"][0, 0] == 11 and c["input_ids"][0, 0, 11] == bpe.extract_id  # truncated, [e] kept


def _model_cfg(vocab: int):
    return dataclasses.replace(load_config("gpt_tiny").model, vocab_size=vocab, hidden_dropout=0.0,
                               attention_dropout=0.0)


def _loss(obj, params, n=8):
    batch = {k: v[:n] for k, v in obj.train.items()}
    return obj.loss(params, batch, None, obj.normalizers(batch), train=False)


def test_gpt_loss_is_task_plus_lambda_times_lm_on_real_rte(glue, bpe):
    rte, _ = read_glue(glue, "rte", "dev")
    spec = get_task("rte")
    objs = {c: GptClassificationObjective(_model_cfg(bpe.vocab_size), spec, rte[:16], rte[:16], bpe,
                                          FinetuneConfig(max_seq_length=48),
                                          gpt_finetune=GptFinetuneConfig(lm_coef=c)) for c in (0.0, 0.5)}
    params = objs[0.5].init(jax.random.key(0), objs[0.5].example_batch(2))
    (l0, t0), (l5, t5) = _loss(objs[0.0], params), _loss(objs[0.5], params)
    lm = float(t5["lm_loss"][0] / t5["lm_loss"][1])
    assert 5.0 < lm < 8.0  # an untrained LM over ~600 ids: about ln(600) = 6.4
    np.testing.assert_allclose(float(l5) - float(l0), 0.5 * lm, rtol=1e-5)
    np.testing.assert_allclose(float(l0), float(t0["loss"][0] / t0["loss"][1]), rtol=1e-6)


def test_gpt_finetune_lm_coef_of_the_config_reaches_the_loss_built_by_the_task_job(glue, bpe):
    """``gpt_finetune.lm_coef`` set in the config: the objective ``build_task`` builds carries it; 0 drops the LM term
    from the loss, the default (0.5) keeps it."""
    from ptm_jax.train.finetune import build_task

    model_cfg = _model_cfg(bpe.vocab_size)
    objs = {}
    for extra in ([], ["gpt_finetune.lm_coef=0.0"]):
        cfg = load_config("gpt_tiny", ["finetune.task=rte", f"finetune.data_dir={glue}", "finetune.max_seq_length=48",
                                       *extra])
        objs[len(extra)], _ = build_task(cfg, model_cfg, bpe, train=False)
    assert (objs[0].lm_coef, objs[1].lm_coef) == (0.5, 0.0)
    params = objs[0].init(jax.random.key(0), objs[0].example_batch(2))
    batch = {k: v[:8] for k, v in objs[0].dev.items()}
    (l5, t5), (l0, t0) = (o.loss(params, batch, None, o.normalizers(batch), train=False) for o in (objs[0], objs[1]))
    assert "lm_loss" in t5 and "lm_loss" not in t0
    np.testing.assert_allclose(float(l5) - float(l0), 0.5 * float(t5["lm_loss"][0] / t5["lm_loss"][1]), rtol=1e-5)


def test_gpt_similarity_is_symmetric_in_the_two_sentences(glue, bpe):
    stsb, _ = read_glue(glue, "stsb", "dev")
    swapped = [dataclasses.replace(e, text_a=e.text_b, text_b=e.text_a) for e in stsb[:8]]
    spec, fcfg = get_task("stsb"), FinetuneConfig(max_seq_length=64)
    a = GptClassificationObjective(_model_cfg(bpe.vocab_size), spec, stsb[:8], stsb[:8], bpe, fcfg)
    b = GptClassificationObjective(_model_cfg(bpe.vocab_size), spec, swapped, swapped, bpe, fcfg)
    params = a.init(jax.random.key(1), a.example_batch(2))
    la = np.asarray(a.predict(params, a.dev)["logits"])
    lb = np.asarray(b.predict(params, b.dev)["logits"])
    assert la.shape == (8, 1)
    np.testing.assert_allclose(la, lb, atol=1e-6)


def test_xlnet_layout_and_classifier_reads_cls_whatever_the_padding(glue, shared_data, tmp_path):
    from ptm_jax.data.tokenizers import train_sentencepiece

    rte, _ = read_glue(glue, "rte", "dev")
    sp = train_sentencepiece(iter([e.text_a for e in rte] + [e.text_b for e in rte]), 400, tmp_path / "sp",
                             "unigram")
    ids, segs = xlnet_inputs(sp, ["a cat sat"], ["it sat"], 32)
    a, b = sp.encode("a cat sat"), sp.encode("it sat")
    assert ids[0].tolist() == [*a, sp.sep_id, *b, sp.sep_id, sp.cls_id]
    assert segs[0].tolist() == [0] * (len(a) + 1) + [1] * (len(b) + 1) + [2]
    cfg = dataclasses.replace(load_config("xlnet_tiny").model, vocab_size=sp.vocab_size, hidden_dropout=0.0,
                              attention_dropout=0.0)
    spec = get_task("rte")
    fits = [e for e in rte if len(sp.encode(e.text_a)) + len(sp.encode(e.text_b)) + 3 <= 64][:6]
    assert len(fits) == 6  # no truncation: only the padding differs between the two lengths
    short = XLNetClassificationObjective(cfg, spec, fits, fits, sp, FinetuneConfig(max_seq_length=64))
    long = XLNetClassificationObjective(cfg, spec, fits, fits, sp, FinetuneConfig(max_seq_length=96))
    params = short.init(jax.random.key(2), short.example_batch(2))
    np.testing.assert_allclose(np.asarray(short.predict(params, short.dev)["logits"]),
                               np.asarray(long.predict(params, long.dev)["logits"]), atol=1e-5)


def test_gpt_multiple_choice_rows_and_scores_follow_the_options(bpe):
    from ptm_jax.families.gpt.classification import GptMultipleChoiceObjective
    from ptm_jax.objectives.multiple_choice import ChoiceExample

    options = ["he runs away.", "she sits down.", "they eat lunch.", "it rains."]
    ex = [ChoiceExample(str(i), "the man waits.", options[i:] + options[:i], (4 - i) % 4) for i in range(4)]
    fcfg = FinetuneConfig(task="swag", max_seq_length=32)
    obj = GptMultipleChoiceObjective(_model_cfg(bpe.vocab_size), fcfg, ex, ex, bpe)
    assert obj.train["input_ids"].shape == (4, 4, 32) and obj.num_choices == 4
    row = [bpe.start_id, *bpe.encode("the man waits."), bpe.delim_id, *bpe.encode(options[1]), bpe.extract_id]
    assert obj.train["input_ids"][0, 1, : len(row)].tolist() == row
    params = obj.init(jax.random.key(3), obj.example_batch(2))
    scores = np.asarray(obj.predict(params, obj.dev)["logits"])
    assert scores.shape == (4, 4)
    for i in range(4):  # each example rotates the options: the scores rotate with them
        np.testing.assert_allclose(scores[i], np.roll(scores[0], -i), atol=1e-5)
    loss, terms = _loss(obj, params, n=4)
    assert "lm_loss" in terms and float(loss) > float(terms["loss"][0] / terms["loss"][1])
