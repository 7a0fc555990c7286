"""The offline default corpus: English prose that ships with every Python install (docs/architecture.md,
"One run").

1. ``pydoc_data.topics.topics``: the language reference topics behind ``help()``, one document per topic
   (sorted by topic name). ``pydoc_data.topics`` is a pure data module, so importing it is safe.
2. Docstrings of the standard library's ``.py`` files, read with ``ast`` and never imported (``this`` and
   ``antigravity`` have import side effects). One document per module: module docstring, then class and
   function docstrings in source order. Files are walked in sorted order; ``site-packages``,
   ``dist-packages``, ``test``/``tests`` folders, ``idlelib/idle_test`` and ``__pycache__`` are skipped;
   files that fail to parse are counted, not fatal. Modules with fewer than 3 sentences are skipped.

Text is split into paragraphs at blank lines; reST heading underlines, indented blocks (code, grammar) and
``>>>`` doctest paragraphs are dropped; each remaining paragraph is split by ``split_sentences``.

Walking the standard library takes 5-9 s on a 2-core machine, once for the tokenizer and again for the token
cache, in every process that reads the corpus. The documents are therefore kept in memory for the process and in
a file under ``fs.user_cache_dir("embedded")`` (``$PTM_EMBEDDED_CACHE`` to move it), named by a digest of
everything they depend on: the Python version, the standard library's path and every file's size and mtime, and the
source of this module and of ``split_sentences``. Any change makes a new name, so a stale file is never read.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import sys
import sysconfig
from collections.abc import Iterable, Iterator
from pathlib import Path

from ptm_jax import digest, fs
from ptm_jax.data import corpus as _corpus_module
from ptm_jax.data.corpus import Document, split_sentences

MIN_MODULE_SENTENCES = 3
SKIP_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"})
_UNDERLINE = re.compile(r"^\s*([*=\-~^#+])\1{2,}\s*$")
_PARAGRAPHS = re.compile(r"\n[ \t]*\n")


def text_sentences(text: str) -> list[str]:
    """Sentences of reST-ish documentation text (see the module docstring for what is dropped)."""
    out: list[str] = []
    for para in _PARAGRAPHS.split(text):
        lines = [ln for ln in para.split("\n") if ln.strip() and not _UNDERLINE.match(ln)]
        if not lines or lines[0].startswith(("   ", "\t")) or lines[0].lstrip().startswith(">>>"):
            continue
        out.extend(split_sentences(" ".join(lines)))
    return out


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: Path | None = None) -> list[Path]:
    """The standard library's .py files in a deterministic (sorted) order, test folders excluded."""
    root = root or stdlib_root()
    files: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        files.extend(Path(dirpath, f) for f in sorted(filenames) if f.endswith(".py"))
    return files


def module_docstrings(tree: ast.Module) -> list[str]:
    """Module docstring, then class/function docstrings depth-first in source order."""
    out: list[str] = []

    def visit(node: ast.AST) -> None:
        doc = ast.get_docstring(node, clean=True)  # type: ignore[arg-type]
        if doc:
            out.append(doc)
        for child in getattr(node, "body", []):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child)
            elif isinstance(child, (ast.If, ast.Try, ast.With)):  # definitions under `if`/`try` blocks
                for sub in ast.iter_child_nodes(child):
                    if isinstance(sub, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                        visit(sub)

    visit(tree)
    return out


def _topic_documents() -> Iterator[Document]:
    from pydoc_data.topics import topics

    for name in sorted(topics):
        doc = text_sentences(topics[name])
        if doc:
            yield doc


def _module_documents(stats: dict) -> Iterator[Document]:
    for path in stdlib_files():
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError, UnicodeDecodeError, OSError):
            stats["parse_failures"] += 1
            continue
        doc = [s for d in module_docstrings(tree) for s in text_sentences(d)]
        if len(doc) < MIN_MODULE_SENTENCES:
            stats["short_modules"] += 1
            continue
        yield doc


def embedded_documents(stats: dict | None = None) -> Iterator[Document]:
    """Topic documents, then one document per standard-library module; deterministic for a given Python.
    ``stats`` (optional) receives counts of parse failures and skipped short modules."""
    docs, counts = _documents()
    if stats is not None:
        for key, value in counts.items():
            stats[key] = stats.get(key, 0) + value
    yield from docs


_MEMO: dict[str, tuple[list[Document], dict]] = {}


def _cache_key() -> str:
    """A digest of everything the documents depend on (see the module docstring)."""
    h = hashlib.sha256()
    h.update(f"{sys.version}\n{stdlib_root()}\n".encode())
    for source in (__file__, _corpus_module.__file__):
        h.update(Path(source).read_bytes())
    from pydoc_data import topics

    for path in [Path(topics.__file__), *stdlib_files()]:
        st = path.stat()
        h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:32]


def cache_file(key: str | None = None) -> Path:
    root = os.environ.get("PTM_EMBEDDED_CACHE")
    return (Path(root) if root else fs.user_cache_dir("embedded")) / f"{key or _cache_key()}.jsonl"


def _documents() -> tuple[list[Document], dict]:
    key = _cache_key()
    if key in _MEMO:
        return _MEMO[key]
    path = cache_file(key)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        counts, docs = json.loads(lines[0]), [json.loads(line) for line in lines[1:]]
    except (OSError, ValueError, IndexError):  # absent or unreadable: walk the standard library again
        counts = {"parse_failures": 0, "short_modules": 0}
        docs = [*_topic_documents(), *_module_documents(counts)]
        text = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in [counts, *docs])
        try:
            fs.write_text_atomic(path, text)
        except OSError:  # a read-only home: the corpus is still right, only not kept
            pass
    _MEMO[key] = (docs, counts)
    return docs, counts


def document_digest(documents: Iterable[Document]) -> str:
    """sha256 of documents (``digest.update_nested``: each its sentence count, then its sentences, length-prefixed):
    equal digests, equal corpora."""
    h = hashlib.sha256()
    digest.update_nested(h, documents)
    return h.hexdigest()


def embedded_corpus_stats() -> dict:
    """{'documents', 'sentences', 'characters', 'parse_failures', 'short_modules', 'sha256'} of the embedded
    corpus ('sha256' is ``document_digest`` of all its documents)."""
    stats: dict = {}
    counts = {"documents": 0, "sentences": 0, "characters": 0}

    def counted():
        for doc in embedded_documents(stats):
            counts["documents"] += 1
            counts["sentences"] += len(doc)
            counts["characters"] += sum(map(len, doc))
            yield doc

    digest = document_digest(counted())
    return {**counts, **stats, "sha256": digest}
