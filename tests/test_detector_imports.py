"""No detector imports another detector (ARCHITECTURE.md, "Where new code goes"): a detector
module in ``heuristics/`` imports only the shared ``_*.py`` modules beside it and the layers
below (``advisor.derive``, ``advisor.detect``...); a fact two detectors need lives in the
``_*.py`` or ``advisor/derive/`` module that owns it. Checked on every import statement, at
the top of the module or inside a function, relative (``from .x import``) or absolute
(``advisor.detectors.x``, ``heuristics.x``)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

HEURISTICS = REPO / "heuristics"
PACKAGES = ("advisor.detectors", "heuristics")


def detector_modules() -> list[Path]:
    return sorted(p for p in HEURISTICS.glob("*.py") if not p.name.startswith("_"))


def imported_detectors(path: Path) -> list[str]:
    """The detector modules (no leading underscore) that ``path`` imports."""
    names = {p.stem for p in detector_modules()}
    found: list[str] = []

    def check(module: str) -> None:
        head = module.split(".")[0]
        if head in names:
            found.append(head)

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:  # from .x import y / from . import x
                if node.module:
                    check(node.module)
                else:
                    for a in node.names:
                        check(a.name)
            elif node.level == 0 and node.module:
                for pkg in PACKAGES:
                    if node.module == pkg:
                        for a in node.names:
                            check(a.name)
                    elif node.module.startswith(pkg + "."):
                        check(node.module[len(pkg) + 1 :])
        elif isinstance(node, ast.Import):
            for a in node.names:
                for pkg in PACKAGES:
                    if a.name.startswith(pkg + "."):
                        check(a.name[len(pkg) + 1 :])
    return sorted(set(found) - {path.stem})


def test_there_are_detector_modules() -> None:
    assert len(detector_modules()) > 20


def test_no_detector_imports_another_detector() -> None:
    bad = {p.name: imported_detectors(p) for p in detector_modules()}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"detectors importing detectors (move the shared fact to a _*.py module): {bad}"


def test_shared_modules_import_no_detector() -> None:
    """A ``_*.py`` module is below the detectors: it imports none of them either."""
    shared = sorted(p for p in HEURISTICS.glob("_*.py") if p.name != "__init__.py")
    bad = {p.name: imported_detectors(p) for p in shared}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"shared modules importing detectors: {bad}"
