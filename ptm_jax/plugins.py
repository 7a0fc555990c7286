"""Plug-in tables: the one mechanism behind the family, finetuning-job and adapter registries.

A kind of plug-in lives in one package (``ptm_jax/families``, ``ptm_jax/jobs``, ``ptm_jax/adapters``); each
sub-package's ``__init__`` builds its record and registers it, so adding a plug-in is adding a package.
:class:`PluginTable` holds the records of one kind, imports the sub-packages once (sorted by name) and answers a
name with the record or a ConfigError naming the config field, the registered names and the closest match.
:func:`lazy` lets a plug-in's ``__init__`` name its code as 'module:function' without importing it.

This module sits at the bottom of the import graph: it imports nothing of ptm_jax but its error type.
"""
from __future__ import annotations

import dataclasses
import difflib
import importlib
import pkgutil
from typing import Any, Callable, Generic, TypeVar

from ptm_jax.errors import ConfigError

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class ConfigSection:
    """A top-level config section that a task or a family's finetuning reads (``[squad]``, ``[gpt_finetune]``);
    ``data/tasks/sections.py`` holds the tasks' and gathers the families' (``Finetuning.sections``)."""

    name: str
    config: type
    """Its dataclass (with an optional ``validate(where)``)."""
    owner: str
    """Who reads it, for messages ('the span-QA tasks squad and squad_v2')."""
    moved: dict[str, str] = dataclasses.field(default_factory=dict)
    """Former ``finetune.<field>`` -> its field here: the unknown-key error of an old config names the new key."""


def lazy(module: str, attr: str) -> Callable[..., Any]:
    """A function that calls ``module.attr`` with its arguments, importing ``module`` at the first call: a
    plug-in's ``__init__`` names its hooks without importing their modules (models, data builders, jobs)."""

    def call(*args: Any, **kw: Any) -> Any:
        return getattr(importlib.import_module(module), attr)(*args, **kw)

    call.__name__ = call.__qualname__ = attr
    call.__wrapped_target__ = (module, attr)  # type: ignore[attr-defined]  (what it calls, for checks and docs)
    return call


class PluginTable(Generic[T]):
    """The registered records of one kind, keyed by their ``name``.

    ``package``: the package whose sub-packages register themselves; ``kind``: how an error names a record
    ('finetuning job'); ``field``: the config field that names one ('finetune.job'); ``also``: other packages whose
    sub-packages may register records of this kind (a family package its own job: ULMFiT's stages)."""

    def __init__(self, package: str, kind: str, field: str, also: tuple[str, ...] = ()):
        self.package, self.kind, self.field, self.also = package, kind, field, also
        self._items: dict[str, T] = {}
        self._loaded = False

    def register(self, item: T) -> T:
        name = item.name  # type: ignore[attr-defined]
        if name in self._items and self._items[name] is not item:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self._items[name] = item
        return item

    def unregister(self, name: str) -> None:
        """Removes ``name`` (a test's throw-away plug-in)."""
        self._items.pop(name, None)

    def registered(self) -> dict[str, T]:
        """The records registered so far, without importing the rest (a ``register`` check reads it)."""
        return dict(self._items)

    def load_all(self) -> None:
        """Imports every sub-package of ``package`` (then of each of ``also``) once, in name order (each registers
        itself)."""
        if self._loaded:
            return
        for package in (self.package, *self.also):
            pkg = importlib.import_module(package)
            for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
                if info.ispkg:
                    importlib.import_module(f"{package}.{info.name}")
        self._loaded = True

    def all(self) -> dict[str, T]:
        self.load_all()
        return dict(self._items)

    def get(self, name: str, where: str | None = None, none_hint: str = "") -> T:
        """The record registered as ``name``, or a ConfigError naming ``where`` (default: ``field``), the
        registered names and the closest one."""
        table = self.all()
        if name not in table:
            close = difflib.get_close_matches(name, list(table), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{where or self.field}={name!r} is not a registered {self.kind} (registered: "
                              f"{', '.join(sorted(table))}{none_hint}).{hint}")
        return table[name]

    def sections(self) -> dict[str, type]:
        """Config section name -> dataclass, for every record with a ``config`` (its own ``[name]`` section)."""
        return {n: c for n, item in self.all().items() if (c := getattr(item, "config", None)) is not None}
