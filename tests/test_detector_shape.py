"""Every detector's ``detect()`` reads as measure -> value -> draft: short enough to read at a
glance, with the facts, the saving and the text in named functions of its module
(ARCHITECTURE.md, "Detectors"). Limits: none over 80 lines, the median at most 45."""

from __future__ import annotations

import ast
import statistics
from pathlib import Path

from tests.conftest import REPO

MAX_LINES = 80
MEDIAN_LINES = 45


def _detect_lengths() -> dict[str, int]:
    out = {}
    for path in sorted((REPO / "heuristics").glob("*.py")):
        if path.name.startswith("_"):
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and node.name == "detect":
                assert node.end_lineno is not None
                out[path.name] = node.end_lineno - node.lineno + 1
    return out


def test_every_detector_module_has_a_detect() -> None:
    lengths = _detect_lengths()
    modules = {p.name for p in Path(REPO / "heuristics").glob("[!_]*.py")}
    assert set(lengths) == modules, sorted(modules - set(lengths))


def test_detect_is_short() -> None:
    lengths = _detect_lengths()
    long = {name: n for name, n in lengths.items() if n > MAX_LINES}
    assert not long, f"detect() over {MAX_LINES} lines: {long}"
    assert statistics.median(lengths.values()) <= MEDIAN_LINES, sorted(lengths.items())
