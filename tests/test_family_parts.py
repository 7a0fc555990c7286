"""The family contract as typed parts (ptm_jax/families/parts.py): every registered family's hooks have the Protocol's
parameters, capabilities follow from the filled hooks, and docs/architecture.md holds the table that
``ptm families`` prints."""
import dataclasses
import inspect
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from ptm_jax.families import parts, registry
from ptm_jax.families.table import parts_table

REPO = Path(__file__).resolve().parent.parent


def _is_protocol(kind) -> bool:
    return isinstance(kind, type) and getattr(kind, "_is_protocol", False) and "__call__" in vars(kind)


def _hooks(fam):
    """(where, value, Protocol) of every callable hook a family fills."""
    hints = {cls: typing.get_type_hints(cls, vars(parts)) for cls in
             (parts.Pretraining, parts.ParamLayout, parts.Finetuning, parts.Interop, parts.Inspection, parts.Bench)}
    for part in parts.PARTS:
        value = getattr(fam, part)
        for field in dataclasses.fields(value):
            hook = getattr(value, field.name)
            kind = hints[type(value)][field.name]
            args = [a for a in typing.get_args(kind) if a is not type(None)] or [kind]
            proto = next((a for a in args if _is_protocol(a)), None)
            if typing.get_origin(kind) is dict or (args and typing.get_origin(args[0]) is dict):
                inner = typing.get_args(args[0] if typing.get_origin(kind) is not dict else kind)[1]
                if _is_protocol(inner):
                    for key, item in hook.items():
                        yield f"{fam.name}.{part}.{field.name}[{key!r}]", item, inner
            elif proto is not None and hook is not None:
                yield f"{fam.name}.{part}.{field.name}", hook, proto


def _positional(fn) -> list[str]:
    sig = inspect.signature(fn)
    return [p.name for p in sig.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"]


def test_every_families_hooks_take_their_protocols_positional_arguments():
    checked = 0
    for fam in registry.families().values():
        for where, hook, proto in _hooks(fam):
            if hasattr(hook, "__wrapped_target__"):
                continue  # plugins.lazy: the next test checks the function it imports
            want = _positional(proto.__call__)
            sig = inspect.signature(hook)
            if any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values()):
                continue  # a forwarder (``lambda *a, **kw``) to a builder of the spine
            try:
                sig.bind(*want)  # the hook accepts the Protocol's positional arguments
            except TypeError as e:
                pytest.fail(f"{where}: {hook} does not take {proto.__name__}'s arguments {want}: {e}")
            checked += 1
    assert checked >= 40  # the directly named hooks (objective builders, artifacts, layout hooks, ...)


def test_lazy_hooks_resolve_to_functions_that_take_their_protocols_arguments():
    import importlib

    checked = 0
    for fam in registry.families().values():
        for where, hook, proto in _hooks(fam):
            target = getattr(hook, "__wrapped_target__", None)
            if target is None:
                continue
            module, attr = target
            fn = getattr(importlib.import_module(module), attr)
            if isinstance(fn, type):
                continue  # a class (a bench variant wrapper): its __init__ takes the objective
            sig = inspect.signature(fn)
            if any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values()):
                continue
            try:
                sig.bind(*_positional(proto.__call__))
            except TypeError as e:
                pytest.fail(f"{where} -> {module}.{attr}: does not take {proto.__name__}'s arguments: {e}")
            checked += 1
    assert checked >= 25  # 27 when written


def test_capabilities_are_exactly_what_the_filled_hooks_give():
    fams = registry.families()
    assert fams["gpt"].capabilities == {"causal_lm", "perplexity", "word_features", "attention_maps", "hugging_face"}
    assert fams["bert"].capabilities == {"embed", "classify", "pack_examples", "word_features", "attention_maps",
                                         "hugging_face"}
    assert fams["nnlm"].capabilities == {"perplexity", "word_vectors"}
    assert fams["fasttext"].capabilities == {"word_vectors"}  # from subword_vectors alone
    assert fams["elmo"].capabilities == {"word_features"}  # no perplexity hook, so no 'perplexity'
    # a capability appears with its hook and goes with it
    bare = dataclasses.replace(fams["gpt"], inspection=dataclasses.replace(fams["gpt"].inspection, generate=None))
    assert fams["gpt"].capabilities - bare.capabilities == {"causal_lm"}
    # XLNet and GPT have classifiers but no BERT-layout sequence-classification head: `ptm predict` is not theirs
    assert "classify" not in fams["xlnet"].capabilities and "classify" not in fams["gpt"].capabilities


def test_require_names_the_family_and_what_it_lacks():
    from ptm_jax.errors import ConfigError

    with pytest.raises(ConfigError, match=r"model.family='word2vec' does not support Hugging Face export"):
        registry.require(registry.get("word2vec"), "interop.hf", "Hugging Face export")
    assert registry.require(registry.get("bert"), "interop.hf", "x").model_types == ("bert",)


def test_architecture_page_holds_the_generated_families_table():
    page = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    start, end = "<!-- families table: `ptm families` -->\n", "<!-- end of families table -->"
    assert start in page and end in page
    assert page.split(start)[1].split(end)[0] == parts_table(), "regenerate it: ptm families"
    for name in registry.families():
        assert f"| `{name}` |" in parts_table()


def test_ptm_families_prints_the_table():
    out = subprocess.run([sys.executable, "-m", "ptm_jax.cli", "families"], capture_output=True, text=True,
                         check=True, cwd=REPO).stdout
    assert out == parts_table()
    assert out.count("\n") == 2 + len(registry.families())
