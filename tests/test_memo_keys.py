"""Keys of ``Trace.memo`` are named ``<module>.<name>`` (ARCHITECTURE.md): the module that
builds the fact (its file name without the leading underscore), then what it is. Two modules
never share a key by accident, and a key says where its value comes from. Checked on every
``.memo(...)`` call in ``advisor/`` and ``heuristics/`` whose key is a literal or an f-string."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO


def memo_keys() -> list[tuple[Path, int, str]]:
    """(file, line, the key's literal text up to its first placeholder) of each memo call."""
    out = []
    for root in ("advisor", "heuristics"):
        for path in sorted((REPO / root).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "memo"
                    and node.args
                ):
                    continue
                key = node.args[0]
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    out.append((path, node.lineno, key.value))
                elif isinstance(key, ast.JoinedStr):
                    head = key.values[0] if key.values else None
                    text = head.value if isinstance(head, ast.Constant) else ""
                    out.append((path, node.lineno, str(text)))
    return out


def test_there_are_memo_keys() -> None:
    assert len(memo_keys()) > 30


def test_memo_keys_are_module_dot_name() -> None:
    bad = []
    for path, line, key in memo_keys():
        module = path.stem.lstrip("_")
        if not (key.startswith(module + ".") and len(key) > len(module) + 1):
            bad.append(f"{path.relative_to(REPO)}:{line}: {key!r} (want '{module}.<name>')")
    assert not bad, "\n".join(bad)


def test_memo_keys_are_unique() -> None:
    seen: dict[str, str] = {}
    dup = []
    for path, line, key in memo_keys():
        where = f"{path.relative_to(REPO)}:{line}"
        if key in seen:
            dup.append(f"{key!r}: {seen[key]} and {where}")
        seen[key] = where
    assert not dup, "\n".join(dup)
