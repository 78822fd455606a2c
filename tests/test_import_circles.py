"""No two modules of ``advisor/`` (or ``heuristics/``) import each other, directly or through
others (ARCHITECTURE.md): an import inside a function and one only for typing count too. A
package's ``__init__`` is left out, since importing a package's module runs it first."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_layers import ALL


def _imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of this tree that ``module`` imports (``from pkg import mod`` imports
    ``pkg.mod``; ``from pkg import name`` imports ``pkg``)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            for a in node.names:
                out.add(f"{name}.{a.name}" if f"{name}.{a.name}" in known else name)
    return out


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of ``graph`` with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _graph(found: dict[str, Path]) -> dict[str, set[str]]:
    modules = {m: p for m, p in found.items() if p.name != "__init__.py"}
    return {
        m: {d for d in _imports(m, p, found) if d in modules and d != m} for m, p in modules.items()
    }


def test_no_module_imports_itself_through_others() -> None:
    assert circles(_graph(ALL)) == []


def test_the_check_sees_a_circle_made_by_a_lazy_or_typing_import(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    a.write_text("def f():\n    from advisor.x.b import g\n")
    b.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from advisor.x import c\n"
    )
    c.write_text("from advisor.x.a import f\n")
    found = {"advisor.x.a": a, "advisor.x.b": b, "advisor.x.c": c}
    assert circles(_graph(found)) == [["advisor.x.a", "advisor.x.b", "advisor.x.c"]]
