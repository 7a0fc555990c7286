"""Hugging Face Transformer-XL checkpoints <-> ptm_jax parameter trees (both directions, strict).

Names and layouts follow transformers' ``models/deprecated/transfo_xl/modeling_transfo_xl.py``
(``TransfoXLLMHeadModel``: the trunk under ``transformer.``, the adaptive softmax under ``crit.``). The fused
``qkv_net`` [3 N D, H] splits into our q/k/v kernels [H, N, D] (rows q | k | v, head-major inside each); ``r_net``
and the FFN linears are transposed, ``o_net`` reshaped; the adaptive embedding projections [H, d_i] are our
kernels' transposes; the per-cluster output biases ``crit.out_layers.i.bias`` are our one ``softmax/bias`` [V] in
id order. The output word vectors and the shared projections are tied to the embedding (``save_pretrained``
leaves them out; when present they must equal what they are tied to). The ``pos_emb.inv_freq`` buffer is not a
parameter. Every conversion is a slice, a transpose or a reshape: import(export(x)) == x bit for bit.

The tokenizer of a transformers Transformer-XL folder is a pickled ``vocab.pkl``, which is never unpickled here:
imports are ids only, and exports write the weights alone. Any mismatch is a ``CheckpointError`` naming the file
and tensor or field.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ptm_jax.errors import CheckpointError
from ptm_jax.export import params as params_lib
from ptm_jax.export.hf_files import (
    HfExport,
    Rule,
    apply_rules,
    dense_rules,
    fmt_names,
    linear_rule,
    norm_rules,
    read_hf_dir,
    rule_problems,
    rules_to_hf,
    write_hf_dir,
)
from ptm_jax.families.transfo_xl.adaptive import has_input_proj, has_own_output_proj
from ptm_jax.families.transfo_xl.config import TransfoXlConfig

HEAD = "language_model"
TRUNK = "transfo_xl"
ARCHITECTURE = "TransfoXLLMHeadModel"
BIAS = "crit.bias"  # the clusters' output biases joined (not a transformers name)
IGNORED = ("transformer.pos_emb.inv_freq",)

SIZES = {"vocab_size": 1 << 24, "d_model": 1 << 16, "d_embed": 1 << 16, "n_head": 4096, "d_head": 1 << 14,
         "d_inner": 1 << 18, "n_layer": 1024, "div_val": 64}
"""Largest accepted value of each size field (a corrupted config must not allocate a huge model)."""


def _number(hf: dict[str, Any], key: str, kind: type, where: Path, default: Any = None) -> Any:
    v = hf.get(key, default)
    if v is None:
        raise CheckpointError(f"{where}: lacks the Transformer-XL config field {key!r}")
    if kind is bool:
        if not isinstance(v, bool):
            raise CheckpointError(f"{where}: field {key!r} must be true or false, got {v!r:.80}")
        return v
    if (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
            or (kind is int and v != int(v))):
        raise CheckpointError(f"{where}: field {key!r} must be a{'n integer' if kind is int else ' finite number'}, "
                              f"got {v!r:.80}")
    v = kind(v)
    if key in SIZES and not 0 < v <= SIZES[key]:
        raise CheckpointError(f"{where}: field {key!r}={v} is not in [1, {SIZES[key]}]; fix that key of config.json "
                              "or re-download the model folder")
    return v


def model_config_from_hf(hf: Any, where: Path) -> TransfoXlConfig:
    """transformers TransfoXLConfig dict -> TransfoXlConfig; refuses what our Transformer-XL cannot run."""
    if not isinstance(hf, dict):
        raise CheckpointError(f"{where}: holds a {type(hf).__name__}, not a JSON object")
    if hf.get("model_type") != "transfo-xl":
        raise CheckpointError(f"{where}: field 'model_type' is {hf.get('model_type')!r}; only 'transfo-xl' imports "
                              "here")
    for key, want in (("attn_type", 0), ("sample_softmax", -1)):
        if hf.get(key, want) != want and not (key == "sample_softmax" and isinstance(hf[key], int) and hf[key] <= 0):
            raise CheckpointError(f"{where}: field {key!r}={hf[key]!r} is not supported (only {want})")
    if hf.get("tie_word_embeddings", True) is not True:
        raise CheckpointError(f"{where}: tie_word_embeddings=false; our adaptive softmax ties the output word "
                              "vectors to the embeddings")
    cutoffs = hf.get("cutoffs", [])
    if not isinstance(cutoffs, list) or not all(isinstance(c, int) and not isinstance(c, bool) for c in cutoffs):
        raise CheckpointError(f"{where}: field 'cutoffs' must be a list of integers, got {cutoffs!r:.80}")
    ties = hf.get("tie_projs", [False] + [True] * len(cutoffs))
    if ties not in ([False] + [True] * len(cutoffs), [False] * (len(cutoffs) + 1)):
        raise CheckpointError(f"{where}: field 'tie_projs'={ties!r:.80} is not one of transformers' two patterns "
                              "(proj_share_all_but_first true or false)")
    dropout = _number(hf, "dropout", float, where, 0.1)
    dropatt = _number(hf, "dropatt", float, where, 0.0)
    eps = _number(hf, "layer_norm_epsilon", float, where, 1e-5)
    if not (0.0 <= dropout < 1.0 and 0.0 <= dropatt < 1.0 and 0.0 < eps < 1.0):
        raise CheckpointError(f"{where}: dropout={dropout}, dropatt={dropatt} must be in [0, 1) and "
                              f"layer_norm_epsilon={eps} in (0, 1)")
    cfg = TransfoXlConfig(
        vocab_size=_number(hf, "vocab_size", int, where), hidden_size=_number(hf, "d_model", int, where),
        embed_dim=_number(hf, "d_embed", int, where), num_heads=_number(hf, "n_head", int, where),
        head_dim=_number(hf, "d_head", int, where), intermediate_size=_number(hf, "d_inner", int, where),
        num_layers=_number(hf, "n_layer", int, where), div_val=_number(hf, "div_val", int, where, 1),
        cutoffs=list(cutoffs), share_projections=bool(len(ties) == 1 or ties[1]),
        mem_len=max(0, _number(hf, "mem_len", int, where, 0)), clamp_len=_number(hf, "clamp_len", int, where, -1),
        same_length=_number(hf, "same_length", bool, where, False), untie_r=_number(hf, "untie_r", bool, where, True),
        pre_lnorm=_number(hf, "pre_lnorm", bool, where, False), hidden_act="relu", hidden_dropout=dropout,
        attention_dropout=dropatt, layer_norm_eps=eps, initializer_range=_number(hf, "init_std", float, where, 0.02),
        proj_init_std=_number(hf, "proj_init_std", float, where, 0.01))
    try:
        cfg.validate("config.json")
    except Exception as e:  # noqa: BLE001  (a ConfigError about the folder's config.json)
        raise CheckpointError(f"{where}: {e}") from None
    return cfg


def hf_config(cfg: TransfoXlConfig, info: dict[str, Any]) -> dict[str, Any]:
    """TransfoXlConfig -> a transformers TransfoXLConfig dict (TransfoXLLMHeadModel)."""
    if cfg.hidden_act != "relu":
        raise CheckpointError(f"model.hidden_act={cfg.hidden_act!r}: transformers' Transformer-XL has a relu FFN only")
    n_cut = len(cfg.cutoffs)
    return {
        "architectures": [ARCHITECTURE], "model_type": "transfo-xl", "vocab_size": cfg.vocab_size,
        "cutoffs": list(cfg.cutoffs), "d_model": cfg.hidden_size, "d_embed": cfg.d_embed, "n_head": cfg.num_heads,
        "d_head": cfg.d_head, "d_inner": cfg.intermediate_size, "div_val": cfg.div_val, "pre_lnorm": cfg.pre_lnorm,
        "n_layer": cfg.num_layers, "mem_len": cfg.mem_len, "clamp_len": cfg.clamp_len,
        "same_length": cfg.same_length, "tie_projs": [False] + [cfg.share_projections] * n_cut, "attn_type": 0,
        "sample_softmax": -1, "adaptive": True, "dropout": cfg.hidden_dropout, "dropatt": cfg.attention_dropout,
        "untie_r": cfg.untie_r, "init": "normal", "init_range": 0.01, "proj_init_std": cfg.proj_init_std,
        "init_std": cfg.initializer_range, "layer_norm_epsilon": cfg.layer_norm_eps,
        "eos_token_id": int(info.get("eos_token_id", 0)), "tie_word_embeddings": True}


# ----------------------------------------------------------------------------------------------------
# Rules (our paths are the loop layout: transfo_xl/decoder/layers_i)


def _embedding_clusters(cfg: TransfoXlConfig) -> list[tuple[int, int, int]]:
    return cfg.clusters() if cfg.div_val > 1 else [(0, cfg.vocab_size, cfg.d_embed)]


def all_rules(cfg: TransfoXlConfig) -> list[Rule]:
    h, n, d, f = cfg.hidden_size, cfg.num_heads, cfg.d_head, cfg.intermediate_size
    e = (TRUNK, "word_emb")
    rules = []
    for i, (lo, hi, di) in enumerate(_embedding_clusters(cfg)):
        rules.append(Rule(f"transformer.word_emb.emb_layers.{i}.weight", e + (f"emb_layers_{i}", "embedding"),
                          (hi - lo, di), (hi - lo, di)))
        if has_input_proj(cfg, i):
            rules.append(linear_rule(f"transformer.word_emb.emb_projs.{i}", e + (f"emb_projs_{i}", "kernel"),
                                     (di, h), 1))
    for i in range(cfg.num_layers):
        hf, p = f"transformer.layers.{i}", (TRUNK, "decoder", f"layers_{i}")
        a = p + ("attn",)
        rules += [linear_rule(f"{hf}.dec_attn.qkv_net.weight#{x}", a + (x, "kernel"), (h, n, d), 1) for x in "qkv"]
        rules.append(linear_rule(f"{hf}.dec_attn.r_net.weight", a + ("r", "kernel"), (h, n, d), 1))
        rules.append(Rule(f"{hf}.dec_attn.o_net.weight", a + ("o", "kernel"), (h, n, d), (h, n * d)))
        if cfg.untie_r:
            rules += [Rule(f"{hf}.dec_attn.{x}", a + (x,), (n, d), (n, d)) for x in ("r_w_bias", "r_r_bias")]
        rules += norm_rules(f"{hf}.dec_attn.layer_norm", a + ("layer_norm",), h)
        rules += dense_rules(f"{hf}.pos_ff.CoreNet.0", p + ("ff", "layer_1"), h, f)
        rules += dense_rules(f"{hf}.pos_ff.CoreNet.3", p + ("ff", "layer_2"), f, h)
        rules += norm_rules(f"{hf}.pos_ff.layer_norm", p + ("ff", "layer_norm"), h)
    if not cfg.untie_r:
        rules += [Rule(f"transformer.{x}", (TRUNK, x), (n, d), (n, d)) for x in ("r_w_bias", "r_r_bias")]
    clusters = cfg.clusters()
    rules.append(Rule(BIAS, ("softmax", "bias"), (cfg.vocab_size,), (cfg.vocab_size,)))
    if len(clusters) > 1:
        c, d0 = len(clusters) - 1, clusters[0][2]
        rules += [Rule("crit.cluster_weight", ("softmax", "cluster_weight"), (c, d0), (c, d0)),
                  Rule("crit.cluster_bias", ("softmax", "cluster_bias"), (c,), (c,))]
    for i, (_, _, di) in enumerate(clusters):
        if has_own_output_proj(cfg, i):
            rules.append(linear_rule(f"crit.out_projs.{i}", ("softmax", f"out_projs_{i}", "kernel"), (di, h), 1))
    return rules


def _bias_names(cfg: TransfoXlConfig) -> list[str]:
    return [f"crit.out_layers.{i}.bias" for i in range(len(_embedding_clusters(cfg)))]


def _tied(cfg: TransfoXlConfig) -> dict[str, str]:
    """transformers names that are copies of another tensor (tied) -> the tensor they are tied to."""
    out = {f"crit.out_layers.{i}.weight": f"transformer.word_emb.emb_layers.{i}.weight"
           for i in range(len(_embedding_clusters(cfg)))}
    for i in range(len(cfg.clusters())):
        if not has_own_output_proj(cfg, i) and has_input_proj(cfg, 0):
            out[f"crit.out_projs.{i}"] = f"transformer.word_emb.emb_projs.{i if cfg.div_val > 1 else 0}"
    if not cfg.untie_r:  # the layers hold the model's shared biases (state_dict lists them under each layer too)
        out.update({f"transformer.layers.{i}.dec_attn.{x}": f"transformer.{x}"
                    for i in range(cfg.num_layers) for x in ("r_w_bias", "r_r_bias")})
    return out


def _joined(tensors: dict[str, np.ndarray], cfg: TransfoXlConfig) -> dict[str, np.ndarray]:
    """The checkpoint's tensors with ``qkv_net`` split (name#q/#k/#v) and the output biases joined (``BIAS``)."""
    out = dict(tensors)
    n, d = cfg.num_heads, cfg.d_head
    for i in range(cfg.num_layers):
        name = f"transformer.layers.{i}.dec_attn.qkv_net.weight"
        if name in out and out[name].shape == (3 * n * d, cfg.hidden_size):
            w = out.pop(name)
            out.update({f"{name}#{x}": w[j * n * d:(j + 1) * n * d] for j, x in enumerate("qkv")})
    names = _bias_names(cfg)
    if all(b in out for b in names):
        out[BIAS] = np.concatenate([np.asarray(out.pop(b)).reshape(-1) for b in names])
    return out


def hf_to_params(tensors: dict[str, np.ndarray], cfg: TransfoXlConfig, where: Path) -> dict:
    """HF name -> tensor to our params {'transfo_xl': ..., 'softmax': ...} (loop layout, float32)."""
    if not any(n.startswith("crit.") for n in tensors):
        raise CheckpointError(f"{where}: a TransfoXLModel without its adaptive softmax ('crit.'); import a "
                              f"{ARCHITECTURE} checkpoint")
    joined = _joined(tensors, cfg)
    rules, tied = all_rules(cfg), _tied(cfg)
    expected = {r.hf for r in rules}
    unexpected = set(joined) - expected - set(tied) - set(IGNORED)
    problems = rule_problems(rules, joined, expected, unexpected)
    if problems:
        raise CheckpointError(f"{where}: does not match a {ARCHITECTURE} with the shapes of its config.json "
                              f"(d_model {cfg.hidden_size}, d_embed {cfg.d_embed}, n_layer {cfg.num_layers}, n_head "
                              f"{cfg.num_heads}, d_head {cfg.d_head}, vocab {cfg.vocab_size}, cutoffs {cfg.cutoffs}, "
                              f"div_val {cfg.div_val}): " + "; ".join(problems))
    for name, home in tied.items():
        if name in joined and (home not in joined or not np.array_equal(np.asarray(joined[name], np.float32),
                                                                        np.asarray(joined[home], np.float32))):
            raise CheckpointError(f"{where}: {name} differs from {home}; our adaptive softmax ties it, untied "
                                  "outputs are not supported")
    return apply_rules(rules, joined)


def params_to_hf(params: dict, cfg: TransfoXlConfig) -> dict[str, np.ndarray]:
    """Our params -> HF name -> contiguous float32 array (tied tensors left out, as ``save_pretrained`` does)."""
    out = rules_to_hf(params, all_rules(cfg), HEAD)  # always the loop layout (model.scan_layers is refused)
    for i in range(cfg.num_layers):
        name = f"transformer.layers.{i}.dec_attn.qkv_net.weight"
        out[name] = np.ascontiguousarray(np.concatenate([out.pop(f"{name}#{x}") for x in "qkv"]))
    bias = out.pop(BIAS)
    for b, (lo, hi, _) in zip(_bias_names(cfg), _embedding_clusters(cfg)):
        out[b] = np.ascontiguousarray(bias[lo:hi])
    return out


# ----------------------------------------------------------------------------------------------------
# Directory-level entry points


def import_hf(path: str | Path) -> tuple[dict, TransfoXlConfig, dict[str, Any], Path]:
    """A local HF Transformer-XL folder -> (params, model config, info with head 'language_model', folder)."""
    root = Path(path)
    hf, tensors, d = read_hf_dir(root)
    cfg = model_config_from_hf(hf, d / "config.json")
    params = hf_to_params(tensors, cfg, d)
    if (d / "vocab.pkl").is_file() or (d / "vocab.bin").is_file():
        import logging

        logging.getLogger(__name__).warning("%s: the tokenizer is a pickled vocab.pkl/vocab.bin, which is not read "
                                            "(never unpickled); the imported model has no tokenizer (ids only)", d)
    info = {"head": HEAD, "source": str(root.resolve()), "tokenizer": {}, "eos_token_id": hf.get("eos_token_id", 0)}
    return params, cfg, info, d


def import_hf_to_params_dir(path: str | Path, out: str | Path, head: str | None = None,
                            overwrite: bool = False) -> Path:
    if head not in (None, HEAD):
        raise CheckpointError(f"--head {head}: a Transformer-XL folder imports as head {HEAD} ({ARCHITECTURE})")
    params, cfg, info, _ = import_hf(path)
    info.pop("head")
    return params_lib.save_params(out, params, cfg, HEAD, info, overwrite=overwrite)


def export_hf(src: str | Path, out_dir: str | Path, overwrite: bool = False) -> HfExport:
    """A Transformer-XL params directory or run -> an HF ``TransfoXLLMHeadModel`` folder (weights only)."""
    params, cfg, info, _ = params_lib.load_params(src)
    if TRUNK not in params or "softmax" not in params:
        raise CheckpointError(f"{src}: not a Transformer-XL language model (top-level keys "
                              f"{fmt_names(sorted(params))})")
    tensors = params_to_hf(params, cfg)
    out = write_hf_dir(out_dir, tensors, hf_config(cfg, info), overwrite=overwrite)
    return HfExport(out=str(out), head=HEAD, architecture=ARCHITECTURE, tensors=len(tensors),
                    note="transformers' Transformer-XL tokenizer is a pickled vocabulary; the folder holds the "
                         "weights only")

