"""Hugging Face BERT <-> ptm_jax: random-init transformers models of several shapes and every head give the
same hidden states, pooled output and logits as our models (torch fp32 eval vs JAX fp32, max-abs <= 1e-5)
after import, and again after export -> transformers reload, with no unused/newly-initialised weights."""
from __future__ import annotations

import dataclasses
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ptm_jax.export import params as params_lib  # noqa: E402
from ptm_jax.families.bert import hf as hf_bert  # noqa: E402
from ptm_jax.families.bert.heads import BertForPreTraining, MlmHead  # noqa: E402
from ptm_jax.families.bert.model import BertModel  # noqa: E402
from ptm_jax.families.bert.task_heads import (  # noqa: E402
    BertForMultipleChoice,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)

TOL = 1e-5
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(300)]

# (case, transformers class, config, serialization): shapes differ in hidden/layers/heads/ffn/vocab/types.
CASES = [
    ("encoder", "BertModel", dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=40), "safetensors"),
    ("pretraining", "BertForPreTraining", dict(vocab_size=150, hidden_size=48, num_hidden_layers=3,
                                               num_attention_heads=6, intermediate_size=96, type_vocab_size=3,
                                               max_position_embeddings=24, hidden_act="gelu_new"), "bin"),
    ("pretraining_st", "BertForPreTraining", dict(vocab_size=120, hidden_size=64, num_hidden_layers=2,
                                                  num_attention_heads=2, intermediate_size=160,
                                                  max_position_embeddings=16, layer_norm_eps=1e-6),
     "safetensors"),
    ("masked_lm", "BertForMaskedLM", dict(vocab_size=77, hidden_size=24, num_hidden_layers=1,
                                          num_attention_heads=3, intermediate_size=40,
                                          max_position_embeddings=16), "safetensors"),
    ("sequence_classification", "BertForSequenceClassification",
     dict(vocab_size=130, hidden_size=40, num_hidden_layers=2, num_attention_heads=5, intermediate_size=72,
          max_position_embeddings=32, num_labels=3, id2label={0: "neg", 1: "neutral", 2: "pos"},
          label2id={"neg": 0, "neutral": 1, "pos": 2}), "safetensors"),
    ("token_classification", "BertForTokenClassification",
     dict(vocab_size=90, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
          max_position_embeddings=20, num_labels=5), "safetensors"),
    ("question_answering", "BertForQuestionAnswering",
     dict(vocab_size=90, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=48,
          max_position_embeddings=20), "safetensors"),
    ("multiple_choice", "BertForMultipleChoice",
     dict(vocab_size=90, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=48,
          max_position_embeddings=20), "safetensors"),
]


def make_hf_model(cls_name: str, cfg_kwargs: dict, seed: int = 0):
    """A random transformers model whose every tensor (LayerNorm and biases included) is non-trivial."""
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, **cfg_kwargs)
    model = getattr(transformers, cls_name)(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def save_hf(model, path, serialization: str) -> None:
    model.save_pretrained(path, safe_serialization=serialization == "safetensors")
    (path / "vocab.txt").write_text("\n".join(VOCAB[: model.config.vocab_size]) + "\n")


def batch(vocab: int, b: int = 3, s: int = 12, seed: int = 1):
    """Padding (lengths 12, 7, 9) and two segments."""
    r = np.random.default_rng(seed)
    ids = r.integers(5, vocab, (b, s)).astype(np.int32)
    lengths = np.array([s, 7, 9][:b])
    mask = (np.arange(s)[None] < lengths[:, None]).astype(np.int32)
    seg = ((np.arange(s)[None] >= (lengths[:, None] // 2)) & (mask == 1)).astype(np.int32)
    ids[:, 0] = 2
    ids = np.where(mask == 1, ids, 0)
    return ids, mask, seg


def torch_outputs(model, case: str, ids, mask, seg) -> dict[str, np.ndarray]:
    t = lambda x: torch.tensor(x, dtype=torch.long)  # noqa: E731
    with torch.no_grad():
        if case == "multiple_choice":
            o = model(t(ids)[None], attention_mask=t(mask)[None], token_type_ids=t(seg)[None],
                      output_hidden_states=True)
            return {"hidden": o.hidden_states[-1].numpy()[None], "logits": o.logits.numpy()}
        o = model(t(ids), attention_mask=t(mask), token_type_ids=t(seg), output_hidden_states=True)
    out = {"hidden": (o.last_hidden_state if case == "encoder" else o.hidden_states[-1]).numpy()}
    if case == "encoder":
        out["pooled"] = o.pooler_output.numpy()
    elif case.startswith("pretraining"):
        out["mlm"], out["nsp"] = o.prediction_logits.numpy(), o.seq_relationship_logits.numpy()
    elif case == "masked_lm":
        out["mlm"] = o.logits.numpy()
    elif case == "question_answering":
        out["start"], out["end"] = o.start_logits.numpy(), o.end_logits.numpy()
    else:
        out["logits"] = o.logits.numpy()
    return out


def ours_outputs(params, cfg, info, case: str, ids, mask, seg) -> dict[str, np.ndarray]:
    ids, mask, seg = map(jnp.asarray, (ids, mask, seg))
    has_pooler = "pooler" in params["bert"]
    hidden, pooled = BertModel(cfg, add_pooler=has_pooler).apply({"params": params["bert"]}, ids, mask, seg)
    out = {"hidden": np.asarray(hidden)}
    v = {"params": params}
    if case == "encoder":
        out["pooled"] = np.asarray(pooled)
    elif case.startswith("pretraining"):
        positions = jnp.broadcast_to(jnp.arange(ids.shape[1]), ids.shape)
        mlm, nsp = BertForPreTraining(cfg).apply(v, ids, mask, seg, positions)
        out["mlm"], out["nsp"] = np.asarray(mlm), np.asarray(nsp)
    elif case == "masked_lm":
        table = params["bert"]["embeddings"]["word_embeddings"]["embedding"]
        out["mlm"] = np.asarray(MlmHead(cfg).apply({"params": params["mlm"]}, hidden, table))
    elif case == "sequence_classification":
        out["logits"] = np.asarray(BertForSequenceClassification(cfg, info["num_labels"]).apply(v, ids, mask, seg))
    elif case == "token_classification":
        out["logits"] = np.asarray(BertForTokenClassification(cfg, info["num_labels"]).apply(v, ids, mask, seg))
    elif case == "question_answering":
        start, end = BertForQuestionAnswering(cfg).apply(v, ids, mask, seg)
        out["start"], out["end"] = np.asarray(start), np.asarray(end)
    elif case == "multiple_choice":
        out["logits"] = np.asarray(BertForMultipleChoice(cfg).apply(v, ids[None], mask[None], seg[None]))
        out["hidden"] = out["hidden"][None]
    return out


def max_errors(a: dict, b: dict) -> dict[str, float]:
    assert set(a) == set(b)
    return {k: float(np.abs(a[k] - b[k]).max()) for k in a}


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.messages: list[tuple[int, str]] = []

    def emit(self, record):
        self.messages.append((record.levelno, record.getMessage()))


def load_in_transformers(cls_name: str, path):
    """(model, [(level, message)] logged by transformers while loading)."""
    logger = logging.getLogger("transformers")
    handler, old = _Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        model = getattr(transformers, cls_name).from_pretrained(path).eval()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
    return model, handler.messages


def weight_complaints(messages, min_level: int) -> list[str]:
    return [m for lvl, m in messages if lvl >= min_level and ("were not used" in m or "newly initialized" in m
                                                              or "not initialized" in m)]


@pytest.mark.parametrize("case,cls_name,cfg_kwargs,serialization", CASES, ids=[c[0] for c in CASES])
def test_import_and_export_match_transformers(tmp_path, case, cls_name, cfg_kwargs, serialization):
    hf = make_hf_model(cls_name, cfg_kwargs)
    save_hf(hf, tmp_path / "hf", serialization)
    weights = "model.safetensors" if serialization == "safetensors" else "pytorch_model.bin"
    assert (tmp_path / "hf" / weights).is_file()
    ids, mask, seg = batch(cfg_kwargs["vocab_size"], s=min(12, cfg_kwargs["max_position_embeddings"]))
    want = torch_outputs(hf, case, ids, mask, seg)

    params, cfg, info, tok_dir = hf_bert.import_hf(tmp_path / "hf")
    head = case.removesuffix("_st")
    assert info["head"] == head and tok_dir == tmp_path / "hf"
    assert cfg.num_layers == cfg_kwargs["num_hidden_layers"] and cfg.vocab_size == cfg_kwargs["vocab_size"]
    assert cfg.hidden_act == ("gelu_tanh" if cfg_kwargs.get("hidden_act") == "gelu_new" else "gelu")
    if case == "sequence_classification":
        assert info["num_labels"] == 3 and info["label_names"] == ["neg", "neutral", "pos"]
    ours = ours_outputs(params, cfg, info, case, ids, mask, seg)
    errs = max_errors(ours, want)
    print(f"\n{case} import max-abs: {errs}")
    assert max(errs.values()) <= TOL, errs

    # export -> transformers (head class, and AutoModel) -> same numbers, no weight complaints
    params_dir = params_lib.save_params(tmp_path / "ptm", params, cfg, info.pop("head"), info,
                                        [tok_dir / "vocab.txt"])
    report = hf_bert.export_hf(params_dir, tmp_path / "out")
    assert report.architecture == cls_name and report.left_out == ()
    back, messages = load_in_transformers(cls_name, tmp_path / "out")
    assert weight_complaints(messages, logging.INFO) == []
    reloaded = torch_outputs(back, case, ids, mask, seg)
    errs_back = max_errors(reloaded, want)
    errs_ours = max_errors(reloaded, ours)
    print(f"{case} export: reloaded vs original max-abs {errs_back}, reloaded vs ours {errs_ours}")
    assert max(errs_back.values()) <= TOL and max(errs_ours.values()) <= TOL, (errs_back, errs_ours)
    if case not in ("token_classification", "question_answering", "masked_lm"):  # these carry no pooler
        _, auto_messages = load_in_transformers("AutoModel", tmp_path / "out")
        assert weight_complaints(auto_messages, logging.WARNING) == []

    # bitwise: exported tensors == the transformers state dict; import(export(x)) == x
    state = {k: v.numpy() for k, v in hf.state_dict().items()}
    from safetensors.numpy import load_file

    exported = load_file(str(tmp_path / "out" / "model.safetensors"))
    for k, v in exported.items():
        assert np.array_equal(v, state[k]), k
    again, cfg2, _, _ = hf_bert.import_hf(tmp_path / "out")
    assert cfg2 == cfg
    flat_a, flat_b = params_lib.flatten(params), params_lib.flatten(again)
    assert flat_a.keys() == flat_b.keys()
    assert all(np.array_equal(flat_a[k], flat_b[k]) for k in flat_a)


@pytest.mark.parametrize("cls_name,model_fn", [
    ("BertForPreTraining", lambda cfg, n: BertForPreTraining(cfg)),
    ("BertForSequenceClassification", lambda cfg, n: BertForSequenceClassification(cfg, n)),
    ("BertForTokenClassification", lambda cfg, n: BertForTokenClassification(cfg, n)),
    ("BertForQuestionAnswering", lambda cfg, n: BertForQuestionAnswering(cfg)),
    ("BertForMultipleChoice", lambda cfg, n: BertForMultipleChoice(cfg)),
])
def test_imported_tree_has_exactly_the_model_parameters(tmp_path, cls_name, model_fn):
    labels = {} if cls_name == "BertForQuestionAnswering" else {"num_labels": 4}  # HF QA: 2 outputs
    hf = make_hf_model(cls_name, dict(vocab_size=60, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=24, max_position_embeddings=16, **labels))
    save_hf(hf, tmp_path, "safetensors")
    params, cfg, info, _ = hf_bert.import_hf(tmp_path)
    ids = jnp.zeros((1, 1, 8) if cls_name == "BertForMultipleChoice" else (1, 8), jnp.int32)
    args = (ids, ids, ids) + ((ids[:, :2],) if cls_name == "BertForPreTraining" else ())
    shapes = jax.eval_shape(lambda: model_fn(cfg, info.get("num_labels", 4)).init(jax.random.key(0), *args))
    import flax.linen as nn

    leaves = jax.tree_util.tree_flatten_with_path(nn.meta.unbox(shapes)["params"])[0]
    want = {"/".join(k.key for k in path): tuple(v.shape) for path, v in leaves}
    got = {k: v.shape for k, v in params_lib.flatten(params).items()}
    assert got == want
    assert sum(int(np.prod(s)) for s in got.values()) == sum(p.numel() for p in hf.parameters())


def test_scan_layout_round_trips_and_computes_the_same(tmp_path):
    hf = make_hf_model("BertModel", CASES[0][2])
    save_hf(hf, tmp_path / "hf", "safetensors")
    params, cfg, info, tok = hf_bert.import_hf(tmp_path / "hf")
    scan_cfg = dataclasses.replace(cfg, scan_layers=True)
    params_lib.save_params(tmp_path / "ptm", params, scan_cfg, "encoder", info, [tok / "vocab.txt"])
    loaded, cfg2, _, _ = params_lib.load_params(tmp_path / "ptm")
    assert cfg2.scan_layers and loaded["bert"]["encoder"]["layers"]["layer"]["attention"]["query"]["kernel"].shape \
        == (2, 32, 4, 8)
    ids, mask, seg = batch(99)
    want = torch_outputs(hf, "encoder", ids, mask, seg)
    errs = max_errors(ours_outputs(loaded, cfg2, info, "encoder", ids, mask, seg), want)
    assert max(errs.values()) <= TOL, errs
    hf_bert.export_hf(tmp_path / "ptm", tmp_path / "out")
    back, cfg3, _, _ = hf_bert.import_hf(tmp_path / "out")
    flat_a, flat_b = params_lib.flatten(params), params_lib.flatten(back)
    assert flat_a.keys() == flat_b.keys() and all(np.array_equal(flat_a[k], flat_b[k]) for k in flat_a)
