"""The import graph of ``ptm_jax`` read from the source (no module is imported), its import circles (strongly
connected components of more than one module), and the imports written inside functions.

    python benchmarks/import_graph.py [--all] [--under ptm_jax.train,ptm_jax.objectives]

An edge A -> B is an import of B (or of a name from B) at module level of A; imports inside functions are
counted apart, and ``if TYPE_CHECKING:`` blocks are left out. ``from pkg import mod`` counts as an import of
``pkg.mod`` when that module exists. ``tests/test_import_graph.py`` asserts that the finetuning modules lie on no
circle.
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FINETUNING = ("ptm_jax.train.finetune", "ptm_jax.train.multi_task", "ptm_jax.train.pretrained",
              "ptm_jax.train.evaluation", "ptm_jax.objectives", "ptm_jax.jobs", "ptm_jax.data.tasks", "ptm_jax.adapters",
              "ptm_jax.models.san", "ptm_jax.models.text_heads")
"""The finetuning modules: these prefixes (a package prefix covers its modules)."""


def modules(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for p in sorted((root / "ptm_jax").rglob("*.py")):
        parts = list(p.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _resolve(mod: str, node: ast.ImportFrom, is_pkg: bool) -> str:
    if not node.level:
        return node.module or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(mod: str, node: ast.AST, known: dict[str, Path], is_pkg: bool) -> list[str]:
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = _resolve(mod, node, is_pkg)
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    out = []
    for n in names:
        while n and n not in known:  # 'ptm_jax.x.y.Name' -> the module that holds it
            n = n.rpartition(".")[0]
        if n.startswith("ptm_jax") and n != mod:
            out.append(n)
    return out


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def graph(root: Path = ROOT) -> tuple[dict[str, set[str]], dict[str, list[tuple[int, str]]]]:
    """-> (module-level edges, {module: [(line, target) of each import inside a function]})."""
    known = modules(root)
    edges: dict[str, set[str]] = {m: set() for m in known}
    inner: dict[str, list[tuple[int, str]]] = {m: [] for m in known}
    for mod, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_pkg = path.name == "__init__.py"

        def walk(node: ast.AST, in_function: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and _is_type_checking(child):
                    continue
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for t in _targets(mod, child, known, is_pkg):
                        if in_function:
                            inner[mod].append((child.lineno, t))
                        else:
                            edges[mod].add(t)
                walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

        walk(tree, False)
    return edges, inner


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted, largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10_000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out, key=lambda c: (-len(c), c))


def graph_with_inner(edges: dict[str, set[str]], inner: dict[str, list[tuple[int, str]]]) -> dict[str, set[str]]:
    """The edges with the imports inside functions added (what runs once every function has been called)."""
    return {m: edges[m] | {t for _, t in inner[m]} for m in edges}


def is_finetuning(mod: str) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in FINETUNING)


def finetuning_circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Circles that contain a finetuning module."""
    return [c for c in circles(edges) if any(is_finetuning(m) for m in c)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--all", action="store_true", help="list every circle, not only those of the finetuning modules")
    a = p.parse_args()
    edges, inner = graph()
    full = graph_with_inner(edges, inner)
    for label, g in (("module-level imports", edges), ("with the imports inside functions", full)):
        found = circles(g) if a.all else finetuning_circles(g)
        print(f"{label}: {len(circles(g))} circles in ptm_jax, {len(finetuning_circles(g))} through finetuning "
              f"modules")
        for c in found:
            print(f"  [{len(c)}] {' '.join(c)}")
    n_inner = sum(len(v) for v in inner.values())
    n_ft = sum(len(v) for m, v in inner.items() if is_finetuning(m))
    print(f"imports inside functions: {n_inner} in ptm_jax, {n_ft} in the finetuning modules")
    from ptm_jax.config import FinetuneConfig  # noqa: E402

    print(f"FinetuneConfig fields: {len(FinetuneConfig.__dataclass_fields__)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
