"""docs/layout.md names every module under ptm_jax/ and no module that is not there.

The page lists modules under one heading per folder (``### `ptm_jax/data/tasks/` ``), one bullet per file
(``- `glue.py`: ...``). Modules are the ``.py`` files (a package's ``__init__.py`` only when the page lists it)
and the C++ sources (``.cc``, ``.h``) beside them.
"""
import re

from conftest import REPO

LAYOUT = REPO / "docs/layout.md"
SOURCE = re.compile(r"\.(py|cc|h)$")


def _listed() -> set[str]:
    listed, folder = set(), None
    for line in LAYOUT.read_text().splitlines():
        heading = re.match(r"### `(ptm_jax/(?:[^`]*/)?)`$", line)
        if heading:
            folder = heading.group(1)
            continue
        bullet = re.match(r"- `([^`/]+)`:", line)
        if bullet and folder:
            listed.add(folder + bullet.group(1))
    return listed


def _on_disk() -> set[str]:
    return {p.relative_to(REPO).as_posix() for p in (REPO / "ptm_jax").rglob("*")
            if p.is_file() and SOURCE.search(p.name) and "__pycache__" not in p.parts}


def test_layout_names_every_module_on_disk():
    listed = _listed()
    missing = sorted(p for p in _on_disk() - listed if not p.endswith("/__init__.py"))
    assert not missing, ("docs/layout.md does not name these modules; add a line `- `NAME`: what it holds` "
                         f"under the heading of its folder: {missing}")


def test_layout_names_no_module_that_is_gone():
    gone = sorted(_listed() - _on_disk())
    assert not gone, f"docs/layout.md names modules that do not exist (remove or rename their lines): {gone}"


def test_layout_lists_every_package_folder():
    folders = {p.parent.relative_to(REPO).as_posix() + "/" for p in (REPO / "ptm_jax").rglob("*.py")
               if "__pycache__" not in p.parts}
    headings = set(re.findall(r"^### `(ptm_jax/(?:[^`]*/)?)`$", LAYOUT.read_text(), re.M))
    assert folders <= headings, f"folders without a heading in docs/layout.md: {sorted(folders - headings)}"
    assert len(_listed()) > 150
