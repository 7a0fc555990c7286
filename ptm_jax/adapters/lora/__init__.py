"""LoRA: Low-Rank Adaptation of Large Language Models (Hu et al. 2021), for every Transformer family.

``finetune.adapter = "lora"`` finetunes with the pretrained trunk frozen and a trained low-rank update
W + (alpha / r) A B on each targeted kernel (``[lora]``: rank, alpha, dropout, targets; ``config.py``), the task
head trained in full. ``<stage>/best`` holds the merged model, ``<stage>/best_adapter`` the trained parameters
alone (``objective.py``, ``files.py``). The reference implementations followed are microsoft/LoRA's ``loralib``
and Hugging Face peft's ``LoraLayer`` (B zero, A kaiming-uniform, scaling alpha / r, dropout on the adapter's
input).
"""
from __future__ import annotations

from typing import Any

from ptm_jax.adapters.registry import Adapter, register
from ptm_jax.adapters.lora.config import LoraConfig


def wrap(cfg: LoraConfig, objective: Any, param_groups: list, *, model_cfg: Any, trunk: str | None,
         pretrained: dict | None = None):
    """``registry.Adapter.wrap``: the objective with adapters on the targeted kernels of the frozen trunk, and the
    parameter groups with the trunk frozen (``adapt.FrozenTrunk``) before the stage's own rules. ``pretrained``
    (the checkpoint's tree): trunk tensors whose shape differs from it (GPT's embedding grown by the task tokens)
    are stored whole in ``best_adapter``, since the base model alone cannot give them back."""
    import jax

    from ptm_jax.adapters.lora import adapt
    from ptm_jax.adapters.lora.objective import LoraObjective
    from ptm_jax.errors import ConfigError

    if trunk is None:
        raise ConfigError(f"finetune.adapter='lora': model.family={model_cfg.family!r} names no pretrained trunk "
                          "(ParamLayout.trunk) to freeze")
    cfg.validate("lora")
    frozen = adapt.FrozenTrunk(trunk, tuple(cfg.trainable))
    boxed = jax.eval_shape(lambda: objective.init(jax.random.key(0), objective.example_batch(1)))
    targets = adapt.find_targets(cfg, boxed, frozen)
    grown = adapt.grown_paths(boxed, pretrained, trunk) if pretrained is not None else ()
    return LoraObjective(objective, cfg, targets, frozen, grown), [frozen, *param_groups]


ADAPTER = register(Adapter(name="lora", config=LoraConfig, wrap=wrap,
                           description="low-rank updates of frozen kernels (Hu et al. 2021)"))
