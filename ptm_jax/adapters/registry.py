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
import difflib
import importlib
import pkgutil
from typing import Any, Callable

from ptm_jax.errors import ConfigError


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


_ADAPTERS: dict[str, Adapter] = {}
_LOADED = False


def register(adapter: Adapter) -> Adapter:
    if adapter.name in _ADAPTERS and _ADAPTERS[adapter.name] is not adapter:
        raise ValueError(f"adapter {adapter.name!r} registered twice")
    _ADAPTERS[adapter.name] = adapter
    return adapter


def load_all() -> None:
    """Imports every package under ``ptm_jax/adapters`` (each registers itself)."""
    global _LOADED
    if _LOADED:
        return
    import ptm_jax.adapters as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        if info.ispkg:
            importlib.import_module(f"{pkg.__name__}.{info.name}")
    _LOADED = True


def adapters() -> dict[str, Adapter]:
    load_all()
    return dict(_ADAPTERS)


def get(name: str, where: str = "finetune.adapter") -> Adapter:
    """The adapter registered as ``name``, or a ConfigError listing them."""
    table = adapters()
    if name not in table:
        close = difflib.get_close_matches(name, list(table), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"{where}={name!r} is not a registered adapter (registered: {', '.join(sorted(table))}; "
                          f"empty for none).{hint}")
    return table[name]


def sections() -> dict[str, type]:
    """Config section name -> dataclass, for every registered adapter (``config.py`` reads ``[lora]`` with it)."""
    return {a.name: a.config for a in adapters().values()}
