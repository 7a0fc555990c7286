"""Hugging Face BERT checkpoints <-> ptm_jax parameter trees (both directions, strict).

Tensor names and layouts follow transformers' ``models/bert/modeling_bert.py`` (``BertModel`` and the
``BertFor*`` heads, ``bert.`` prefix on the encoder inside a head model); torch ``nn.Linear`` stores
``[out, in]`` where Flax stores ``[in, out]``, and our attention projections keep the head axis separate
(``[H, heads, head_dim]`` / ``[heads, head_dim, H]``). Every conversion is a transpose or a reshape, so
import(export(x)) == x bit for bit.

Import is strict: a missing tensor, an unexpected tensor or a shape mismatch is a ``CheckpointError`` that
names the tensors. The only tolerated extras are the ones transformers itself ignores, by name: the
``embeddings.position_ids`` buffer and the tied decoder copies (``cls.predictions.decoder.*``, which must
equal the word embeddings / output bias they are tied to). A pooler in a checkpoint whose head has none in
our model (token tagging, span QA) is dropped and reported in ``info['dropped']``, as transformers does.
Weights are read from safetensors, or from ``pytorch_model.bin`` with ``torch.load(weights_only=True)`` only.
A model folder is untrusted input: config.json sizes are type- and range-checked against INT_FIELDS /
FLOAT_FIELDS before any shape is computed, and every JSON file is read by ``read_json``; each refusal is a
``CheckpointError`` naming the file, the key or line, and what to do.
"""
from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ptm_jax.data import tokenizer_json
from ptm_jax.families.bert.config import BertConfig
from ptm_jax.errors import CheckpointError
from ptm_jax.export import params as params_lib
from ptm_jax.export.hf_files import (
    ACT_FROM_HF,
    ACT_TO_HF,
    HfExport,
    Rule,
    apply_rules,
    dense_rules,
    fmt_names,
    get_path,
    label_names,
    linear_rule,
    norm_rules,
    read_hf_dir,
    read_json,
    rule_problems,
    rules_to_hf,
    st_modules,
    write_hf_dir,
)

log = logging.getLogger(__name__)

ARCHITECTURES = {  # our head -> transformers class
    "encoder": "BertModel", "pretraining": "BertForPreTraining", "masked_lm": "BertForMaskedLM",
    "sequence_classification": "BertForSequenceClassification", "token_classification": "BertForTokenClassification",
    "question_answering": "BertForQuestionAnswering", "multiple_choice": "BertForMultipleChoice"}
HEAD_OF_ARCH = {v: k for k, v in ARCHITECTURES.items()}
POOLER_REQUIRED = {"pretraining", "sequence_classification", "multiple_choice"}
NO_POOLER = {"token_classification", "question_answering"}  # our (and HF's) models have none
IGNORED_BY_HF = ("embeddings.position_ids",)  # a non-persistent buffer in old checkpoints
TIED = {"cls.predictions.decoder.weight": ("bert", "embeddings", "word_embeddings", "embedding"),
        "cls.predictions.decoder.bias": ("mlm", "output_bias")}
SPECIAL_TOKENS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                  "mask_token": "[MASK]"}


# ----------------------------------------------------------------------------------------------------
# Name/layout rules


def encoder_rules(cfg: BertConfig, prefix: str, has_pooler: bool) -> list[Rule]:
    """Rules of BertModel; ``prefix`` is '' (a bare BertModel checkpoint) or 'bert.'. Paths are loop layout."""
    h, n, f = cfg.hidden_size, cfg.num_heads, cfg.intermediate_size
    d = h // n
    e = ("bert", "embeddings")
    rules = [Rule(f"{prefix}embeddings.{name}.weight", e + (name, "embedding"), (rows, h), (rows, h))
             for name, rows in (("word_embeddings", cfg.vocab_size), ("position_embeddings",
                                cfg.max_position_embeddings), ("token_type_embeddings", cfg.type_vocab_size))]
    rules += norm_rules(f"{prefix}embeddings.LayerNorm", e + ("norm",), h)
    for i in range(cfg.num_layers):
        hf, p = f"{prefix}encoder.layer.{i}", ("bert", "encoder", f"layers_{i}")
        for name in ("query", "key", "value"):
            rules += [linear_rule(f"{hf}.attention.self.{name}.weight", p + ("attention", name, "kernel"), (h, n, d), 1),
                      Rule(f"{hf}.attention.self.{name}.bias", p + ("attention", name, "bias"), (n, d), (h,))]
        rules += [linear_rule(f"{hf}.attention.output.dense.weight", p + ("attention", "output", "kernel"), (n, d, h), 2),
                  Rule(f"{hf}.attention.output.dense.bias", p + ("attention", "output", "bias"), (h,), (h,))]
        rules += norm_rules(f"{hf}.attention.output.LayerNorm", p + ("attention_norm",), h)
        rules += dense_rules(f"{hf}.intermediate.dense", p + ("intermediate",), h, f)
        rules += dense_rules(f"{hf}.output.dense", p + ("output",), f, h)
        rules += norm_rules(f"{hf}.output.LayerNorm", p + ("output_norm",), h)
    if has_pooler:
        rules += dense_rules(f"{prefix}pooler.dense", ("bert", "pooler"), h, h)
    return rules


def head_rules(cfg: BertConfig, head: str, num_labels: int) -> list[Rule]:
    h = cfg.hidden_size
    rules: list[Rule] = []
    if head in ("pretraining", "masked_lm"):
        rules += dense_rules("cls.predictions.transform.dense", ("mlm", "transform"), h, h)
        rules += norm_rules("cls.predictions.transform.LayerNorm", ("mlm", "transform_norm"), h)
        rules.append(Rule("cls.predictions.bias", ("mlm", "output_bias"), (cfg.vocab_size,), (cfg.vocab_size,)))
    if head == "pretraining":
        rules += dense_rules("cls.seq_relationship", ("nsp",), h, 2)
    if head in ("sequence_classification", "token_classification", "multiple_choice"):
        rules += dense_rules("classifier", ("classifier",), h, 1 if head == "multiple_choice" else num_labels)
    if head == "question_answering":
        rules += dense_rules("qa_outputs", ("qa_outputs",), h, 2)
    return rules


def all_rules(cfg: BertConfig, head: str, num_labels: int, has_pooler: bool, prefix: str | None = None
              ) -> list[Rule]:
    if prefix is None:
        prefix = "" if head == "encoder" else "bert."
    return encoder_rules(cfg, prefix, has_pooler) + head_rules(cfg, head, num_labels)


# ----------------------------------------------------------------------------------------------------
# Config


# config.json sizes: HF key -> (BertConfig field, default (None: required), min, max). The maxima are far
# above every published BERT (vocab 250k, 48 layers, hidden 4096) yet refuse a corrupt value before it drives
# a loop over layers or a shape computation.
INT_FIELDS = {"vocab_size": ("vocab_size", None, 1, 1 << 24), "hidden_size": ("hidden_size", None, 1, 1 << 16),
              "num_hidden_layers": ("num_layers", None, 1, 1024), "num_attention_heads": ("num_heads", None, 1, 4096),
              "intermediate_size": ("intermediate_size", None, 1, 1 << 18),
              "max_position_embeddings": ("max_position_embeddings", 512, 1, 1 << 20),
              "type_vocab_size": ("type_vocab_size", 2, 1, 4096)}
FLOAT_FIELDS = {  # HF key -> (BertConfig field, default, allowed range as a test and in words)
    "hidden_dropout_prob": ("hidden_dropout", 0.1, lambda x: 0.0 <= x < 1.0, "in [0, 1)"),
    "attention_probs_dropout_prob": ("attention_dropout", 0.1, lambda x: 0.0 <= x < 1.0, "in [0, 1)"),
    "layer_norm_eps": ("layer_norm_eps", 1e-12, lambda x: 0.0 < x <= 1.0, "in (0, 1]"),
    "initializer_range": ("initializer_range", 0.02, lambda x: 0.0 <= x <= 1e3, "in [0, 1000]")}


def _bad(where: Path, key: str, value: Any, wanted: str) -> CheckpointError:
    shown = f"<{value.bit_length()}-bit integer>" if isinstance(value, int) and value.bit_length() > 256 else \
        f"{value!r:.80}"
    return CheckpointError(f"{where}: {key}={shown} ({type(value).__name__}) is not {wanted}; fix that key of "
                           "config.json or re-download the model folder")


def _hf_number(hf: dict[str, Any], key: str, default: Any, integer: bool, where: Path) -> int | float:
    if key not in hf and default is not None:
        return default
    value = hf[key]  # a missing required key is reported by the caller
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise _bad(where, key, value, "an integer" if integer else "a number")
    try:
        return value if integer else float(value)
    except OverflowError:
        raise _bad(where, key, value, "a finite number") from None


def _check_hf_extras(hf: dict[str, Any], where: Path) -> None:
    """Types of the keys import reads besides the sizes and flags (architectures, id2label, pad_token_id)."""
    archs = hf.get("architectures")
    if archs is not None and not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
        raise _bad(where, "architectures", archs, "a list of class names")
    if not isinstance(hf.get("id2label") or {}, dict):
        raise _bad(where, "id2label", hf["id2label"], "an object mapping label ids to names")
    pad = hf.get("pad_token_id")
    if pad is not None and (isinstance(pad, bool) or not isinstance(pad, int) or not 0 <= pad < hf["vocab_size"]):
        raise _bad(where, "pad_token_id", pad, f"null or a token id in [0, vocab_size={hf['vocab_size']})")


def model_config_from_hf(hf: dict[str, Any], where: Path) -> BertConfig:
    """transformers BertConfig dict -> BertConfig; refuses what our BERT cannot represent, a value of the wrong
    JSON type and a size outside INT_FIELDS' bounds, naming the key."""
    if not isinstance(hf, dict):
        raise CheckpointError(f"{where}: holds a JSON {type(hf).__name__}, not an object of BERT settings; "
                              "re-download the model folder")
    if hf.get("model_type", "bert") != "bert":
        raise CheckpointError(f"{where}: model_type={hf['model_type']!r:.80}; only BERT checkpoints (model_type "
                              "'bert') import here: pick a BERT model folder")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"{where}: position_embedding_type={hf['position_embedding_type']!r:.80} is not "
                              "supported (only 'absolute'): pick a BERT with absolute position embeddings")
    for key in ("is_decoder", "add_cross_attention"):
        if not isinstance(hf.get(key, False), (bool, type(None))):
            raise _bad(where, key, hf[key], "true or false")
        if hf.get(key):
            raise CheckpointError(f"{where}: {key}=true; decoder / cross-attention BERT variants are not "
                                  "supported: pick an encoder-only BERT")
    act = hf.get("hidden_act", "gelu")
    if not isinstance(act, str) or act not in ACT_FROM_HF:
        raise CheckpointError(f"{where}: hidden_act={act!r:.80} is not supported; expected one of "
                              f"{', '.join(ACT_FROM_HF)}")
    fields: dict[str, Any] = {"hidden_act": ACT_FROM_HF[act]}
    try:
        for key, (name, default, low, high) in INT_FIELDS.items():
            fields[name] = value = _hf_number(hf, key, default, True, where)
            if not low <= value <= high:
                raise _bad(where, key, value, f"in [{low}, {high}]")
        for key, (name, default, ok, wanted) in FLOAT_FIELDS.items():
            fields[name] = value = _hf_number(hf, key, default, False, where)
            if not ok(value):  # NaN fails every comparison
                raise _bad(where, key, value, f"a number {wanted}")
    except KeyError as e:
        raise CheckpointError(f"{where}: lacks the BERT config field {e.args[0]!r}; a BERT config.json sets "
                              f"{', '.join(k for k, v in INT_FIELDS.items() if v[1] is None)}") from None
    _check_hf_extras(hf, where)
    cfg = BertConfig(**fields)
    if cfg.hidden_size % cfg.num_heads:
        raise CheckpointError(f"{where}: hidden_size={cfg.hidden_size} is not divisible by "
                              f"num_attention_heads={cfg.num_heads}; fix these keys of config.json")
    return cfg


def hf_config(cfg: BertConfig, head: str, info: dict[str, Any]) -> dict[str, Any]:
    """BertConfig (+ head, labels) -> a transformers BertConfig dict."""
    out: dict[str, Any] = {
        "architectures": [ARCHITECTURES[head]], "model_type": "bert", "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size, "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
        "intermediate_size": cfg.intermediate_size, "hidden_act": ACT_TO_HF[cfg.hidden_act],
        "hidden_dropout_prob": cfg.hidden_dropout, "attention_probs_dropout_prob": cfg.attention_dropout,
        "max_position_embeddings": cfg.max_position_embeddings, "type_vocab_size": cfg.type_vocab_size,
        "initializer_range": cfg.initializer_range, "layer_norm_eps": cfg.layer_norm_eps,
        "pad_token_id": int(info.get("pad_token_id", 0)), "position_embedding_type": "absolute",
        "tie_word_embeddings": True}
    if head in ("sequence_classification", "token_classification"):
        n = int(info["num_labels"])
        names = info.get("label_names") or [f"LABEL_{i}" for i in range(n)]
        out["id2label"] = {str(i): str(x) for i, x in enumerate(names)}
        out["label2id"] = {str(x): i for i, x in enumerate(names)}
        if head == "sequence_classification" and n == 1:
            out["problem_type"] = "regression"
    return out


# ----------------------------------------------------------------------------------------------------
# Reading a Hugging Face directory


def sentence_transformers_info(path: Path) -> dict[str, Any] | None:
    """Pooling / normalisation / max length of a sentence-transformers folder (modules.json), if any."""
    modules = st_modules(path)
    if modules is None:
        return None
    out: dict[str, Any] = {"normalize": False}
    for kind, sub in modules:
        if kind.endswith("Pooling") and (path / sub / "config.json").is_file():
            pc = read_json(path / sub / "config.json")
            out["pooling"] = "cls" if pc.get("pooling_mode_cls_token") else "mean"
        elif kind.endswith("Normalize"):
            out["normalize"] = True
    sb = path / "sentence_bert_config.json"
    if sb.is_file():
        n = read_json(sb).get("max_seq_length", 512)
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 1 << 20:
            raise CheckpointError(f"{sb}: max_seq_length={n!r:.80} is not an integer in [1, {1 << 20}]; fix it")
        out["max_seq_length"] = n
    return out


# ----------------------------------------------------------------------------------------------------
# Conversion


def _rename_legacy(name: str) -> str:
    """TF-converted checkpoints name LayerNorm parameters gamma/beta (transformers renames them too)."""
    return re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name))


def detect_head(names: set[str], hf: dict[str, Any]) -> str:
    archs = [a for a in hf.get("architectures") or [] if a in HEAD_OF_ARCH]
    has_mlm = any(n.startswith("cls.predictions.") for n in names)
    has_nsp = any(n.startswith("cls.seq_relationship.") for n in names)
    if has_mlm or has_nsp:
        return "pretraining" if has_nsp else "masked_lm"
    if any(n.startswith("qa_outputs.") for n in names):
        return "question_answering"
    if any(n.startswith("classifier.") for n in names):
        if archs and HEAD_OF_ARCH[archs[0]] in ("sequence_classification", "token_classification",
                                                "multiple_choice"):
            return HEAD_OF_ARCH[archs[0]]
        return "sequence_classification" if any("pooler." in n for n in names) else "token_classification"
    return "encoder"


ExtraRules = Callable[[str], list[Rule]]
"""prefix ('' or 'bert.') -> rules of encoder tensors a BERT-shaped family adds to BERT's (ERNIE 2.0's task
embedding), converted with BERT's and held to the same strictness."""


def hf_to_params(tensors: dict[str, np.ndarray], cfg: BertConfig, hf: dict[str, Any], where: Path,
                 head: str | None = None, extra_rules: ExtraRules | None = None) -> tuple[dict, dict[str, Any]]:
    """HF name -> tensor to our params (loop layout, float32) and info (head, num_labels, dropped, ...).
    An explicit ``head`` (e.g. 'encoder' for a pretraining checkpoint) drops the other heads' tensors, by name."""
    tensors = {_rename_legacy(k): v for k, v in tensors.items()}
    names = set(tensors)
    explicit, head = head is not None, head or detect_head(names, hf)
    prefix = "bert." if any(n.startswith("bert.") for n in names) else ""
    has_pooler = head in POOLER_REQUIRED or (head not in NO_POOLER and f"{prefix}pooler.dense.weight" in names)
    clf = tensors.get("classifier.weight")
    if clf is not None and (clf.ndim != 2 or clf.shape[0] < 1):
        raise CheckpointError(f"{where}: classifier.weight has shape {tuple(clf.shape)}; expected "
                              f"[num_labels >= 1, hidden_size={cfg.hidden_size}]")
    num_labels = int(clf.shape[0]) if clf is not None else 2
    rules = all_rules(cfg, head, num_labels, has_pooler, prefix) + (extra_rules(prefix) if extra_rules else [])
    expected = {r.hf for r in rules}
    encoder = tuple(f"{prefix}{m}." for m in ("embeddings", "encoder", "pooler"))
    dropped = sorted(n for n in names - expected if (n.startswith(f"{prefix}pooler.") and head in NO_POOLER)
                     or (explicit and not n.startswith(encoder) and n not in TIED))
    unexpected = names - expected - {prefix + n for n in IGNORED_BY_HF} - set(TIED) - set(dropped)
    if head not in ("pretraining", "masked_lm"):
        unexpected |= names & set(TIED) - set(dropped)
    problems = rule_problems(rules, tensors, expected, unexpected)
    if problems:
        raise CheckpointError(f"{where}: does not match a {ARCHITECTURES[head]} with the shapes of its "
                              f"config.json (hidden {cfg.hidden_size}, layers {cfg.num_layers}, heads "
                              f"{cfg.num_heads}, vocab {cfg.vocab_size}): " + "; ".join(problems))
    params = apply_rules(rules, tensors)
    for name in names & set(TIED) - set(dropped):
        if not np.array_equal(np.asarray(tensors[name], np.float32), get_path(params, TIED[name])):
            raise CheckpointError(f"{where}: {name} differs from the tensor it is tied to ({'/'.join(TIED[name])}); "
                                  "our MLM head ties the decoder, untied decoders are not supported")
    if dropped:
        log.warning("%s: not imported (no place in a %s): %s", where, ARCHITECTURES[head], fmt_names(dropped))
    info: dict[str, Any] = {"head": head, "has_pooler": has_pooler, "dropped": dropped}
    if head in ("sequence_classification", "token_classification"):
        info["num_labels"] = num_labels
        labels = label_names(hf, num_labels)
        if labels:
            info["label_names"] = labels
    return params, info


def params_to_hf(params: dict, cfg: BertConfig, head: str, extra_rules: ExtraRules | None = None
                 ) -> tuple[dict[str, np.ndarray], list[str]]:
    """Our params (either layout) -> HF name -> contiguous float32 array, and the paths left out (a pooler
    the HF head class has no place for: token tagging, span QA, masked LM)."""
    params = params_lib.unstack_layers(params)
    has_pooler = "pooler" in params["bert"] and head not in NO_POOLER | {"masked_lm"}
    left_out = ["bert/pooler"] if "pooler" in params["bert"] and not has_pooler else []
    num_labels = int(np.shape(params["classifier"]["dense"]["kernel"])[-1]) if "classifier" in params else 2
    rules = all_rules(cfg, head, num_labels, has_pooler)
    if extra_rules:
        rules += extra_rules("" if head == "encoder" else "bert.")
    return rules_to_hf(params, rules, head), left_out


# ----------------------------------------------------------------------------------------------------
# Directory-level entry points


def tokenizer_source(d: Path) -> tuple[dict[str, Any], Path]:
    """The WordPiece tokenizer of an HF folder and the folder holding its files: ``vocab.txt`` there, else the
    one derived from ``tokenizer.json`` (what transformers 5 writes; ``data/tokenizer_json.py``)."""
    if not (d / "vocab.txt").is_file() and tokenizer_json.has_tokenizer_json(d):
        return tokenizer_json.classic_files(d, "WordPiece")
    return tokenizer_settings(d), d


def tokenizer_settings(d: Path) -> dict[str, Any]:
    """vocab.txt and do_lower_case of an HF folder (tokenizer_config.json; BERT's default is uncased)."""
    if not (d / "vocab.txt").is_file():
        raise CheckpointError(f"{d}: no vocab.txt (nor tokenizer.json); a BERT checkpoint needs its WordPiece "
                              "vocabulary")
    tc = read_json(d / "tokenizer_config.json") if (d / "tokenizer_config.json").is_file() else {}
    for key in ("do_lower_case", "strip_accents"):
        if not isinstance(tc.get(key), (bool, type(None))):
            raise CheckpointError(f"{d / 'tokenizer_config.json'}: {key}={tc[key]!r:.80} is not true, false or "
                                  "null; fix the file")
    lower = bool(tc.get("do_lower_case", True))
    if tc.get("strip_accents") is not None and bool(tc["strip_accents"]) != lower:
        log.warning("%s: strip_accents=%s differs from do_lower_case=%s; our WordPiece strips accents exactly "
                    "when it lower-cases", d, tc["strip_accents"], lower)
    return {"kind": "wordpiece", "lower_case": lower, "files": ["vocab.txt"]}


def import_hf(path: str | Path, head: str | None = None) -> tuple[dict, BertConfig, dict[str, Any], Path]:
    """A local HF BERT folder -> (params, model config, info, tokenizer folder)."""
    root = Path(path)
    hf, tensors, d = read_hf_dir(root)
    cfg = model_config_from_hf(hf, d / "config.json")
    params, info = hf_to_params(tensors, cfg, hf, d, head)
    tok, tok_dir = tokenizer_source(d)
    info.update(source=str(root.resolve()), pad_token_id=int(hf.get("pad_token_id") or 0), tokenizer=tok)
    st = sentence_transformers_info(root)
    if st:
        info["sentence_transformers"] = st
    return params, cfg, info, tok_dir


def import_hf_to_params_dir(path: str | Path, out: str | Path, head: str | None = None,
                            overwrite: bool = False) -> Path:
    params, cfg, info, tok_dir = import_hf(path, head)
    head = info.pop("head")
    return params_lib.save_params(out, params, cfg, head, info, [tok_dir / f for f in info["tokenizer"]["files"]],
                                  overwrite=overwrite)


def export_hf(src: str | Path, out_dir: str | Path, overwrite: bool = False) -> HfExport:
    """A params directory or a training run -> an HF folder (config.json, model.safetensors, tokenizer)."""
    params, cfg, info, tok_dir = params_lib.load_params(src)
    head, tok = info["head"], info.get("tokenizer") or {}
    vocab = tok_dir / tok["files"][0] if tok_dir is not None and tok.get("files") else None
    if tok.get("kind", "wordpiece") != "wordpiece" or vocab is None or not vocab.is_file():
        raise CheckpointError(f"{src}: export to Hugging Face BERT needs a WordPiece vocab.txt; found "
                              f"tokenizer {tok or 'none'} in {tok_dir}")
    tensors, left_out = params_to_hf(params, cfg, head)
    if "classifier" in params:
        info = {**info, "num_labels": int(np.shape(params["classifier"]["dense"]["kernel"])[-1])}
    tokenizer_config = {"tokenizer_class": "BertTokenizer", "do_lower_case": bool(tok.get("lower_case", True)),
                        "strip_accents": None, "tokenize_chinese_chars": True,
                        "model_max_length": cfg.max_position_embeddings, **SPECIAL_TOKENS}
    out = write_hf_dir(out_dir, tensors, hf_config(cfg, head, info), files={"vocab.txt": vocab},
                       json_files={"tokenizer_config.json": tokenizer_config,
                                   "special_tokens_map.json": SPECIAL_TOKENS}, overwrite=overwrite)
    return HfExport(out=str(out), head=head, architecture=ARCHITECTURES[head], tensors=len(tensors),
                    tokenizer=("vocab.txt",), left_out=tuple(left_out))
