"""objective name -> builder, asked of the family registry (``ptm_jax/families/registry.py``): a family
registers its pretraining objectives in its own package; the loop never changes."""
from __future__ import annotations

from typing import Any


def build_objective(cfg: Any, corpus: Any):
    """The objective ``cfg.objective`` of its family, built over ``corpus`` (train/eval sources, tokenizer,
    special ids); an unregistered name is a ConfigError listing the registered ones."""
    from ptm_jax.families import registry

    return registry.family_of_objective(cfg.objective).pretraining.objectives[cfg.objective](cfg, corpus)
