"""The finetuning objective with LoRA: the task objective's model, loss and predictions over frozen pretrained
weights plus trained low-rank adapters (``adapt.py``), and what ``<stage>/best`` and ``<stage>/best_adapter`` hold.

Parameters: ``{'params': the task model's (pretrained trunk + head), 'lora': the adapters}``. The parameter
groups freeze the trunk (``FrozenTrunk``: no optimizer state, no update); the adapters and the task head train
(peft's task models train their classifier beside the adapters). The loss sees the trunk through
``stop_gradient``, so no gradient of a pretrained weight is computed.

Saving (``train/finetune.py`` KeepBest): ``saved_params`` merges W + s A B into the kernels, so ``<stage>/best``
is an ordinary params directory of the task model (``ptm eval``, ``ptm export --format hf`` read it unchanged);
``save_beside_best`` writes ``<stage>/best_adapter``, a params directory of the trained parameters alone (the
adapters under their mirrored paths and the task head), which ``files.apply_adapter`` merges into the base
model again.
"""
from __future__ import annotations

from typing import Any

import jax
import numpy as np

from ptm_jax.adapters.lora import adapt
from ptm_jax.adapters.lora.config import LoraConfig
from ptm_jax.errors import ConfigError
from ptm_jax.objectives.base import CarriesState, SetsStatistics
from ptm_jax.train.param_groups import path_keys
from ptm_jax.train.step import SparseRows

ADAPTER_DIR = "best_adapter"
_UNSUPPORTED = (CarriesState, SetsStatistics, SparseRows)
"""The step variants LoRA does not wrap: carried state, statistics set by the step, sparse row updates."""


class LoraObjective:
    """``objective`` with LoRA adapters. Every attribute it does not define is the task objective's own (data,
    metrics, normalizers, head), so the loop's protocol checks (``objectives/base.py``) see what the task has."""

    def __init__(self, objective: Any, cfg: LoraConfig, targets: list[adapt.Target], frozen: adapt.FrozenTrunk,
                 grown: tuple[str, ...] = ()):
        bad = [p.__name__ for p in _UNSUPPORTED if isinstance(objective, p)]
        if bad:
            raise ConfigError(f"finetune.adapter='lora': objective {objective.name!r} is {', '.join(bad)} "
                              "(objectives/base.py, train/step.py), a step LoRA does not wrap; set finetune.adapter=''")
        self.inner, self.cfg, self.targets, self.frozen, self.grown = objective, cfg, targets, frozen, grown
        if hasattr(objective, "predict"):
            self.predict = self._predict

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    # ------------------------------------------------------------------ parameters

    def init(self, rng: jax.Array, batch: dict) -> dict:
        params = self.inner.init(rng, batch)
        return {**params, adapt.COLLECTION: adapt.init_adapters(self.cfg, self.targets, jax.random.fold_in(rng, 7))}

    def model_params(self, params: dict, train: bool = False) -> dict:
        """The task model's parameters as its own objective reads them: the trunk frozen (``stop_gradient``)
        and, unless the adapters run beside the layers (train with dropout), the updates merged in."""
        base = adapt.freeze(params["params"], self.frozen)
        if train and self.cfg.dropout > 0.0:
            return {**params, "params": base}
        return {"params": adapt.merge(base, params[adapt.COLLECTION], self.targets, self.cfg.scale)}

    def _task(self, params: dict) -> dict:
        return {k: v for k, v in params.items() if k != adapt.COLLECTION}

    # ------------------------------------------------------------------ the loop's calls

    def loss(self, params: dict, batch: dict, rng: jax.Array | None, normalizers: dict, train: bool):
        if not (train and self.cfg.dropout > 0.0):
            return self.inner.loss(self.model_params(params), batch, rng, normalizers, train)
        model = self._task(self.model_params(params, train=True))
        key = jax.random.fold_in(rng if rng is not None else jax.random.key(0), 0x10AA)
        with adapt.beside_dense(params[adapt.COLLECTION], self.targets, self.cfg.scale, self.cfg.dropout, key):
            return self.inner.loss(model, batch, rng, normalizers, train)

    def _predict(self, params: dict, batch: dict) -> dict:
        return self.inner.predict(self.model_params(params), batch)

    # ------------------------------------------------------------------ saving

    def saved_params(self, params: dict) -> dict:
        """``<stage>/best``: the task model with the updates merged into its kernels (what the task objective
        itself would save from them)."""
        merged = {"params": adapt.merge(params["params"], params[adapt.COLLECTION], self.targets, self.cfg.scale)}
        inner = getattr(self.inner, "saved_params", None)
        return inner(merged) if inner is not None else merged

    def trained_params(self, params: dict) -> dict:
        """The trained parameters alone, as one tree without the 'params' level: the adapters at their mirrored
        paths (``.../query/kernel/lora_a``), every parameter the frozen rule leaves out (the task head), and the
        frozen trunk tensors the pretrained model lacks in this shape (``grown``: GPT's task-token rows)."""
        out: dict = {}

        def put(keys: list[str], value: Any) -> None:
            node = out
            for k in keys[:-1]:
                node = node.setdefault(k, {})
            node[keys[-1]] = value

        for path, x in jax.tree_util.tree_flatten_with_path(params["params"])[0]:
            keys = path_keys(path)
            joined = "/".join(["params", *keys])
            if not self.frozen.matches(joined) or joined in self.grown:
                put(keys, x)
        for path, x in jax.tree_util.tree_flatten_with_path(params[adapt.COLLECTION])[0]:
            put(path_keys(path), x)
        return out

    def save_beside_best(self, stage, params: dict, model_cfg: Any, head: str, extra: dict, tokenizer_files) -> None:
        from ptm_jax.export.params import save_params

        info = {**extra, "adapter": adapter_info(self.cfg, self.targets)}
        save_params(stage / ADAPTER_DIR, self.trained_params(params), model_cfg, head, info, tokenizer_files,
                    overwrite=True)

    def trained_count(self, params: dict) -> int:
        return int(sum(np.size(x) for x in jax.tree.leaves(self.trained_params(params))))


def adapter_info(cfg: LoraConfig, targets: list[adapt.Target]) -> dict:
    """What ``best_adapter/ptm.json`` records under 'adapter' (enough to merge it into its base again)."""
    return {"kind": "lora", "rank": cfg.rank, "alpha": cfg.alpha, "scale": cfg.scale, "dropout": cfg.dropout,
            "targets": [t.path for t in targets],
            "adapter_parameters": int(sum(t.count(cfg.rank) for t in targets))}
