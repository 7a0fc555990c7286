"""The adapter registry: what the finetuning stage needs to know about a parameter-efficient adapter.

An adapter is one package under ``ptm_jax/adapters/`` whose ``__init__`` builds an :class:`Adapter` and calls
:func:`register`; adapters are found by importing every package there (``load_all``), as families are
(``ptm_jax/families/registry.py``). ``finetune.adapter`` names the adapter of a finetuning run; the adapter owns
the top-level config section of its own name (``[lora]``), read into its ``config`` dataclass the way a family
owns ``[model]`` (``ptm_jax/config.py``: ``RunConfig.plugins``).

This module sits at the bottom of the import graph: it imports nothing of the spine but its error type, so
``config.py`` and the stages can ask it without cycles.

The finetuning stage makes one call, ``adapter.wrap(...)`` (see :class:`Adapter`): the adapter returns the
objective and parameter groups the loop trains with. The wrapped objective keeps the loop's contract
(``objectives/base.py``); it says what ``<stage>/best`` holds through ``saved_params`` (e.g. the merged weights)
and may write more beside it through ``save_beside_best`` (e.g. the adapter weights alone).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from ptm_jax.plugins import PluginTable


@dataclasses.dataclass(frozen=True)
class Adapter:
    """One adapter. ``name`` is the value of ``finetune.adapter`` and the name of its config section."""

    name: str
    config: type
    """Dataclass of the ``[name]`` section (with an optional ``validate(where)``)."""
    wrap: Callable[..., tuple[Any, list]]
    """(adapter_cfg, objective, param_groups, *, model_cfg, trunk, pretrained) -> (objective, param_groups): the
    objective the loop trains (its parameters, loss and predictions adapted) and the parameter-group rules to
    train it with (``train/param_groups.py``: e.g. the pretrained trunk frozen). ``trunk``: the family's trunk
    key; ``pretrained``: the checkpoint's parameter tree the stage starts from."""
    description: str = ""


_TABLE: PluginTable[Adapter] = PluginTable("ptm_jax.adapters", "adapter", "finetune.adapter")
register = _TABLE.register
load_all = _TABLE.load_all
adapters = _TABLE.all
sections = _TABLE.sections
"""``sections()``: config section name -> dataclass of every adapter (``config.py`` reads ``[lora]`` with it)."""


def get(name: str, where: str = "finetune.adapter") -> Adapter:
    """The adapter registered as ``name``, or a ConfigError listing them."""
    return _TABLE.get(name, where, none_hint="; empty for none")
