"""Import of fastai ``AWD_LSTM`` weights (``fastai/text/models/awdlstm.py``; the language model of
``get_language_model(AWD_LSTM, ...)`` is ``SequentialRNN(AWD_LSTM, LinearDecoder)``).

A state dict (a ``.pth`` read with ``torch.load(weights_only=True)``, or a dict of arrays) with keys, optionally
prefixed ``0.`` (the encoder inside the LM) and with the decoder under ``1.``::

    encoder.weight                        [V, E]      -> ulmfit/embedding
    rnns.{i}.weight_hh_l0_raw             [4H, H]     -> ulmfit/layers_i/recurrent_kernel (transposed; the raw
                                                         weight that WeightDropout drops from)
    rnns.{i}.module.weight_ih_l0          [4H, D]     -> ulmfit/layers_i/kernel (transposed)
    rnns.{i}.module.bias_ih_l0            [4H]        -> ulmfit/layers_i/bias
    rnns.{i}.module.bias_hh_l0            [4H]        -> ulmfit/layers_i/recurrent_bias
    1.decoder.bias                        [V]         -> lm_head/bias (zeros when absent: a bare encoder)
    1.decoder.weight                      [V, E]      -> lm_head/kernel (transposed) when the weights are untied

A classifier of ``get_text_classifier(AWD_LSTM, ...)`` (``SequentialRNN(SentenceEncoder(AWD_LSTM),
PoolingLinearClassifier)``) has its encoder under ``0.module.`` and its head's ``LinBnDrop`` blocks under
``1.layers.{b}.``: in each block the ``BatchNorm1d`` (``weight``, ``bias``, ``running_mean``, ``running_var``) and
the bias-free ``Linear`` (``weight`` [out, in]) go to ``classifier/bn_{b}`` (scale, bias, running statistics) and
``classifier/hidden`` (block 0) / ``classifier/output`` (block 1), kernels transposed.

Gates are in PyTorch's order (i, f, g, o), the layout of ``models/lstm.py``. The sizes come from the shapes;
a missing tensor or a shape that does not fit is a CheckpointError naming the key.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ptm_jax.errors import CheckpointError
from ptm_jax.families.ulmfit.config import UlmfitConfig


def read_state_dict(path: str | Path) -> dict[str, np.ndarray]:
    """A fastai/PyTorch ``.pth`` (``torch.load(weights_only=True)``: never unpickles code) or ``.safetensors``
    file -> float32 arrays. fastai's ``Learner.save`` wraps the weights as ``{'model': ..., 'opt': ...}``."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such fastai weights file (a .pth state dict or .safetensors)")
    if path.suffix == ".safetensors":
        from safetensors.numpy import load_file

        return dict(load_file(str(path)))
    import torch

    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises many kinds for a non-checkpoint file
        raise CheckpointError(f"{path}: not a PyTorch state dict torch.load(weights_only=True) can read ({e})") \
            from None
    if isinstance(state, dict) and "model" in state and isinstance(state["model"], dict):
        state = state["model"]
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: holds a {type(state).__name__}, not a state dict of tensors")
    return {k: v.detach().float().numpy() for k, v in state.items() if hasattr(v, "detach")}


def _strip(state: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """-> (encoder tensors without the ``0.`` prefix, decoder tensors of ``1.decoder.``)."""
    enc, dec = {}, {}
    for k, v in state.items():
        if k.startswith("1.decoder."):
            dec[k[len("1.decoder."):]] = np.asarray(v, np.float32)
        elif not k.startswith("1."):
            for prefix in ("0.module.", "0."):
                if k.startswith(prefix):
                    k = k[len(prefix):]
                    break
            enc[k] = np.asarray(v, np.float32)
    return enc, dec


def config_from_state(state: dict[str, np.ndarray], where: str = "state dict", **overrides: Any) -> UlmfitConfig:
    enc, _ = _strip(state)
    if "encoder.weight" not in enc:
        raise CheckpointError(f"{where}: no 'encoder.weight' (the embedding of fastai's AWD_LSTM); keys look like "
                              f"{', '.join(list(state)[:5])}")
    vocab, emb = enc["encoder.weight"].shape
    n = 0
    while f"rnns.{n}.module.weight_ih_l0" in enc:
        n += 1
    if n == 0:
        raise CheckpointError(f"{where}: no 'rnns.0.module.weight_ih_l0': not a fastai AWD_LSTM state dict")
    hidden = enc["rnns.0.module.weight_ih_l0"].shape[0] // 4 if n > 1 else emb
    _, dec = _strip(state)
    tied = "weight" not in dec or np.array_equal(dec["weight"], enc["encoder.weight"])
    return UlmfitConfig(**{"vocab_size": int(vocab), "embed_dim": int(emb), "hidden_dim": int(hidden),
                           "num_layers": n, "tie_weights": tied, **overrides})


def import_state_dict(state: dict[str, np.ndarray], cfg: UlmfitConfig, where: str = "state dict") -> dict:
    """fastai tensors -> ``{'ulmfit': ..., 'lm_head': ...}`` (the params of ``AwdLstmLanguageModel``)."""
    enc, dec = _strip(state)

    def take(key: str, shape: tuple[int, ...], table: dict = enc, prefix: str = "") -> np.ndarray:
        if key not in table:
            raise CheckpointError(f"{where}: missing tensor '{prefix}{key}' (an AWD_LSTM of {cfg.num_layers} layers, "
                                  f"{cfg.embed_dim} embedding, {cfg.hidden_dim} hidden needs it)")
        v = table[key]
        if tuple(v.shape) != shape:
            raise CheckpointError(f"{where}: tensor '{prefix}{key}' has shape {tuple(v.shape)}, expected {shape} "
                                  f"(vocab {cfg.vocab_size}, embedding {cfg.embed_dim}, hidden {cfg.hidden_dim})")
        return v

    extra = sorted(k for k in enc if k.startswith(f"rnns.{cfg.num_layers}."))
    if extra:
        raise CheckpointError(f"{where}: has more LSTM layers than model.num_layers={cfg.num_layers} ({extra[0]})")
    trunk: dict[str, Any] = {"embedding": take("encoder.weight", (cfg.vocab_size, cfg.embed_dim))}
    for i, (d, h) in enumerate(cfg.layer_sizes):
        p = f"rnns.{i}."
        trunk[f"layers_{i}"] = {
            "kernel": take(p + "module.weight_ih_l0", (4 * h, d)).T.copy(),
            "recurrent_kernel": take(p + "weight_hh_l0_raw", (4 * h, h)).T.copy(),
            "bias": take(p + "module.bias_ih_l0", (4 * h,)),
            "recurrent_bias": take(p + "module.bias_hh_l0", (4 * h,)),
        }
    head: dict[str, Any] = {"bias": dec["bias"] if "bias" in dec else np.zeros(cfg.vocab_size, np.float32)}
    if "bias" in dec:
        take("bias", (cfg.vocab_size,), dec, "1.decoder.")
    if not cfg.tie_weights:
        head["kernel"] = take("weight", (cfg.vocab_size, cfg.embed_dim), dec, "1.decoder.").T.copy()
    return {"ulmfit": trunk, "lm_head": head}


def import_classifier_head(state: dict[str, np.ndarray], cfg: UlmfitConfig, where: str = "state dict") -> dict:
    """fastai ``PoolingLinearClassifier`` tensors (``1.layers.{b}.{i}.*``) -> ``{'bn_0', 'hidden', 'bn_1',
    'output'}`` (the ``classifier`` params of ``AwdLstmClassifier``)."""
    blocks: dict[int, dict[str, dict[str, np.ndarray]]] = {}
    for k, v in state.items():
        parts = k.split(".")
        if len(parts) == 5 and parts[:2] == ["1", "layers"]:
            blocks.setdefault(int(parts[2]), {}).setdefault(parts[3], {})[parts[4]] = np.asarray(v, np.float32)
    if sorted(blocks) != [0, 1]:
        raise CheckpointError(f"{where}: expected fastai's classifier head with two LinBnDrop blocks "
                              f"(1.layers.0.*, 1.layers.1.*: lin_ftrs=[{cfg.head_hidden}]); found blocks "
                              f"{sorted(blocks) or 'none'}")
    head: dict[str, Any] = {}
    width = 3 * cfg.embed_dim
    for b, name in ((0, "hidden"), (1, "output")):
        bn = [m for m in blocks[b].values() if "running_mean" in m]
        lin = [m for m in blocks[b].values() if "weight" in m and m["weight"].ndim == 2]
        if len(bn) != 1 or len(lin) != 1 or any("bias" in m for m in lin):
            raise CheckpointError(f"{where}: block 1.layers.{b} is not BatchNorm1d -> [Dropout] -> Linear(bias=False)"
                                  " (fastai's LinBnDrop with bn=True)")
        bn, w = bn[0], lin[0]["weight"]
        if w.shape[1] != width or any(bn[k].shape != (width,) for k in ("weight", "bias", "running_mean",
                                                                            "running_var")):
            raise CheckpointError(f"{where}: block 1.layers.{b} reads {w.shape[1]} features, expected {width}")
        head[f"bn_{b}"] = {"scale": bn["weight"], "bias": bn["bias"], "running_mean": bn["running_mean"],
                           "running_var": bn["running_var"]}
        head[name] = {"kernel": w.T.copy()}
        width = w.shape[0]
    return head


def load_fastai(path: str | Path, **overrides: Any) -> tuple[dict, UlmfitConfig]:
    """A fastai weights file -> (params, config inferred from the shapes, with ``overrides``): a language model's
    ``{'ulmfit', 'lm_head'}``, or a text classifier's ``{'ulmfit', 'classifier'}`` (labels: the last kernel's
    columns)."""
    state = read_state_dict(path)
    if any(k.startswith("1.layers.") for k in state):
        hidden = state.get("1.layers.0.2.weight", state.get("1.layers.0.1.weight"))
        extra = {"head_hidden": int(hidden.shape[0])} if hidden is not None else {}
        cfg = config_from_state(state, str(path), **{**extra, **overrides})
        trunk = import_state_dict(state, cfg, str(path))["ulmfit"]
        return {"ulmfit": trunk, "classifier": import_classifier_head(state, cfg, str(path))}, cfg
    cfg = config_from_state(state, str(path), **overrides)
    return import_state_dict(state, cfg, str(path)), cfg


def as_variables(params: dict) -> dict:
    """``{'params': params}`` with jnp arrays, ready for ``AwdLstmLanguageModel.apply``."""
    import jax
    import jax.numpy as jnp

    return {"params": jax.tree.map(jnp.asarray, params)}
