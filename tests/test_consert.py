"""ConSERT (Yan et al. 2021): the embedding-output augmentations, the NT-Xent loss against a numpy reference
(also on a (2,2,2) mesh), the refusal of gradient accumulation, bad input, and finetune on real STS-B
sentences with a tiny BERT, whose result folder serves `ptm embed`."""
from __future__ import annotations

import json
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ptm_jax.config import FinetuneConfig, MeshConfig, RunConfig, TrainConfig
from ptm_jax.errors import ConfigError, DataError
from ptm_jax.families.bert.config import BertConfig
from ptm_jax.objectives import augmentations as aug
from ptm_jax.objectives.base import check_grad_accum
from ptm_jax.jobs.consert.build import build_consert
from ptm_jax.jobs.consert.config import ConsertConfig
from ptm_jax.jobs.consert.data import read_sentences
from ptm_jax.objectives.contrastive import ContrastiveObjective, nt_xent
from ptm_jax.parallel.mesh import make_mesh
from ptm_jax.train.loop import compile_objective


def tiny_bert(minilm_tok) -> BertConfig:
    return BertConfig(vocab_size=minilm_tok.vocab_size, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                      max_position_embeddings=64)


@pytest.fixture(scope="module")
def sentences(shared_data, tmp_path_factory):
    """The first 96 distinct STS-B train sentences, one per line (labels unused)."""
    from ptm_jax.data.tasks.glue import read_glue

    rows, _ = read_glue(shared_data / "glue", "stsb", "train")
    out = list(dict.fromkeys(t for e in rows for t in (e.text_a, e.text_b)))[:96]
    path = tmp_path_factory.mktemp("consert") / "sentences.txt"
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


def run_cfg(minilm_tok, data_dir, glue, **fine) -> RunConfig:
    """finetune.job=consert; the keyword arguments that are ConsertConfig fields go to the [consert] section."""
    own = {k: fine.pop(k) for k in list(fine) if k in ConsertConfig.__dataclass_fields__}
    cfg = RunConfig(model=tiny_bert(minilm_tok), plugins={"consert": ConsertConfig(eval_data_dir=str(glue), **own)})
    cfg.finetune = FinetuneConfig(job="consert", data_dir=str(data_dir), max_seq_length=32,
                                  **{"batch_size": 8, **fine})
    return cfg


@pytest.fixture(scope="module")
def objective(minilm_tok, sentences, shared_data):
    cfg = run_cfg(minilm_tok, sentences, shared_data / "glue")
    return build_consert(cfg, cfg.model, minilm_tok)[0]


# ------------------------------------------------------------------------------------------ augmentations

MASK = np.array([[1] * 5 + [0] * 3, [1] * 8, [1] * 3 + [0] * 5, [1] * 8], np.int32)


def test_views_parse_with_the_paper_defaults_and_refuse_bad_names():
    assert aug.parse_views("feature_cutoff:0.2,shuffle") == (aug.View("feature_cutoff", 0.2), aug.View("shuffle"))
    assert aug.parse_views("token_cutoff, adversarial:0.5") == (aug.View("token_cutoff", 0.1),
                                                                aug.View("adversarial", 0.5))
    for bad, msg in (("shuffle,cutout", "unknown augmentation 'cutout'"), ("shuffle", "exactly two views"),
                     ("dropout:1.5,none", r"rate must be in \(0, 1\)"), ("shuffle:0.1,none", "takes no strength")):
        with pytest.raises(ConfigError, match=rf"consert.views=.*{msg}"):
            aug.parse_views(bad)


def test_token_shuffle_permutes_the_real_positions_of_each_example():
    pos = np.asarray(aug.shuffle_positions(jax.random.key(0), jnp.asarray(MASK)))
    for row, m in zip(pos, MASK):
        n = int(m.sum())
        assert sorted(row[:n]) == list(range(n)) and row[n:].tolist() == list(range(n, 8))
    assert pos[1].tolist() != list(range(8)) and pos[1].tolist() != pos[3].tolist()  # per example


def test_token_cutoff_zeros_whole_real_rows():
    x = jnp.asarray(np.random.default_rng(0).normal(size=(4, 8, 10)) + 5.0, jnp.float32)
    y = np.asarray(aug.token_cutoff(jax.random.key(1), x, jnp.asarray(MASK), 0.3))
    zero_rows = np.all(y == 0, axis=-1)
    assert zero_rows.sum(-1).tolist() == [1, 2, 0, 2]  # floor(n * 0.3) of n = 5, 8, 3, 8
    assert not np.any(zero_rows & (MASK == 0))  # never a padding row
    np.testing.assert_array_equal(y[~zero_rows], np.asarray(x)[~zero_rows])


def test_feature_cutoff_zeros_the_same_columns_at_every_position():
    x = jnp.asarray(np.random.default_rng(0).normal(size=(4, 8, 10)) + 5.0, jnp.float32)
    y = np.asarray(aug.feature_cutoff(jax.random.key(2), x, 0.2))
    cols = np.all(y == 0, axis=1)  # [B, H]: zero at every position
    assert cols.sum(-1).tolist() == [2, 2, 2, 2] and len({tuple(c) for c in cols}) > 1
    assert np.count_nonzero(y == 0) == 4 * 8 * 2


def test_dropout_zeros_exactly_the_rate_of_real_elements_without_rescaling():
    x = jnp.asarray(np.random.default_rng(0).normal(size=(4, 8, 10)) + 5.0, jnp.float32)
    y = np.asarray(aug.element_dropout(jax.random.key(3), x, jnp.asarray(MASK), 0.25))
    zeros = (y == 0)
    assert zeros.sum(axis=(1, 2)).tolist() == [12, 20, 7, 20]  # floor(n * 10 * 0.25)
    assert not np.any(zeros & (MASK == 0)[..., None])
    np.testing.assert_array_equal(y[~zeros], np.asarray(x)[~zeros])


def test_adversarial_perturbation_has_the_norm_per_token():
    g = jnp.asarray(np.random.default_rng(0).normal(size=(2, 3, 6)), jnp.float32)
    d = np.asarray(aug.perturbation(g, 0.5))
    np.testing.assert_allclose(np.linalg.norm(d, axis=-1), 0.5, rtol=1e-5)
    np.testing.assert_allclose(d / np.linalg.norm(d, axis=-1, keepdims=True),
                               np.asarray(g) / np.linalg.norm(g, axis=-1, keepdims=True), rtol=1e-5)


def test_augmentations_apply_in_training_only(objective):
    batch = {k: jnp.asarray(v[:4]) for k, v in objective.train.items()}
    params = nn.meta.unbox(jax.jit(objective.init)(jax.random.key(0), batch))
    ids, mask = batch["input_ids"][:, 0], batch["input_mask"][:, 0]
    views = (aug.View("shuffle"), aug.View("feature_cutoff", 0.2), aug.View("token_cutoff", 0.3),
             aug.View("dropout", 0.1))

    @jax.jit
    def encodings(params, rng):  # one compilation for all views
        return objective.model.apply(params, ids, mask), [
            (objective._encode(params, ids, mask, v, rng, False), objective._encode(params, ids, mask, v, rng, True))
            for v in views]

    clean, pairs = encodings(params, jax.random.key(1))
    for view, (evald, trained) in zip(views, pairs):
        np.testing.assert_array_equal(np.asarray(evald), np.asarray(clean))
        assert np.abs(np.asarray(trained) - np.asarray(clean)).max() > 1e-4, view
    # the adversarial view costs an extra pass and raises the loss over the clean views
    adv = ContrastiveObjective(objective.model.cfg, FinetuneConfig(batch_size=8),
                               ConsertConfig(views="none,adversarial:2"), None, [("a", "b", 1.0)], _TokStub())
    b8 = {k: jnp.asarray(v[:8]) for k, v in objective.train.items()}
    n = adv.normalizers(b8)
    both = jax.jit(lambda p, r: (adv.loss(p, b8, r, n, False)[0], adv.loss(p, b8, r, n, True)[0]))
    clean_loss, adv_loss = map(float, both(params, jax.random.key(2)))
    assert adv_loss > clean_loss + 1e-3


class _TokStub:
    """Just enough tokenizer to featurise the one dev pair of an objective built for its loss only."""

    cls_id, sep_id = 101, 102

    def encode_batch(self, texts):
        return [[1000 + len(t)] for t in texts]


# ------------------------------------------------------------------------------------------ loss

def numpy_nt_xent(z1, z2, weights, t):
    z = np.concatenate([z1, z2]).astype(np.float64)
    z /= np.linalg.norm(z, axis=-1, keepdims=True)
    b, w = len(z1), np.concatenate([weights, weights])
    losses = []
    for i in range(2 * b):
        if w[i] == 0:
            continue
        others = [j for j in range(2 * b) if j != i and w[j] > 0]
        s = np.array([z[i] @ z[j] / t for j in others])
        pos = others.index((i + b) % (2 * b))
        losses.append(np.log(np.exp(s).sum()) - s[pos])
    return float(np.mean(losses))


def test_nt_xent_equals_a_numpy_reference_on_random_embeddings():
    rng = np.random.default_rng(0)
    z1, z2 = rng.normal(size=(6, 5)), rng.normal(size=(6, 5))
    w = np.array([1, 1, 1, 0, 1, 1], np.float32)  # row 3 is padding: neither anchor nor negative
    total, count, _ = jax.jit(nt_xent, static_argnums=3)(jnp.asarray(z1, jnp.float32), jnp.asarray(z2, jnp.float32), jnp.asarray(w), 0.1)
    assert float(count) == 10
    np.testing.assert_allclose(float(total / count), numpy_nt_xent(z1, z2, w, 0.1), rtol=1e-5)
    # 2B - 2 negatives: B = 2 orthogonal rows, identical views: log(1 + 2 exp(-1 / t)) per anchor
    e = np.eye(2, 5)
    total, count, hits = nt_xent(jnp.asarray(e, jnp.float32), jnp.asarray(e, jnp.float32), jnp.ones(2), 0.5)
    np.testing.assert_allclose(float(total / count), math.log(1 + 2 * math.exp(-2)), rtol=1e-5)
    assert float(hits) == 4


def test_loss_on_a_2x2x2_mesh_equals_the_one_device_numpy_reference(objective):
    batch = {k: v[:8] for k, v in objective.train.items()}
    batch["input_ids"] = batch["input_ids"].copy()
    batch["input_ids"][:, 1] = batch["input_ids"][::-1, 0]  # distinct views: every row pair differs
    batch["input_mask"] = batch["input_mask"].copy()
    batch["input_mask"][:, 1] = batch["input_mask"][::-1, 0]
    batch["weights"] = batch["weights"].copy()
    batch["weights"][5] = 0.0
    tcfg = TrainConfig(batch_size=8, steps=1)
    compiled = compile_objective(objective, tcfg, make_mesh(MeshConfig(2, 2, 2)))
    state = compiled.init_fn(jax.random.key(0))  # compiled
    from ptm_jax.parallel.feed import to_global

    terms = compiled.eval_step(state.params, to_global(batch, make_mesh(MeshConfig(2, 2, 2))))
    mesh_loss = float(terms["loss"][0] / terms["loss"][1])
    params = jax.device_get(state.params)
    z = [np.asarray(jax.jit(objective.model.apply)(params, batch["input_ids"][:, k], batch["input_mask"][:, k]))
         for k in (0, 1)]
    np.testing.assert_allclose(mesh_loss, numpy_nt_xent(z[0], z[1], batch["weights"], 0.1), rtol=2e-5)


def test_in_batch_negatives_refuse_gradient_accumulation(objective, minilm_tok, sentences, shared_data):
    with pytest.raises(ConfigError, match=r"train.grad_accum_steps=2: objective 'consert' couples the rows"):
        compile_objective(objective, TrainConfig(batch_size=8, grad_accum_steps=2), make_mesh(MeshConfig()))
    cfg = run_cfg(minilm_tok, sentences, shared_data / "glue")
    cfg.train.grad_accum_steps = 4
    with pytest.raises(ConfigError, match=r"train.grad_accum_steps=4"):
        build_consert(cfg, cfg.model, minilm_tok)


# ------------------------------------------------------------------------------------------ bad input

def test_bad_input_names_the_file_or_field(minilm_tok, tmp_path, sentences, shared_data):
    glue = shared_data / "glue"
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"fine line\ncaf\xe9\n")
    for path, msg in ((tmp_path / "missing.txt", "sentences file not found"), (empty, "no sentences"),
                      (latin, ":2: not valid UTF-8")):
        with pytest.raises(DataError, match=rf"{path}.*{msg}"):
            read_sentences(path)
        cfg = run_cfg(minilm_tok, path, glue)
        with pytest.raises(DataError, match=str(path)):
            build_consert(cfg, cfg.model, minilm_tok)
    with pytest.raises(ConfigError, match=r"finetune.batch_size=1: .*at least 2 rows"):
        cfg = run_cfg(minilm_tok, sentences, glue, batch_size=1)
        build_consert(cfg, cfg.model, minilm_tok)
    with pytest.raises(ConfigError, match=r"consert.views='shuffle,jitter': unknown augmentation"):
        cfg = run_cfg(minilm_tok, sentences, glue, views="shuffle,jitter")
        build_consert(cfg, cfg.model, minilm_tok)
    with pytest.raises(ConfigError, match=r"set consert.eval_data_dir .*STS-B/dev.tsv"):
        cfg = run_cfg(minilm_tok, sentences, "")
        build_consert(cfg, cfg.model, minilm_tok)


# ------------------------------------------------------------------------------------------ through finetune

def test_finetune_on_real_sentences_lowers_the_loss_and_serves_embed(minilm_tok, minilm_vocab, sentences, shared_data,
                                                                    tmp_path):
    from ptm_jax.export.inference import embed_texts
    from ptm_jax.export.params import load_params, load_tokenizer, save_params
    from ptm_jax.families.bert.model import BertModel
    from ptm_jax.train.finetune import finetune

    mc = tiny_bert(minilm_tok)
    ids = jnp.zeros((1, 8), jnp.int32)
    init = nn.meta.unbox(BertModel(mc, name="bert").init(jax.random.key(0), ids, ids + 1, ids))
    save_params(tmp_path / "init", {"bert": init["params"]}, mc, "encoder", tokenizer_files=[minilm_vocab])
    cfg = run_cfg(minilm_tok, sentences, shared_data / "glue", init=str(tmp_path / "init"), batch_size=16, epochs=4.0,
                  learning_rate=3e-3, warmup_proportion=0.0, eval_every=24)
    cfg.output_dir = str(tmp_path / "run")
    cfg.train.log_every = 1
    summary = finetune(cfg)
    assert summary["steps"] == 24 and summary["primary_metric"] == "spearman"
    rows = [json.loads(x) for x in (tmp_path / "run" / "finetune-consert" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if r["split"] == "train"]
    assert len(losses) == 24 and all(math.isfinite(x) for x in losses)
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5]), losses
    assert -1.0 <= summary["best"]["metrics"]["spearman"] <= 1.0
    # the kept model is a bare encoder: `ptm embed` reads it, its mean-pooled vectors are the objective's
    best = tmp_path / "run" / "finetune-consert" / "best"
    params, cfg_b, info, tok_dir = load_params(best)
    assert info["head"] == "encoder" and set(params) == {"bert"}
    texts = ["A plane is taking off.", "A man is playing a flute."]
    vectors = embed_texts(params, cfg_b, load_tokenizer(info, tok_dir), texts, pooling="mean", max_length=32)
    assert vectors.shape == (2, 32) and np.all(np.isfinite(vectors))


def test_lora_under_consert_keeps_the_encoder_bit_for_bit_and_saves_merged_and_adapter_models(
        minilm_tok, minilm_vocab, sentences, shared_data, tmp_path):
    from ptm_jax.adapters.lora.config import LoraConfig
    from ptm_jax.adapters.lora.files import merge_adapter_dir
    from ptm_jax.export import params as params_lib
    from ptm_jax.families.bert.model import BertModel
    from ptm_jax.train.finetune import finetune

    mc = tiny_bert(minilm_tok)
    ids = jnp.zeros((1, 8), jnp.int32)
    init = nn.meta.unbox(BertModel(mc, name="bert").init(jax.random.key(0), ids, ids + 1, ids))
    params_lib.save_params(tmp_path / "init", {"bert": init["params"]}, mc, "encoder", tokenizer_files=[minilm_vocab])
    cfg = run_cfg(minilm_tok, sentences, shared_data / "glue", init=str(tmp_path / "init"), batch_size=16, epochs=1.0,
                  learning_rate=1e-2, warmup_proportion=0.0, eval_every=3, adapter="lora")
    cfg.plugins["lora"] = LoraConfig(rank=4, alpha=8.0)
    cfg.output_dir = str(tmp_path / "run")
    summary = finetune(cfg)
    stage = tmp_path / "run" / "finetune-consert"
    assert summary["steps"] == 6 and (stage / "best").is_dir() and (stage / "best_adapter").is_dir()
    step = max(int(d.name) for d in (stage / "checkpoints").iterdir() if d.name.isdigit())
    state = params_lib._restore_numpy(stage / "checkpoints" / str(step) / "state")["params"]
    before = params_lib.flatten(init["params"])
    after = params_lib.flatten(state["params"]["bert"])
    assert sorted(after) == sorted(k for k in before if not k.startswith("pooler/"))  # mean pooling: no pooler
    for k in after:  # the frozen encoder: every weight as it was
        np.testing.assert_array_equal(after[k], before[k], err_msg=k)
    lora = params_lib.flatten(state["lora"])
    assert len(lora) == 2 * 2 * mc.num_layers and min(np.abs(v).max() for k, v in lora.items()
                                                      if k.endswith("lora_b")) > 0, "B starts at zero: it trained"
    merged, _, info, _ = params_lib.load_params(stage / "best")
    assert info["head"] == "encoder" and set(merged) == {"bert"}
    moved = params_lib.flatten(merged["bert"])
    changed = [k for k in moved if not np.array_equal(moved[k], before[k])]
    assert changed and all(k.split("/")[-2] in ("query", "value") for k in changed), changed
    again, _, _ = merge_adapter_dir(tmp_path / "init", stage / "best_adapter")  # the adapters alone + the base
    a, b = params_lib.flatten(again), params_lib.flatten(merged)
    assert sorted(k for k in a if k not in b) == ["bert/pooler/dense/bias", "bert/pooler/dense/kernel"]
    for k in b:
        np.testing.assert_allclose(a[k], b[k], atol=1e-6, rtol=0, err_msg=k)


def test_supervised_variant_takes_the_positive_pairs_of_a_glue_tsv(minilm_tok, shared_data):
    from ptm_jax.data.tasks.glue import read_glue

    glue = shared_data / "glue"
    cfg = run_cfg(minilm_tok, glue / "STS-B" / "train.tsv", "", supervised=True)
    obj, desc = build_consert(cfg, cfg.model, minilm_tok)
    rows, _ = read_glue(glue, "stsb", "train")
    positive = [e for e in rows if e.label >= 4.0]
    assert obj.num_train == len(positive) and f"{len(positive)} positive pairs of {len(rows)}" in desc
    first = minilm_tok.encode(positive[0].text_a)[:30]
    second = minilm_tok.encode(positive[0].text_b)[:30]
    assert obj.train["input_ids"][0, 0, 1:1 + len(first)].tolist() == first
    assert obj.train["input_ids"][0, 1, 1:1 + len(second)].tolist() == second
    cfg = run_cfg(minilm_tok, glue / "SST-2" / "train.tsv", glue, supervised=True)
    with pytest.raises(ConfigError, match=r"holds single sentences; use a pair task"):
        build_consert(cfg, cfg.model, minilm_tok)


# ------------------------------------------------------------------------------------------ NLI-supervised (Sec. 3.5)

def quiet_bert(minilm_tok) -> BertConfig:
    """tiny_bert without dropout: the training encodings equal the evaluation ones, so numpy can recompute them."""
    import dataclasses

    return dataclasses.replace(tiny_bert(minilm_tok), hidden_dropout=0.0, attention_dropout=0.0)


def nli_objective(minilm_tok, shared_data, mode, **fine):
    cfg = run_cfg(minilm_tok, shared_data / "glue" / "RTE" / "train.tsv", "", supervised=mode,
                  train_subset=24, **fine)
    cfg.model = quiet_bert(minilm_tok)
    return build_consert(cfg, cfg.model, minilm_tok)


def numpy_softmax_ce(u, v, kernel, bias, labels, weights):
    x = np.concatenate([u, v, np.abs(u - v)], axis=-1).astype(np.float64) @ np.asarray(kernel, np.float64) + bias
    logp = x - x.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    ce = -logp[np.arange(len(labels)), labels.astype(int)]
    return float((ce * weights).sum() / weights.sum())


def _nli_batch(obj):
    batch = {k: v[:8].copy() for k, v in obj.train.items()}
    batch["weights"][6] = 0.0  # a padding row: neither a classification row nor a contrastive anchor/negative
    return batch


def _encodings(obj, params, batch):
    return [np.asarray(jax.jit(obj.model.apply)(params, batch["input_ids"][:, k], batch["input_mask"][:, k]))
            for k in (0, 1)]


def test_nli_loss_is_softmax_ce_over_u_v_absdiff_against_numpy(minilm_tok, shared_data):
    from ptm_jax.data.tasks.glue import read_glue

    obj, desc = nli_objective(minilm_tok, shared_data, "nli")
    rows, _ = read_glue(shared_data / "glue", "rte", "train")
    assert obj.num_classes == 2 and obj.num_train == 24 and f"{len(rows)} labelled pairs (rte, 2 classes" in desc
    assert set(obj.train["labels"].tolist()) <= {0.0, 1.0}
    batch = _nli_batch(obj)
    params = nn.meta.unbox(jax.jit(obj.init)(jax.random.key(0), batch))
    head = params["params"]["nli_classifier"]["dense"]
    assert head["kernel"].shape == (3 * 32, 2)
    jb = {k: jnp.asarray(v) for k, v in batch.items()}
    loss, terms = jax.jit(lambda p, r: obj.loss(p, jb, r, obj.normalizers(jb), True))(params, jax.random.key(1))
    u, v = _encodings(obj, params, batch)
    want = numpy_softmax_ce(u, v, head["kernel"], head["bias"], batch["labels"], batch["weights"])
    np.testing.assert_allclose(float(loss), want, rtol=1e-5)
    assert float(terms["loss"][1]) == 7 and float(terms["ce"][0]) == pytest.approx(7 * want, rel=1e-5)
    # the kept model is the bare encoder; the classification loss alone allows gradient accumulation
    assert set(obj.saved_params(params)["params"]) == {"bert"}
    check_grad_accum(obj, 2)  # no error


def test_joint_loss_is_ce_plus_alpha_times_the_reference_scaled_nt_xent(minilm_tok, shared_data):
    obj, desc = nli_objective(minilm_tok, shared_data, "joint", views="none,none", alpha=0.4)
    assert "L_ce + 0.4 * L_con" in desc
    batch = _nli_batch(obj)
    params = nn.meta.unbox(jax.jit(obj.init)(jax.random.key(0), batch))
    jb = {k: jnp.asarray(v) for k, v in batch.items()}
    loss, terms = jax.jit(lambda p, r: obj.loss(p, jb, r, obj.normalizers(jb), True))(params, jax.random.key(1))
    u, v = _encodings(obj, params, batch)
    head = params["params"]["nli_classifier"]["dense"]
    ce = numpy_softmax_ce(u, v, head["kernel"], head["bias"], batch["labels"], batch["weights"])
    # the reference's scale: per side, both directions' means over the B rows = 2 x the per-anchor mean
    con = 2 * numpy_nt_xent(u, u, batch["weights"], 0.1) + 2 * numpy_nt_xent(v, v, batch["weights"], 0.1)
    np.testing.assert_allclose(float(loss), ce + 0.4 * con, rtol=1e-5)
    np.testing.assert_allclose(float(terms["contrastive"][0] / terms["contrastive"][1]), con, rtol=1e-5)
    assert float(terms["contrastive_accuracy"][1]) == 4 * 7  # 2B anchors per side, padding excluded
    # in-batch negatives: joint refuses gradient accumulation
    with pytest.raises(ConfigError, match=r"train.grad_accum_steps=2: objective 'consert' couples the rows"):
        check_grad_accum(obj, 2)


def test_nli_variants_refuse_bad_values_and_unlabelled_or_regression_tasks(minilm_tok, shared_data):
    from ptm_jax.config_loading import from_dict

    glue = shared_data / "glue"
    with pytest.raises(ConfigError, match=r"consert.supervised='sbert' is not one of none, positive_pairs, "
                                          r"nli, joint"):
        cfg = run_cfg(minilm_tok, glue / "RTE" / "train.tsv", glue, supervised="sbert")
        build_consert(cfg, cfg.model, minilm_tok)
    with pytest.raises(ConfigError, match=r"consert.supervised: 'sbert' is not allowed"):
        from_dict(ConsertConfig, {"supervised": "sbert"}, prefix="consert.")
    assert from_dict(ConsertConfig, {"supervised": True}).supervised is True  # older configs
    for path, msg in (
            (glue / "STS-B" / "train.tsv", r"\(stsb\) is a regression task .* needs class labels"),
            (glue / "RTE" / "test.tsv", r"\(rte test\) has no labels \(a GLUE test split\)"),
            (glue / "SST-2" / "train.tsv", r"\(sst2\) holds single sentences"),
            (glue, r"needs labelled sentence pairs: set finetune.data_dir to a GLUE pair TSV")):
        cfg = run_cfg(minilm_tok, path, glue, supervised="nli")
        with pytest.raises(ConfigError, match=rf"consert.supervised='nli'.*{msg}"):
            build_consert(cfg, cfg.model, minilm_tok)
    cfg = run_cfg(minilm_tok, glue / "RTE" / "train.tsv", glue, supervised="joint", alpha=0.0)
    with pytest.raises(ConfigError, match=r"consert.alpha=0.0 must be > 0"):
        build_consert(cfg, cfg.model, minilm_tok)
    cfg = run_cfg(minilm_tok, glue / "RTE" / "train.tsv", glue, supervised="joint",
                  views="none,adversarial")
    with pytest.raises(ConfigError, match=r"adversarial view is not built for consert.supervised='joint'"):
        build_consert(cfg, cfg.model, minilm_tok)


def test_joint_finetune_on_real_rte_rows_trains_evaluates_and_keeps_a_bare_encoder(minilm_tok, minilm_vocab,
                                                                                   shared_data, tmp_path):
    from ptm_jax.export.inference import embed_texts
    from ptm_jax.export.params import load_params, load_tokenizer, save_params
    from ptm_jax.families.bert.model import BertModel
    from ptm_jax.train.finetune import finetune

    mc = tiny_bert(minilm_tok)  # dropout 0.1: the supervised variants train with it
    ids = jnp.zeros((1, 8), jnp.int32)
    init = nn.meta.unbox(BertModel(mc, name="bert").init(jax.random.key(0), ids, ids + 1, ids))
    save_params(tmp_path / "init", {"bert": init["params"]}, mc, "encoder", tokenizer_files=[minilm_vocab])
    cfg = run_cfg(minilm_tok, shared_data / "glue" / "RTE" / "train.tsv", "", init=str(tmp_path / "init"),
                  supervised="joint", views="none,token_cutoff:0.1", train_subset=32, batch_size=8,
                  epochs=3.0, learning_rate=3e-3, warmup_proportion=0.0, eval_every=12)
    cfg.output_dir = str(tmp_path / "run")
    cfg.train.log_every = 1
    summary = finetune(cfg)
    assert summary["steps"] == 12 and summary["primary_metric"] == "spearman"
    assert "32 kept (train_subset)" in summary["description"]
    rows = [json.loads(x) for x in (tmp_path / "run" / "finetune-consert" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["split"] == "train"]
    assert len(train) == 12
    for r in train:  # the logged loss is its two parts, combined with alpha = 0.15
        assert r["loss"] == pytest.approx(r["ce"] + 0.15 * r["contrastive"], rel=1e-4)
    assert np.mean([r["loss"] for r in train[-4:]]) < 0.8 * np.mean([r["loss"] for r in train[:4]])
    assert -1.0 <= summary["best"]["metrics"]["spearman"] <= 1.0
    best = tmp_path / "run" / "finetune-consert" / "best"
    params, cfg_b, info, tok_dir = load_params(best)
    assert info["head"] == "encoder" and set(params) == {"bert"}  # the classifier stayed behind
    texts = ["A plane is taking off.", "A man is playing a flute."]
    vectors = embed_texts(params, cfg_b, load_tokenizer(info, tok_dir), texts, pooling="mean", max_length=32)
    assert vectors.shape == (2, 32) and np.all(np.isfinite(vectors))
