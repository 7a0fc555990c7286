"""The family registry: everything the spine needs to know about a model family, in one record per family.

A family is one package under ``ptm_jax/families/`` whose ``__init__`` builds a :class:`Family` and calls
:func:`register`. The loop, the stages, the CLI, export and bench ask this module; none of them names a family
(docs/architecture.md, "How a family plugs in"; levanter's ``LmConfig.register_subclass`` is the model). Families are
found by importing every package under ``ptm_jax/families`` (``load_all``), so adding a family is adding a package.

A family is its identity and six typed parts (``families/parts.py``: pretraining, parameter layout, finetuning,
interop, inspection, bench). Every hook but the pretraining objectives is optional: a family that has no Hugging
Face counterpart leaves ``interop.hf`` None, one without finetuning leaves ``finetuning.classifier`` None, and the
spine says so in a clear error when asked for it. ``Family.capabilities`` is derived from the filled hooks.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from ptm_jax.errors import ConfigError
from ptm_jax.families.parts import (  # noqa: F401  (the families' __init__ import the parts from here)
    Bench, Finetuning, HfConverter, Importer, Inspection, Interop, ParamLayout, Pretraining)
from ptm_jax.plugins import ConfigSection, PluginTable, lazy  # noqa: F401  (the families' __init__ import them here)


@dataclasses.dataclass(frozen=True)
class Family:
    """One model family: its identity and its six parts (``families/parts.py``). ``name`` is the value of
    ``model.family`` in configs and params directories."""

    name: str
    model_config: type
    """Dataclass of the ``[model]`` section (holds only this family's fields)."""
    pretraining: Pretraining
    layout: ParamLayout = ParamLayout()
    finetuning: Finetuning = Finetuning()
    interop: Interop = Interop()
    inspection: Inspection = Inspection()
    bench: Bench = Bench()
    tiny_preset: str | None = None
    """A preset small enough for the conformance tests (``tests/test_conformance.py``)."""

    @property
    def capabilities(self) -> frozenset[str]:
        """What commands may ask of it, derived from the hooks it fills (:data:`CAPABILITIES`)."""
        return frozenset(name for name, has in CAPABILITIES.items() if has(self))


CAPABILITIES: dict[str, Callable[[Family], bool]] = {
    "causal_lm": lambda f: f.inspection.generate is not None,
    "perplexity": lambda f: f.inspection.perplexity is not None,
    "embed": lambda f: "encoder" in f.finetuning.task_heads,
    "classify": lambda f: f.finetuning.classifier is not None and "sequence_classification" in f.finetuning.task_heads,
    "pack_examples": lambda f: f.finetuning.packs_examples,
    "word_vectors": lambda f: ((f.inspection.word_vectors is not None or f.inspection.subword_vectors is not None)
                               and f.pretraining.corpus is None),
    "node_vectors": lambda f: f.inspection.word_vectors is not None and f.pretraining.corpus is not None,
    "word_features": lambda f: f.inspection.word_features is not None,
    "attention_maps": lambda f: f.inspection.attention_maps is not None,
    "hugging_face": lambda f: f.interop.hf is not None,
}
"""Capability -> the hooks that give it: 'causal_lm' (``ptm generate``), 'perplexity' (``ptm perplexity``),
'embed' (``ptm embed``: an encoder head), 'classify' (``ptm predict``: a classifier with a BERT-layout sequence
classification head), 'pack_examples' (``finetune.pack_examples``), 'word_vectors' (``ptm neighbors``,
``analogy``, ``eval-vectors``, vector files, and the feature heads over a text's words), 'node_vectors' (the same
commands over the vectors of a graph's or a hierarchy's nodes, a family with its own corpus: no text task reads
them), 'word_features' (probes, feature heads, ``ptm compare``),
'attention_maps' (``ptm attention``), 'hugging_face' (``ptm import-hf``, ``export --format hf``)."""


SUBWORD_KINDS = ("wordpiece", "sentencepiece_unigram", "sentencepiece_bpe", "byte_bpe")
"""The tokenizer kinds a family accepts when it leaves ``Pretraining.tokenizer_kinds`` empty."""
SPECIAL_NAMES = ("pad", "cls", "sep", "mask", "eos")
"""Special tokens a family may declare in ``Pretraining.specials`` (``SpecialIds`` fields)."""


def tokenizer_kinds(family: Family) -> tuple[str, ...]:
    """The ``tokenizer.kind`` values ``family`` accepts."""
    return family.pretraining.tokenizer_kinds or SUBWORD_KINDS


_TABLE: PluginTable[Family] = PluginTable("ptm_jax.families", "family", "model.family")
load_all = _TABLE.load_all
families = _TABLE.all
unregister = _TABLE.unregister


def register(family: Family) -> Family:
    """Adds ``family``; its objective names must be new (an objective names exactly one family)."""
    unknown = sorted(set(family.pretraining.specials) - set(SPECIAL_NAMES))
    if unknown:
        raise ValueError(f"family {family.name!r} declares specials {unknown}; known: {', '.join(SPECIAL_NAMES)}")
    for other in _TABLE.registered().values():
        if other.name == family.name:
            continue
        clash = set(other.pretraining.objectives) & set(family.pretraining.objectives)
        if clash:
            raise ValueError(f"family {family.name!r} registers objective(s) {sorted(clash)} that family "
                             f"{other.name!r} already owns")
    return _TABLE.register(family)


def get(name: str) -> Family:
    return _TABLE.get(name)


def objective_names() -> dict[str, str]:
    """Pretraining objective name -> family name, over every registered family."""
    return {obj: fam.name for fam in families().values() for obj in fam.pretraining.objectives}


def family_of_objective(objective: str) -> Family:
    owners = objective_names()
    if objective not in owners:
        import difflib

        close = difflib.get_close_matches(objective, list(owners), n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"objective={objective!r} is not registered by any family.{hint} Known objectives: "
                          f"{', '.join(f'{o} ({f})' for o, f in sorted(owners.items()))}")
    return get(owners[objective])


def hf_family(model_type: str) -> Family:
    """The family that imports a Hugging Face folder of ``model_type`` (its ``config.json``)."""
    fams = [f for f in families().values() if f.interop.hf is not None]
    for fam in fams:
        if model_type in fam.interop.hf.model_types:
            return fam
    for fam in fams:
        if fam.interop.hf.fallback:
            return fam
    raise ConfigError(f"no registered family imports Hugging Face model_type={model_type!r}; known: "
                      f"{', '.join(t for f in fams for t in f.interop.hf.model_types)}")


def importers() -> dict[str, tuple[str, Any]]:
    """Every registered family's weight importers (``Interop.importers``): format -> (family name, Importer)."""
    return {fmt: (f.name, imp) for f in families().values() for fmt, imp in f.interop.importers.items()}


def family_of_params(params: dict) -> Family | None:
    """The family whose trunk key is at the top of a params tree (None when no family claims it)."""
    for fam in families().values():
        if fam.layout.trunk is not None and fam.layout.trunk in params:
            return fam
    return None


def require(family: Family, hook: str, what: str) -> Any:
    """``family.<part>.<hook>`` (``hook`` as 'interop.hf'), or a ConfigError saying that this family does not support
    ``what``."""
    part, name = hook.split(".")
    value = getattr(getattr(family, part), name)
    if value is None or value == {}:
        raise ConfigError(f"model.family={family.name!r} does not support {what}")
    return value
