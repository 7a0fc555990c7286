"""Hugging Face XLNet checkpoints <-> ptm_jax parameter trees (both directions, strict).

Tensor names and layouts follow transformers' ``models/xlnet/modeling_xlnet.py``: ``XLNetModel`` (no
prefix) and the head models with the trunk under ``transformer.`` (``XLNetLMHeadModel``,
``XLNetForSequenceClassification``, ``XLNetForQuestionAnsweringSimple``). The attention projections are
stored [d_model, n_head, d_head] on both sides, so only the FFN / head linears (torch [out, in]) are
transposed and ``mask_emb`` reshaped; import(export(x)) == x bit for bit.

transformers keeps r_w/r_r/r_s biases in every layer even when ``untie_r`` is false (the original TF
checkpoint had one shared set). A checkpoint with ``untie_r: false`` whose biases agree across layers
imports into our shared biases; if they differ (a model trained in transformers) it imports untied, as that
is what the checkpoint computes. Export writes the shared set into every layer.

The tied output matrix ``lm_loss.weight`` is optional (``save_pretrained`` omits it) and, when present, must
equal the word embeddings. Weights are read by ``hf_bert``'s readers (safetensors, or ``pytorch_model.bin``
with ``torch.load(weights_only=True)`` only). Any mismatch is a ``CheckpointError`` naming the file and key.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from ptm_jax.data import tokenizer_json
from ptm_jax.families.xlnet.config import XlnetConfig
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
    norm_rules,
    read_hf_dir,
    rule_problems,
    rules_to_hf,
    write_hf_dir,
)

log = logging.getLogger(__name__)

ARCHITECTURES = {"plm": "XLNetLMHeadModel", "encoder": "XLNetModel",
                 "sequence_classification": "XLNetForSequenceClassification",
                 "question_answering": "XLNetForQuestionAnsweringSimple"}
TRUNK = "xlnet"
TIED = "lm_loss.weight"
BIASES = ("r_w_bias", "r_r_bias", "r_s_bias")
PROJECTIONS = ("q", "k", "v", "o", "r")
SPECIAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "sep_token": "<sep>",
                  "pad_token": "<pad>", "cls_token": "<cls>", "mask_token": "<mask>",
                  "additional_special_tokens": ["<eop>", "<eod>"]}
SPM_NAME = "spiece.model"


# ----------------------------------------------------------------------------------------------------
# Config


_REQUIRED = object()


def _field(hf: dict[str, Any], key: str, kind: type, where: Path, default: Any = _REQUIRED) -> Any:
    """hf[key] checked against ``kind`` (int, float, bool or str; ints are accepted for floats and integral
    floats for ints); a missing or null key takes ``default``, or is an error when there is none."""
    v = hf.get(key)
    if v is None:
        if default is _REQUIRED:
            raise CheckpointError(f"{where}: lacks the XLNet config field '{key}'")
        return default
    number = isinstance(v, (int, float)) and not isinstance(v, bool)
    ok = {bool: isinstance(v, bool), str: isinstance(v, str), float: number,
          int: number and float(v).is_integer()}[kind]
    if not ok:
        raise CheckpointError(f"{where}: field '{key}' must be {kind.__name__}, got {v!r:.80}")
    if kind is float and not math.isfinite(v):
        raise CheckpointError(f"{where}: field '{key}' must be a finite number, got {v!r}")
    return kind(v)


def model_config_from_hf(hf: Any, where: Path) -> XlnetConfig:
    """transformers XLNetConfig dict -> XlnetConfig (family 'xlnet'); refuses what our XLNet cannot run."""
    if not isinstance(hf, dict):
        raise CheckpointError(f"{where}: holds a {type(hf).__name__}, not a JSON object")
    if hf.get("model_type") != "xlnet":
        raise CheckpointError(f"{where}: field 'model_type' is {hf.get('model_type')!r}; only 'xlnet' imports here")
    if _field(hf, "attn_type", str, where, "bi") != "bi":
        raise CheckpointError(f"{where}: field 'attn_type' is {hf['attn_type']!r}; only bidirectional 'bi' "
                              "attention is supported")
    act = _field(hf, "ff_activation", str, where, "gelu")
    if act not in ACT_FROM_HF:
        raise CheckpointError(f"{where}: field 'ff_activation' is {act!r}; expected one of {', '.join(ACT_FROM_HF)}")
    d_model, n_head = _field(hf, "d_model", int, where), _field(hf, "n_head", int, where)
    sizes = {"vocab_size": _field(hf, "vocab_size", int, where), "d_model": d_model, "n_head": n_head,
             "n_layer": _field(hf, "n_layer", int, where), "d_inner": _field(hf, "d_inner", int, where)}
    limits = {"vocab_size": 1 << 24, "d_model": 1 << 16, "n_head": 4096, "n_layer": 1024, "d_inner": 1 << 18}
    for key, v in sizes.items():  # a corrupted config must not allocate a huge model
        if not 0 < v <= limits[key]:
            raise CheckpointError(f"{where}: field '{key}'={v} is not in [1, {limits[key]}]; fix that key of "
                                  "config.json or re-download the model folder")
    if d_model % n_head or _field(hf, "d_head", int, where, d_model // n_head) != d_model // n_head:
        raise CheckpointError(f"{where}: field 'd_head' must equal d_model / n_head ({d_model} / {n_head})")
    dropout = _field(hf, "dropout", float, where, 0.1)
    if not 0.0 <= dropout < 1.0:
        raise CheckpointError(f"{where}: field 'dropout' must be in [0, 1), got {dropout}")
    eps = _field(hf, "layer_norm_eps", float, where, 1e-12)
    if not 0.0 < eps < 1.0:
        raise CheckpointError(f"{where}: field 'layer_norm_eps' must be in (0, 1), got {eps}")
    return XlnetConfig(
        family="xlnet", vocab_size=sizes["vocab_size"], hidden_size=d_model, num_layers=sizes["n_layer"],
        num_heads=n_head, intermediate_size=sizes["d_inner"], hidden_act=ACT_FROM_HF[act],
        hidden_dropout=dropout, attention_dropout=dropout,
        layer_norm_eps=eps,
        initializer_range=_field(hf, "initializer_range", float, where, 0.02),
        mem_len=max(0, _field(hf, "mem_len", int, where, 0)), clamp_len=_field(hf, "clamp_len", int, where, -1),
        untie_r=_field(hf, "untie_r", bool, where, True))


def hf_config(cfg: XlnetConfig, head: str, info: dict[str, Any]) -> dict[str, Any]:
    """XlnetConfig (+ head, labels) -> a transformers XLNetConfig dict."""
    if cfg.attention_dropout != cfg.hidden_dropout:
        log.warning("transformers' XLNet has one dropout rate; exporting hidden_dropout=%s (attention_dropout=%s "
                    "is not representable)", cfg.hidden_dropout, cfg.attention_dropout)
    out: dict[str, Any] = {
        "architectures": [ARCHITECTURES[head]], "model_type": "xlnet", "vocab_size": cfg.vocab_size,
        "d_model": cfg.hidden_size, "n_layer": cfg.num_layers, "n_head": cfg.num_heads,
        "d_head": cfg.hidden_size // cfg.num_heads, "d_inner": cfg.intermediate_size,
        "ff_activation": ACT_TO_HF[cfg.hidden_act], "untie_r": cfg.untie_r, "attn_type": "bi",
        "initializer_range": cfg.initializer_range, "layer_norm_eps": cfg.layer_norm_eps,
        "dropout": cfg.hidden_dropout, "mem_len": cfg.mem_len or None, "reuse_len": None, "bi_data": False,
        "clamp_len": cfg.clamp_len, "same_length": False, "summary_type": "last", "summary_use_proj": True,
        "summary_activation": "tanh", "summary_last_dropout": float(info.get("classifier_dropout", 0.1)),
        "start_n_top": 5, "end_n_top": 5, "pad_token_id": int(info.get("pad_token_id", 5)),
        "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": True}
    if head == "sequence_classification":
        n = int(info["num_labels"])
        names = info.get("label_names") or [f"LABEL_{i}" for i in range(n)]
        out["id2label"] = {str(i): str(x) for i, x in enumerate(names)}
        out["label2id"] = {str(x): i for i, x in enumerate(names)}
        if n == 1:
            out["problem_type"] = "regression"
    return out


# ----------------------------------------------------------------------------------------------------
# Name/layout rules (our paths are the loop layout: xlnet/encoder/layers_i)


def trunk_rules(cfg: XlnetConfig, prefix: str) -> list[Rule]:
    """Rules of XLNetModel; ``prefix`` is '' (a bare XLNetModel checkpoint) or 'transformer.'."""
    h, n, f = cfg.hidden_size, cfg.num_heads, cfg.intermediate_size
    d = h // n
    e = (TRUNK, "embeddings")
    rules = [Rule(f"{prefix}word_embedding.weight", e + ("word_embedding", "embedding"), (cfg.vocab_size, h),
                  (cfg.vocab_size, h)),
             Rule(f"{prefix}mask_emb", e + ("mask_emb",), (h,), (1, 1, h))]
    for i in range(cfg.num_layers):
        hf, p = f"{prefix}layer.{i}", (TRUNK, "encoder", f"layers_{i}")
        a = p + ("attention",)
        rules += [Rule(f"{hf}.rel_attn.{x}", a + (x, "kernel"), (h, n, d), (h, n, d)) for x in PROJECTIONS]
        bias_home = a if cfg.untie_r else (TRUNK,)
        rules += [Rule(f"{hf}.rel_attn.{x}", bias_home + (x,), (n, d), (n, d)) for x in BIASES]
        rules.append(Rule(f"{hf}.rel_attn.seg_embed", a + ("seg_embed",), (2, n, d), (2, n, d)))
        rules += norm_rules(f"{hf}.rel_attn.layer_norm", a + ("layer_norm",), h)
        rules += dense_rules(f"{hf}.ff.layer_1", p + ("ff", "layer_1"), h, f)
        rules += dense_rules(f"{hf}.ff.layer_2", p + ("ff", "layer_2"), f, h)
        rules += norm_rules(f"{hf}.ff.layer_norm", p + ("ff", "layer_norm"), h)
    return rules


def head_rules(cfg: XlnetConfig, head: str, num_labels: int) -> list[Rule]:
    h = cfg.hidden_size
    if head == "plm":
        return [Rule("lm_loss.bias", ("lm_bias",), (cfg.vocab_size,), (cfg.vocab_size,))]
    if head == "sequence_classification":
        return (dense_rules("sequence_summary.summary", ("sequence_summary",), h, h)
                + dense_rules("logits_proj", ("classifier",), h, num_labels))
    if head == "question_answering":
        return dense_rules("qa_outputs", ("qa_outputs",), h, 2)
    return []


def all_rules(cfg: XlnetConfig, head: str, num_labels: int = 2, prefix: str | None = None) -> list[Rule]:
    if prefix is None:
        prefix = "" if head == "encoder" else "transformer."
    return trunk_rules(cfg, prefix) + head_rules(cfg, head, num_labels)


# ----------------------------------------------------------------------------------------------------
# Conversion


def detect_head(names: set[str], where: Path) -> str:
    if any(n.startswith(("start_logits.", "end_logits.", "answer_class.")) for n in names):
        raise CheckpointError(f"{where}: an XLNetForQuestionAnswering (beam-search span head) checkpoint; only "
                              "XLNetForQuestionAnsweringSimple ('qa_outputs') imports")
    if "lm_loss.bias" in names:
        return "plm"
    if any(n.startswith(("sequence_summary.", "logits_proj.")) for n in names):
        return "sequence_classification"
    if any(n.startswith("qa_outputs.") for n in names):
        return "question_answering"
    return "encoder"


def _shared_biases_agree(tensors: dict[str, np.ndarray], prefix: str, num_layers: int) -> bool:
    for x in BIASES:
        first = tensors.get(f"{prefix}layer.0.rel_attn.{x}")
        for i in range(1, num_layers):
            other = tensors.get(f"{prefix}layer.{i}.rel_attn.{x}")
            if first is None or other is None or not np.array_equal(first, other):
                return False
    return True


def hf_to_params(tensors: dict[str, np.ndarray], cfg: XlnetConfig, where: Path, head: str | None = None
                 ) -> tuple[dict, XlnetConfig, dict[str, Any]]:
    """HF name -> tensor to (our params in loop layout, float32; the config, untie_r as imported; info).
    An explicit ``head`` (e.g. 'encoder' for an LM checkpoint) drops the other heads' tensors, by name."""
    names = set(tensors)
    detected = detect_head(names, where)
    head = head or detected
    if head not in ARCHITECTURES:
        raise CheckpointError(f"head {head!r} is not an XLNet head; expected one of {', '.join(ARCHITECTURES)}")
    prefix = "transformer." if any(n.startswith("transformer.") for n in names) else ""
    if not cfg.untie_r and not _shared_biases_agree(tensors, prefix, cfg.num_layers):
        log.warning("%s: untie_r is false but the r_w/r_r/r_s biases differ across layers; importing them "
                    "untied (per layer), as the checkpoint computes", where)
        cfg = dataclasses.replace(cfg, untie_r=True)
    clf = tensors.get("logits_proj.weight")
    num_labels = int(clf.shape[0]) if clf is not None and clf.ndim == 2 else 2
    rules = all_rules(cfg, head, num_labels, prefix)
    expected = {r.hf for r in rules}
    dropped = sorted(n for n in names if head == "encoder" != detected and not n.startswith(prefix))
    unexpected = names - expected - set(dropped) - ({TIED} if head == "plm" else set())
    problems = rule_problems(rules, tensors, expected, unexpected)
    if problems:
        raise CheckpointError(f"{where}: does not match an {ARCHITECTURES[head]} with the shapes of its config.json "
                              f"(d_model {cfg.hidden_size}, n_layer {cfg.num_layers}, n_head {cfg.num_heads}, "
                              f"d_inner {cfg.intermediate_size}, vocab {cfg.vocab_size}): " + "; ".join(problems))
    params = apply_rules(rules, tensors)
    if head == "plm" and TIED in names:
        table = get_path(params, (TRUNK, "embeddings", "word_embedding", "embedding"))
        if tuple(tensors[TIED].shape) != table.shape or not np.array_equal(np.asarray(tensors[TIED], np.float32),
                                                                          table):
            raise CheckpointError(f"{where}: {TIED} differs from {prefix}word_embedding.weight; our LM head ties "
                                  "the output matrix to the word embeddings, untied outputs are not supported")
    if dropped:
        log.warning("%s: not imported (no place in an %s): %s", where, ARCHITECTURES[head], fmt_names(dropped))
    info: dict[str, Any] = {"head": head, "dropped": dropped}
    if head == "sequence_classification":
        info["num_labels"] = num_labels
    return params, cfg, info


def params_to_hf(params: dict, cfg: XlnetConfig, head: str) -> dict[str, np.ndarray]:
    """Our params (either layout) -> HF name -> contiguous float32 array."""
    params = params_lib.unstack_layers(params)
    num_labels = int(np.shape(params["classifier"]["dense"]["kernel"])[-1]) if "classifier" in params else 2
    return rules_to_hf(params, all_rules(cfg, head, num_labels), head)


# ----------------------------------------------------------------------------------------------------
# Directory-level entry points


def tokenizer_source(d: Path) -> tuple[dict[str, Any], Path]:
    """The SentencePiece tokenizer of an HF folder and the folder holding it: ``spiece.model`` there, else one
    built from ``tokenizer.json`` (what transformers 5 writes; ``data/tokenizer_json.py``)."""
    if not (d / SPM_NAME).is_file() and tokenizer_json.has_tokenizer_json(d):
        return tokenizer_json.classic_files(d, "Unigram")
    return tokenizer_settings(d), d


def tokenizer_settings(d: Path) -> dict[str, Any]:
    """spiece.model of an HF XLNet folder (XLNet's SentencePiece unigram; cased unless do_lower_case)."""
    tc_file, tc = d / "tokenizer_config.json", {}
    if tc_file.is_file():
        try:
            tc = json.loads(tc_file.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise CheckpointError(f"{tc_file}: not valid JSON ({e}); fix or remove the file") from None
    lower = isinstance(tc, dict) and tc.get("do_lower_case") is True
    if not (d / SPM_NAME).is_file():
        log.warning("%s: no %s (nor tokenizer.json); the imported model has no tokenizer", d, SPM_NAME)
    return {"kind": "sentencepiece", "lower_case": lower, "files": [SPM_NAME] if (d / SPM_NAME).is_file() else []}


def import_hf_xlnet(path: str | Path, head: str | None = None) -> tuple[dict, XlnetConfig, dict[str, Any], Path]:
    """A local HF XLNet folder -> (params, model config, info with 'head', tokenizer folder)."""
    root = Path(path)
    hf, tensors, d = read_hf_dir(root)
    cfg = model_config_from_hf(hf, d / "config.json")
    params, cfg, info = hf_to_params(tensors, cfg, d, head)
    if info["head"] == "sequence_classification":
        labels = label_names(hf, info["num_labels"])
        if labels:
            info["label_names"] = labels
    tok, tok_dir = tokenizer_source(d)
    info.update(source=str(root.resolve()), pad_token_id=_field(hf, "pad_token_id", int, d / "config.json", 5),
                tokenizer=tok)
    return params, cfg, info, tok_dir


def import_hf_xlnet_to_params_dir(path: str | Path, out: str | Path, head: str | None = None,
                                  overwrite: bool = False) -> Path:
    params, cfg, info, tok_dir = import_hf_xlnet(path, head)
    head = info.pop("head")
    files = [tok_dir / f for f in info["tokenizer"]["files"]]
    return params_lib.save_params(out, params, cfg, head, info, files, overwrite=overwrite)


def write_hf_xlnet(params: dict, cfg: XlnetConfig, head: str, out_dir: str | Path, *,
                   info: dict[str, Any] | None = None, spm_model: str | Path | None = None,
                   overwrite: bool = False) -> HfExport:
    """Our params -> an HF folder (config.json, model.safetensors, and spiece.model + tokenizer config when
    ``spm_model`` is given), written atomically."""
    if head not in ARCHITECTURES:
        raise CheckpointError(f"head {head!r} has no transformers XLNet class; exportable: {', '.join(ARCHITECTURES)}")
    info = dict(info or {})
    if "classifier" in params:
        info["num_labels"] = int(np.shape(params["classifier"]["dense"]["kernel"])[-1])
    tensors = params_to_hf(params, cfg, head)
    files, json_files = {}, {}
    if spm_model is not None:
        files[SPM_NAME] = Path(spm_model)
        lower = bool((info.get("tokenizer") or {}).get("lower_case", False))
        json_files = {"tokenizer_config.json": {"tokenizer_class": "XLNetTokenizer", "do_lower_case": lower,
                                                "remove_space": True, "keep_accents": False,
                                                "padding_side": "left", **SPECIAL_TOKENS},
                      "special_tokens_map.json": SPECIAL_TOKENS}
    out = write_hf_dir(out_dir, tensors, hf_config(cfg, head, info), files=files, json_files=json_files,
                       overwrite=overwrite)
    return HfExport(out=str(out), head=head, architecture=ARCHITECTURES[head], tensors=len(tensors),
                    tokenizer=tuple(files))


def export_hf_xlnet(src: str | Path, out_dir: str | Path, overwrite: bool = False) -> HfExport:
    """A params directory or a training run of an XLNet -> an HF folder transformers loads."""
    params, cfg, info, tok_dir = params_lib.load_params(src)
    if cfg.family != "xlnet":
        raise CheckpointError(f"{src}: holds a model.family={cfg.family!r} model, not an XLNet")
    tok = info.get("tokenizer") or {}
    spm = tok_dir / tok["files"][0] if tok_dir is not None and tok.get("files") else None
    if spm is None or spm.suffix != ".model" or not spm.is_file():
        log.warning("%s: no SentencePiece model among the tokenizer files (%s); exporting weights only", src, tok)
        spm = None
    return write_hf_xlnet(params, cfg, info["head"], out_dir, info=info, spm_model=spm, overwrite=overwrite)
