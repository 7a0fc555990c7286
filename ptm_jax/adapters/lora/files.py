"""A LoRA run's ``<stage>/best_adapter`` merged into its base model again (peft's ``merge_and_unload``).

``best_adapter`` is a params directory (``export/params.py``) holding the trained parameters alone: each adapter
``{'lora_a': A, 'lora_b': B}`` under the path of the kernel it updates (``.../query/kernel/lora_a``) and the task
head; its ``ptm.json`` records the rank, alpha and targets under 'adapter'.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ptm_jax.errors import CheckpointError


def _walk(tree: dict, prefix: tuple[str, ...] = ()):
    for k, v in tree.items():
        if isinstance(v, dict):
            if set(v) == {"lora_a", "lora_b"}:
                yield prefix + (k,), v
            else:
                yield from _walk(v, prefix + (k,))
        else:
            yield prefix + (k,), v


def apply_adapter(base: dict, adapter: dict, scale: float, where: str = "adapter") -> dict:
    """``base`` (a params tree without the 'params' level, numpy leaves) with each adapted kernel replaced by
    W + scale A B and each other trained tensor (the task head) taken from ``adapter``. A path the base lacks, or a
    shape that does not fit, is a CheckpointError."""
    out = {k: v for k, v in base.items() if k in adapter}  # the trunk; the base's own heads are not the task's

    def setpath(keys: tuple[str, ...], value: Any) -> None:
        node = out
        for k in keys[:-1]:
            node[k] = dict(node.get(k, {}))
            node = node[k]
        node[keys[-1]] = value

    def getpath(keys: tuple[str, ...]) -> Any:
        node = base
        for k in keys:
            if not isinstance(node, dict) or k not in node:
                raise CheckpointError(f"{where}: '{'/'.join(keys)}' is not a parameter of the base model")
            node = node[k]
        return node

    for keys, value in _walk(adapter):
        if isinstance(value, dict):  # an adapter
            w = np.asarray(getpath(keys))
            a, b = np.asarray(value["lora_a"], np.float32), np.asarray(value["lora_b"], np.float32)
            if a.ndim > 1 and b.shape[0] != a.shape[-1] and a.shape[0] == b.shape[0] == w.shape[0]:  # a stack
                d = np.stack([np.tensordot(x, y, axes=1) for x, y in zip(a, b)])
            else:
                d = np.tensordot(a, b, axes=1)
            if d.shape != w.shape:
                raise CheckpointError(f"{where}: the adapter of '{'/'.join(keys)}' gives {d.shape}, the kernel is "
                                      f"{w.shape}")
            setpath(keys, (w + np.float32(scale) * d).astype(w.dtype))
        else:
            setpath(keys, value)
    return out


def merge_adapter_dir(base: str | Path, adapter_dir: str | Path) -> tuple[dict, Any, dict]:
    """(merged params, model config, the adapter's ptm.json info) from a base model (run, params directory or
    Hugging Face folder) and a ``best_adapter`` params directory."""
    from ptm_jax.export.params import load_params

    tree, cfg, info, _ = load_params(adapter_dir)
    meta = info.get("adapter") or {}
    if meta.get("kind") != "lora":
        raise CheckpointError(f"{adapter_dir}: its ptm.json has no LoRA 'adapter' record; pass a LoRA run's "
                              "<stage>/best_adapter")
    params, _, _, _ = load_params(base)
    return apply_adapter(params, tree, float(meta["scale"]), str(adapter_dir)), cfg, info
