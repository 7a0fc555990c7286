"""No file outside a family's package names the family (docs/architecture.md, "How a family plugs in").

For every family in the registry (``ptm_jax.families.registry.families()``: bert, gpt, nnlm, xlnet, ...), every
``.py`` file under ``ptm_jax/`` outside the family packages ``ptm_jax/families/*/`` (a family may import another:
ERNIE builds on BERT) is read with ``tokenize`` and fails on:

1. an identifier with the family's name as one of its words (``_`` and camel-case split, case-insensitive; a name
   of several words as consecutive words): ``BertModel``, ``gpt_flops``, ``xlnet``, ``transfo_xl_lm``, and
   ``ptm_jax.families.bert`` in an import;
2. a public class name defined at the top level of a module of the family's package (``MlmHead``,
   ``PlmObjective``);
3. a string literal, outside docstrings, that is the family's name or starts with it and an underscore, as a
   dispatch key or preset name is written: ``"bert"``, ``'xlnet'``, ``"gpt_small"``.

Comments, docstrings and prose messages (a string with anything but a name in it: "google-research/bert
run_squad.py", "a GPT-2 vocab.json") are not checked: they cite references and file formats.

The justified exceptions, each a (file, token) pair (any other use in the same file still fails):

- ``config.py`` ``"bert"``: the ``train.lr_decay="bert"`` schedule, a config value named after
  google-research/bert optimization.py's polynomial decay (no section defaults to a family: the ``[model]`` and
  ``[data]`` dataclasses come from the family of ``model.family`` or ``objective``); ``train/optim.py``
  ``bert_schedule`` is that schedule;
- ``data/tokenizers.py`` ``bert_normalizer`` / ``bert_pre_tokenizer``: BERT's BasicTokenizer normalization, which
  the ``wordpiece`` tokenizer kind (any family's) and the word vocabulary apply;
- ``commands/stages.py`` / ``commands/bench.py`` ``"bert_small"`` / ``"bert_base"``: the default presets of the
  commands (files under ``configs/``).
"""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from ptm_jax.families import registry

ROOT = Path(__file__).resolve().parents[1] / "ptm_jax"
FAMILY_FILE = re.compile(r"ptm_jax/families/[^/]+/")
"""Files of a family package: a family may build on another by import (ERNIE 1.0 reuses BERT's modules); only
the spine may not name them."""

EXCEPTIONS = {
    ("ptm_jax/config.py", '"bert"'),
    ("ptm_jax/train/optim.py", "bert_schedule"),
    ("ptm_jax/data/tokenizers.py", "bert_normalizer"),
    ("ptm_jax/data/tokenizers.py", "bert_pre_tokenizer"),
    ("ptm_jax/commands/stages.py", '"bert_small"'),
    ("ptm_jax/commands/bench.py", '"bert_small"'),
    ("ptm_jax/commands/bench.py", '"bert_base"'),
}


def _words(identifier: str) -> list[str]:
    return [w.lower() for w in re.split(r"_|(?<=[a-z0-9])(?=[A-Z])", identifier) if w]


def _names_family(name: str, identifier: str) -> bool:
    """The family's name is among the identifier's words; a name of several words (``transfo_xl``) as consecutive
    words (``transfo_xl_lm``, ``TransfoXl``)."""
    words, parts = _words(identifier), name.lower().split("_")
    return any(words[i:i + len(parts)] == parts for i in range(len(words) - len(parts) + 1))


def _docstring_lines(tree: ast.AST) -> set[int]:
    """Lines of string statements: module/class/function docstrings and attribute docstrings."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            lines.update(range(node.lineno, node.end_lineno + 1))
    return lines


def _classes(package: Path) -> set[str]:
    names: set[str] = set()
    for f in package.rglob("*.py"):
        names |= {n.name for n in ast.parse(f.read_text(encoding="utf-8")).body
                  if isinstance(n, ast.ClassDef) and not n.name.startswith("_")}
    return names


def _violations(root: Path = ROOT) -> list[str]:
    fams = registry.families()
    classes = {name: _classes(ROOT / "families" / name) for name in fams}
    found = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root.parent).as_posix()
        src = f.read_text(encoding="utf-8")
        docs = _docstring_lines(ast.parse(src))
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            for name in fams:
                if FAMILY_FILE.match(rel) or (rel, tok.string) in EXCEPTIONS:
                    continue
                if tok.type == tokenize.NAME:
                    bad = _names_family(name, tok.string) or tok.string in classes[name]
                elif tok.type == tokenize.STRING and tok.start[0] not in docs:
                    body = re.sub(r"^[rbfuRBFU]*(\"\"\"|'''|\"|')|(\"\"\"|'''|\"|')$", "", tok.string)
                    bad = re.fullmatch(rf"(?i){name}(_\w*)?", body) is not None
                else:
                    bad = False
                if bad:
                    found.append(f"{rel}:{tok.start[0]}: {tok.string[:60]} names family {name!r}")
    return found


def test_no_file_outside_a_family_package_names_the_family():
    found = _violations()
    assert not found, "family named outside its package:\n" + "\n".join(found)


def test_the_check_sees_a_family_name_when_one_is_written(tmp_path):
    """The scan is not vacuous: a spine file that dispatches on a family name is reported with file:line."""
    spine = tmp_path / "ptm_jax"
    (spine / "train").mkdir(parents=True)
    (spine / "families").mkdir()
    (spine / "train" / "x.py").write_text('"""Mentions BERT in prose: allowed."""\n'
                                          'from ptm_jax.families.xlnet.plm import PlmObjective\n'
                                          'def f(cfg):\n    return cfg.family == "gpt"\n'
                                          'transfo_xl_lm = transfo = xl = 1\n')
    assert _violations(spine) == [
        "ptm_jax/train/x.py:2: xlnet names family 'xlnet'",
        "ptm_jax/train/x.py:2: PlmObjective names family 'xlnet'",
        "ptm_jax/train/x.py:4: \"gpt\" names family 'gpt'",
        "ptm_jax/train/x.py:5: transfo_xl_lm names family 'transfo_xl'"]
