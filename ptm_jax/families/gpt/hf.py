"""Hugging Face GPT-2 and GPT-1 checkpoints <-> ptm_jax GPT parameter trees (both directions, strict).

GPT-2 (pre-LN) is transformers' ``models/gpt2/modeling_gpt2.py`` (``GPT2Model``; ``GPT2LMHeadModel`` adds the
``transformer.`` prefix and a ``lm_head`` tied to ``wte``); GPT-1 (post-LN, no final LayerNorm) is
``models/openai/modeling_openai.py`` (``OpenAIGPTModel`` / ``OpenAIGPTLMHeadModel``, ``model_type`` "openai-gpt":
``tokens_embed`` and ``positions_embed``, blocks ``x = ln_1(x + attn(x)); x = ln_2(x + mlp(x))``, the FFN 4x wide,
``afn`` "gelu" being the tanh GELU). The blocks' tensors have the same names and layouts in both (``HfLayout``).
``Conv1D`` stores weights as ``[in, out]``, like Flax, so no transpose is needed; the fused ``c_attn``
``[H, 3H]`` splits into our query/key/value kernels ``[H, heads, head_dim]`` (output columns ordered q | k | v,
head-major inside each). Every conversion is a slice or a reshape, so import(export(x)) == x bit for bit. A
pre-LN model exports as GPT-2, a post-LN one as GPT-1.

Import is strict: missing, unexpected or mis-shaped tensors raise ``CheckpointError`` naming the file and
tensors. Tolerated by name, as transformers tolerates them: the causal-mask buffers ``attn.bias`` /
``attn.masked_bias`` of old checkpoints and ``lm_head.weight`` when it equals the token embedding (tied output).

Params directories are written and read by ``ptm_jax.export.params`` (head ``causal_lm``), as for BERT.
"""
from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from ptm_jax.data import tokenizer_json
from ptm_jax.families.gpt.config import GptConfig
from ptm_jax.errors import CheckpointError
from ptm_jax.export import params as params_lib
from ptm_jax.export.hf_files import ACT_FROM_HF, ACT_TO_HF, HfExport, fmt_names, read_hf_dir, write_hf_dir

log = logging.getLogger(__name__)

HEAD = "causal_lm"
IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias")  # causal-mask buffers, not parameters
TOKENIZER_FILES = ("vocab.json", "merges.txt")


# ----------------------------------------------------------------------------------------------------
# Config


INT_LIMITS = {"vocab_size": 1 << 24, "n_embd": 1 << 16, "n_layer": 1024, "n_head": 4096, "n_inner": 1 << 18,
              "n_positions": 1 << 20}
"""Largest accepted value of each size field (a corrupted config must not allocate a huge model)."""
FLOAT_RANGES = {"resid_pdrop": (0.0, 1.0, "[0, 1)"), "embd_pdrop": (0.0, 1.0, "[0, 1)"),
                "attn_pdrop": (0.0, 1.0, "[0, 1)"), "layer_norm_epsilon": (0.0, 1.0, "(0, 1]"),
                "initializer_range": (0.0, 10.0, "(0, 10]")}


def _field(hf: dict[str, Any], key: str, kind: type, where: Path, default: Any = None) -> Any:
    value = hf.get(key, default)
    if value is None:
        raise CheckpointError(f"{where}: lacks the GPT-2 config field {key!r}")
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or (kind is int and value != int(value))):
        raise CheckpointError(f"{where}: field {key!r} must be a{'n integer' if kind is int else ' finite number'}, "
                              f"got {value!r:.80}")
    value = kind(value)
    if kind is int and not 0 < value <= INT_LIMITS.get(key, 1 << 24):
        raise CheckpointError(f"{where}: field {key!r}={value} is not in [1, {INT_LIMITS.get(key, 1 << 24)}]; fix "
                              "that key of config.json or re-download the model folder")
    if key in FLOAT_RANGES:
        lo, hi, words = FLOAT_RANGES[key]
        ok = lo <= value < hi if words.startswith("[") else lo < value <= hi
        if not ok:
            raise CheckpointError(f"{where}: field {key!r}={value} is not in {words}; fix that key of config.json")
    return value


def model_config_from_hf_gpt2(hf: dict[str, Any], where: Path) -> GptConfig:
    """transformers GPT2Config dict -> GptConfig; refuses what our GPT cannot represent."""
    if not isinstance(hf, dict):
        raise CheckpointError(f"{where}: not a JSON object; expected a Hugging Face GPT-2 config.json")
    if hf.get("model_type") != "gpt2":
        raise CheckpointError(f"{where}: model_type={hf.get('model_type')!r}; only 'gpt2' checkpoints import here")
    for key, ok in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False),
                    ("add_cross_attention", False)):
        if bool(hf.get(key, ok)) != ok:
            raise CheckpointError(f"{where}: {key}={hf[key]!r} is not supported (only {ok})")
    act = hf.get("activation_function", "gelu_new")
    if not isinstance(act, str) or act not in ACT_FROM_HF:
        raise CheckpointError(f"{where}: field 'activation_function'={act!r:.80} is not supported; expected one of "
                              f"{', '.join(ACT_FROM_HF)}")
    inner = None if hf.get("n_inner") is None else _field(hf, "n_inner", int, where)
    return _config(hf, where, "pre", ACT_FROM_HF[act], inner)


def _config(hf: dict[str, Any], where: Path, layer_norm_position: str, hidden_act: str,
            intermediate_size: int | None) -> GptConfig:
    """The fields GPT-2's and OpenAI GPT's config.json share (intermediate_size None: 4 x n_embd)."""
    h = _field(hf, "n_embd", int, where)
    resid, embd = (_field(hf, k, float, where, 0.1) for k in ("resid_pdrop", "embd_pdrop"))
    if resid != embd:
        log.warning("%s: embd_pdrop=%s differs from resid_pdrop=%s; both use model.hidden_dropout=%s",
                    where, embd, resid, resid)
    cfg = GptConfig(
        family="gpt", layer_norm_position=layer_norm_position, vocab_size=_field(hf, "vocab_size", int, where),
        hidden_size=h, num_layers=_field(hf, "n_layer", int, where), num_heads=_field(hf, "n_head", int, where),
        intermediate_size=4 * h if intermediate_size is None else intermediate_size,
        max_position_embeddings=_field(hf, "n_positions", int, where),
        hidden_act=hidden_act, hidden_dropout=resid,
        attention_dropout=_field(hf, "attn_pdrop", float, where, 0.1),
        layer_norm_eps=_field(hf, "layer_norm_epsilon", float, where, 1e-5),
        initializer_range=_field(hf, "initializer_range", float, where, 0.02))
    if cfg.hidden_size % cfg.num_heads:
        raise CheckpointError(f"{where}: n_embd={cfg.hidden_size} is not divisible by n_head={cfg.num_heads}")
    return cfg


OPENAI_ACT_FROM_HF = {"gelu": "gelu_tanh", "relu": "relu"}
"""transformers' OpenAIGPT ``afn`` -> our activation: its "gelu" is ``gelu_new``, the tanh approximation."""
OPENAI_ACT_TO_HF = {v: k for k, v in OPENAI_ACT_FROM_HF.items()}


def model_config_from_hf_openai(hf: dict[str, Any], where: Path) -> GptConfig:
    """transformers OpenAIGPTConfig dict -> GptConfig (GPT-1: post-LN, no final LayerNorm, FFN 4 x n_embd)."""
    if not isinstance(hf, dict):
        raise CheckpointError(f"{where}: not a JSON object; expected a Hugging Face OpenAI GPT config.json")
    if hf.get("model_type") != "openai-gpt":
        raise CheckpointError(f"{where}: model_type={hf.get('model_type')!r}; only 'openai-gpt' checkpoints import "
                              "here")
    act = hf.get("afn", "gelu")
    if not isinstance(act, str) or act not in OPENAI_ACT_FROM_HF:
        raise CheckpointError(f"{where}: field 'afn'={act!r:.80} is not supported; expected one of "
                              f"{', '.join(OPENAI_ACT_FROM_HF)}")
    return _config(hf, where, "post", OPENAI_ACT_FROM_HF[act], None)


def hf_openai_config(cfg: GptConfig) -> dict[str, Any]:
    """A post-LN GptConfig -> a transformers OpenAIGPTConfig dict (OpenAIGPTLMHeadModel, tied output); refuses
    what OpenAIGPT cannot represent (an FFN other than 4 x hidden, an activation other than tanh GELU / ReLU)."""
    if cfg.intermediate_size != 4 * cfg.hidden_size:
        raise CheckpointError(f"export to Hugging Face OpenAI GPT needs model.intermediate_size = 4 x hidden_size "
                              f"(OpenAIGPT's MLP is 4 x n_embd); this model has {cfg.intermediate_size} for hidden "
                              f"{cfg.hidden_size}")
    if cfg.hidden_act not in OPENAI_ACT_TO_HF:
        raise CheckpointError(f"export to Hugging Face OpenAI GPT: model.hidden_act={cfg.hidden_act!r} has no afn "
                              f"there; OpenAIGPT has {', '.join(OPENAI_ACT_TO_HF)}")
    return {
        "architectures": ["OpenAIGPTLMHeadModel"], "model_type": "openai-gpt", "vocab_size": cfg.vocab_size,
        "n_positions": cfg.max_position_embeddings, "n_embd": cfg.hidden_size, "n_layer": cfg.num_layers,
        "n_head": cfg.num_heads, "afn": OPENAI_ACT_TO_HF[cfg.hidden_act], "resid_pdrop": cfg.hidden_dropout,
        "embd_pdrop": cfg.hidden_dropout, "attn_pdrop": cfg.attention_dropout,
        "layer_norm_epsilon": cfg.layer_norm_eps, "initializer_range": cfg.initializer_range,
        "tie_word_embeddings": True}


def hf_gpt2_config(cfg: GptConfig, info: dict[str, Any]) -> dict[str, Any]:
    """GptConfig -> a transformers GPT2Config dict (GPT2LMHeadModel, tied output)."""
    eos = int(info.get("eos_token_id", cfg.vocab_size - 1))
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": cfg.vocab_size,
        "n_positions": cfg.max_position_embeddings, "n_ctx": cfg.max_position_embeddings,
        "n_embd": cfg.hidden_size, "n_layer": cfg.num_layers, "n_head": cfg.num_heads,
        "n_inner": cfg.intermediate_size, "activation_function": ACT_TO_HF[cfg.hidden_act],
        "resid_pdrop": cfg.hidden_dropout, "embd_pdrop": cfg.hidden_dropout, "attn_pdrop": cfg.attention_dropout,
        "layer_norm_epsilon": cfg.layer_norm_eps, "initializer_range": cfg.initializer_range,
        "bos_token_id": int(info.get("bos_token_id", eos)), "eos_token_id": eos, "scale_attn_weights": True,
        "tie_word_embeddings": True, "use_cache": True}


# ----------------------------------------------------------------------------------------------------
# Tensors


@dataclasses.dataclass(frozen=True)
class HfLayout:
    """Where GPT-2 and GPT-1 differ in tensor names (their blocks are named alike): the token and position
    tables, the final LayerNorm (None: GPT-1 has none) and the transformers class."""

    model_type: str
    architecture: str
    tokens: str
    positions: str
    final_norm: str | None


GPT2 = HfLayout("gpt2", "GPT2LMHeadModel", "wte", "wpe", "ln_f")
OPENAI_GPT = HfLayout("openai-gpt", "OpenAIGPTLMHeadModel", "tokens_embed", "positions_embed", None)


def layout_of(cfg: GptConfig) -> HfLayout:
    """Pre-LN GPTs are GPT-2s, post-LN ones GPT-1s."""
    return GPT2 if cfg.layer_norm_position == "pre" else OPENAI_GPT


def _expected_shapes(cfg: GptConfig, prefix: str, layout: HfLayout) -> dict[str, tuple[int, ...]]:
    h, f, v, p = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.max_position_embeddings
    out = {f"{prefix}{layout.tokens}.weight": (v, h), f"{prefix}{layout.positions}.weight": (p, h)}
    if layout.final_norm:
        out.update({f"{prefix}{layout.final_norm}.weight": (h,), f"{prefix}{layout.final_norm}.bias": (h,)})
    for i in range(cfg.num_layers):
        b = f"{prefix}h.{i}."
        out.update({b + "ln_1.weight": (h,), b + "ln_1.bias": (h,), b + "ln_2.weight": (h,), b + "ln_2.bias": (h,),
                    b + "attn.c_attn.weight": (h, 3 * h), b + "attn.c_attn.bias": (3 * h,),
                    b + "attn.c_proj.weight": (h, h), b + "attn.c_proj.bias": (h,),
                    b + "mlp.c_fc.weight": (h, f), b + "mlp.c_fc.bias": (f,),
                    b + "mlp.c_proj.weight": (f, h), b + "mlp.c_proj.bias": (h,)})
    return out


def _norm(t: dict[str, np.ndarray], name: str) -> dict[str, Any]:
    return {"norm": {"scale": t[f"{name}.weight"], "bias": t[f"{name}.bias"]}}


def hf_to_params(tensors: dict[str, np.ndarray], cfg: GptConfig, where: Path, layout: HfLayout = GPT2) -> dict:
    """HF name -> tensor to our causal_lm params {'gpt': ...} (loop layout, float32)."""
    names = set(tensors)
    prefix = "transformer." if any(n.startswith("transformer.") for n in names) else ""
    expected = _expected_shapes(cfg, prefix, layout)
    ignored = {n for n in names if n.endswith(IGNORED_SUFFIXES)} | ({"lm_head.weight"} & names)
    bad = [f"{n} (checkpoint {tuple(tensors[n].shape)}, expected {s})" for n, s in expected.items()
           if n in names and tuple(tensors[n].shape) != s]
    problems = [f"{what}: {fmt_names(items)}" for what, items in (("missing tensors", set(expected) - names),
                ("unexpected tensors", names - set(expected) - ignored), ("shape mismatches", bad)) if items]
    if problems:
        raise CheckpointError(f"{where}: does not match a {layout.architecture} with the shapes of its config.json "
                              f"(n_embd {cfg.hidden_size}, n_layer {cfg.num_layers}, n_head {cfg.num_heads}, "
                              f"vocab {cfg.vocab_size}, n_positions {cfg.max_position_embeddings}): "
                              + "; ".join(problems))
    t = {n[len(prefix):]: np.asarray(tensors[n], dtype=np.float32) for n in expected}
    tokens = t[f"{layout.tokens}.weight"]
    if "lm_head.weight" in names and not np.array_equal(np.asarray(tensors["lm_head.weight"], np.float32), tokens):
        raise CheckpointError(f"{where}: lm_head.weight differs from {prefix}{layout.tokens}.weight; our GPT ties the "
                              "output layer to the token embedding, untied heads are not supported")
    h, n = cfg.hidden_size, cfg.num_heads
    d = h // n
    layers = {}
    for i in range(cfg.num_layers):
        b = f"h.{i}."
        w, bias = t[b + "attn.c_attn.weight"], t[b + "attn.c_attn.bias"]
        attn = {name: {"kernel": np.ascontiguousarray(w[:, j * h:(j + 1) * h]).reshape(h, n, d),
                       "bias": bias[j * h:(j + 1) * h].reshape(n, d)}
                for j, name in enumerate(("query", "key", "value"))}
        attn["output"] = {"kernel": t[b + "attn.c_proj.weight"].reshape(n, d, h), "bias": t[b + "attn.c_proj.bias"]}
        layers[f"layers_{i}"] = {
            "ln_1": _norm(t, b + "ln_1"), "attn": attn, "ln_2": _norm(t, b + "ln_2"),
            "mlp": {"fc": {"kernel": t[b + "mlp.c_fc.weight"], "bias": t[b + "mlp.c_fc.bias"]},
                    "proj": {"kernel": t[b + "mlp.c_proj.weight"], "bias": t[b + "mlp.c_proj.bias"]}}}
    gpt = {"wte": {"embedding": tokens}, "wpe": {"embedding": t[f"{layout.positions}.weight"]}, "decoder": layers}
    if layout.final_norm:
        gpt["ln_f"] = _norm(t, layout.final_norm)
    return {"gpt": gpt}


def params_to_hf(params: dict, cfg: GptConfig) -> dict[str, np.ndarray]:
    """Our causal_lm params (either layout) -> the state dict of GPT2LMHeadModel (pre-LN) or OpenAIGPTLMHeadModel
    (post-LN), the tied lm_head left out."""
    if cfg.family != "gpt":
        raise CheckpointError(f"export to Hugging Face GPT needs a model of family 'gpt', not {cfg.family!r}")
    layout = layout_of(cfg)
    g = params_lib.to_layout(params, False)["gpt"]
    f32 = lambda x: np.ascontiguousarray(np.asarray(x, dtype=np.float32))  # noqa: E731
    h = cfg.hidden_size
    try:
        out = {f"transformer.{layout.tokens}.weight": f32(g["wte"]["embedding"]),
               f"transformer.{layout.positions}.weight": f32(g["wpe"]["embedding"])}
        if layout.final_norm:
            out.update({f"transformer.{layout.final_norm}.weight": f32(g["ln_f"]["norm"]["scale"]),
                        f"transformer.{layout.final_norm}.bias": f32(g["ln_f"]["norm"]["bias"])})
        for i in range(cfg.num_layers):
            p, b = g["decoder"][f"layers_{i}"], f"transformer.h.{i}."
            a = p["attn"]
            out.update({
                b + "ln_1.weight": f32(p["ln_1"]["norm"]["scale"]), b + "ln_1.bias": f32(p["ln_1"]["norm"]["bias"]),
                b + "ln_2.weight": f32(p["ln_2"]["norm"]["scale"]), b + "ln_2.bias": f32(p["ln_2"]["norm"]["bias"]),
                b + "attn.c_attn.weight": f32(np.concatenate(
                    [np.asarray(a[k]["kernel"]).reshape(h, h) for k in ("query", "key", "value")], axis=1)),
                b + "attn.c_attn.bias": f32(np.concatenate(
                    [np.asarray(a[k]["bias"]).reshape(h) for k in ("query", "key", "value")])),
                b + "attn.c_proj.weight": f32(np.asarray(a["output"]["kernel"]).reshape(h, h)),
                b + "attn.c_proj.bias": f32(a["output"]["bias"]),
                b + "mlp.c_fc.weight": f32(p["mlp"]["fc"]["kernel"]), b + "mlp.c_fc.bias": f32(p["mlp"]["fc"]["bias"]),
                b + "mlp.c_proj.weight": f32(p["mlp"]["proj"]["kernel"]),
                b + "mlp.c_proj.bias": f32(p["mlp"]["proj"]["bias"])})
    except (KeyError, ValueError) as e:
        raise CheckpointError(f"the GPT parameters do not match the model config (missing or mis-shaped {e})") from None
    want = _expected_shapes(cfg, "transformer.", layout)
    bad = [f"{k} {out[k].shape} != {s}" for k, s in want.items() if out[k].shape != s]
    if bad:
        raise CheckpointError(f"the GPT parameters do not match the model config: {fmt_names(bad)}")
    return out


# ----------------------------------------------------------------------------------------------------
# Directory-level entry points


def tokenizer_source(d: Path) -> tuple[dict[str, Any], Path]:
    """The byte-level BPE of an HF folder and the folder holding its files: ``vocab.json`` + ``merges.txt`` there,
    else the ones derived from ``tokenizer.json`` (what transformers 5 writes; ``data/tokenizer_json.py``)."""
    if all((d / f).is_file() for f in TOKENIZER_FILES):
        return {"kind": "byte_bpe", "lower_case": False, "files": list(TOKENIZER_FILES)}, d
    if tokenizer_json.has_tokenizer_json(d):
        return tokenizer_json.classic_files(d, "BPE")
    log.warning("%s: no vocab.json + merges.txt (nor tokenizer.json); the imported model has no tokenizer "
                "(ids only)", d)
    return {}, d


def import_hf(path: str | Path) -> tuple[dict, GptConfig, dict[str, Any]]:
    """A local HF GPT-2 or OpenAI GPT folder -> (params {'gpt': ...}, model config, info). info: head 'causal_lm',
    source, tokenizer ({kind 'byte_bpe', files [vocab.json, merges.txt]} when present), bos/eos ids."""
    root = Path(path)
    hf, tensors, d = read_hf_dir(root)
    if not isinstance(hf, dict):
        raise CheckpointError(f"{d / 'config.json'}: not a JSON object")
    if hf.get("model_type") == OPENAI_GPT.model_type:
        cfg, layout = model_config_from_hf_openai(hf, d / "config.json"), OPENAI_GPT
    else:
        cfg, layout = model_config_from_hf_gpt2(hf, d / "config.json"), GPT2
    params = hf_to_params(tensors, cfg, d, layout)
    tok, tok_dir = tokenizer_source(d)
    info: dict[str, Any] = {"head": HEAD, "source": str(root.resolve()), "tokenizer": tok,
                            "tokenizer_dir": str(tok_dir)}
    for key in ("bos_token_id", "eos_token_id"):
        if isinstance(hf.get(key), int):
            info[key] = hf[key]
    return params, cfg, info


def import_hf_to_params_dir(path: str | Path, out: str | Path, overwrite: bool = False) -> Path:
    params, cfg, info = import_hf(path)
    d = Path(info.pop("tokenizer_dir"))
    info.pop("head")
    files = [d / f for f in info["tokenizer"].get("files", [])]
    return params_lib.save_params(out, params, cfg, HEAD, info, files, overwrite=overwrite)


def export_hf(src: str | Path, out_dir: str | Path, overwrite: bool = False) -> HfExport:
    """A GPT params directory, run or HF folder -> an HF folder (config.json, model.safetensors, and
    vocab.json/merges.txt when the model has a byte-level BPE tokenizer): GPT2LMHeadModel for a pre-LN model,
    OpenAIGPTLMHeadModel for a post-LN one."""
    params, cfg, info, tok_dir = params_lib.load_params(src)
    if "gpt" not in params:
        raise CheckpointError(f"{src}: not a GPT model (top-level keys {', '.join(sorted(params))})")
    layout = layout_of(cfg)
    config = hf_gpt2_config(cfg, info) if layout is GPT2 else hf_openai_config(cfg)
    tensors = params_to_hf(params, cfg)
    tok = info.get("tokenizer") or {}
    files = [tok_dir / f for f in tok.get("files", [])] if tok_dir is not None else []
    if tok.get("kind") != "byte_bpe" or not files or not all(f.is_file() for f in files):
        log.warning("%s: no byte-level BPE vocab.json/merges.txt; exporting the weights without a tokenizer", src)
        files = []
    if layout is GPT2 and files and not isinstance(info.get("eos_token_id"), int):  # ptm-trained: <|endoftext|>
        eos = params_lib.load_tokenizer(info, tok_dir).eos_id
        config.update(eos_token_id=eos, bos_token_id=int(info.get("bos_token_id", eos)))
    json_files = {"tokenizer_config.json": {"tokenizer_class": "GPT2Tokenizer",  # byte-level BPE for both
                                            "model_max_length": cfg.max_position_embeddings,
                                            "add_prefix_space": False}} if files else {}
    out = write_hf_dir(out_dir, tensors, config, files={f.name: f for f in files}, json_files=json_files,
                       overwrite=overwrite)
    return HfExport(out=str(out), head=HEAD, architecture=layout.architecture, tensors=len(tensors),
                    tokenizer=tuple(f.name for f in files))
