"""Import of fastai ``AWD_LSTM`` weights (``fastai/text/models/awdlstm.py``; the language model of
``get_language_model(AWD_LSTM, ...)`` is ``SequentialRNN(AWD_LSTM, LinearDecoder)``).

A state dict (a ``.pth`` read with ``torch.load(weights_only=True)``, or a dict of arrays) with keys, optionally
prefixed ``0.`` (the encoder inside the LM) and with the decoder under ``1.``::

    encoder.weight                        [V, E]      -> ulmfit/embedding
    rnns.{i}.weight_hh_l0_raw             [4H, H]     -> ulmfit/layers_i/recurrent_kernel (transposed; the raw
                                                         weight that WeightDropout drops from)
    rnns.{i}.module.weight_ih_l0          [4H, D]     -> ulmfit/layers_i/kernel (transposed)
    rnns.{i}.module.bias_ih_l0 + bias_hh_l0  [4H]     -> ulmfit/layers_i/bias (their sum)
    1.decoder.bias                        [V]         -> lm_head/bias (zeros when absent: a bare encoder)
    1.decoder.weight                      [V, E]      -> lm_head/kernel (transposed) when the weights are untied

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
        else:
            enc[k[2:] if k.startswith("0.") else k] = np.asarray(v, np.float32)
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
            "bias": take(p + "module.bias_ih_l0", (4 * h,)) + take(p + "module.bias_hh_l0", (4 * h,)),
        }
    head: dict[str, Any] = {"bias": dec["bias"] if "bias" in dec else np.zeros(cfg.vocab_size, np.float32)}
    if "bias" in dec:
        take("bias", (cfg.vocab_size,), dec, "1.decoder.")
    if not cfg.tie_weights:
        head["kernel"] = take("weight", (cfg.vocab_size, cfg.embed_dim), dec, "1.decoder.").T.copy()
    return {"ulmfit": trunk, "lm_head": head}


def load_fastai(path: str | Path, **overrides: Any) -> tuple[dict, UlmfitConfig]:
    """A fastai weights file -> (params, config inferred from the shapes, with ``overrides``)."""
    state = read_state_dict(path)
    cfg = config_from_state(state, str(path), **overrides)
    return import_state_dict(state, cfg, str(path)), cfg


def as_variables(params: dict) -> dict:
    """``{'params': params}`` with jnp arrays, ready for ``AwdLstmLanguageModel.apply``."""
    import jax
    import jax.numpy as jnp

    return {"params": jax.tree.map(jnp.asarray, params)}
