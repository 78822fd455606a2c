"""Repairs of the JSON torch's profiler writes, made right after the export.

**Unescaped quotes in Python frame names.** Kineto writes a ``python_function`` event's name
(``<file>(<line>): <function>``) into the trace without escaping it, so a ``"`` in a source file's
name (the script's own, ``a"b.py``, or a module's) makes the whole trace invalid JSON: no report
could be made from it. The export writes one key per line (``"name": "...",``); on the lines of a
``"name"`` key, every ``"`` inside the value that is not escaped is escaped. The file is read and
rewritten only when a loaded module's file name holds a ``"`` (:func:`needs_repair`), so the
common case costs nothing.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

_NAME_LINE = re.compile(rb'^(\s*"name": ")(.*)("\s*,?\s*)$', re.DOTALL)
_BARE_QUOTE = re.compile(rb'(?<!\\)"')


def needs_repair() -> bool:
    """Whether a loaded module's (or the script's) file name holds a ``"``."""
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if isinstance(f, str) and '"' in f:
            return True
    return any('"' in a for a in sys.argv[:1])


def repair_line(line: bytes) -> bytes:
    """One line of the export, with the bare quotes inside a ``"name"`` value escaped."""
    m = _NAME_LINE.match(line)
    if m is None or b'"' not in m.group(2):
        return line
    value = _BARE_QUOTE.sub(rb'\\"', m.group(2))
    return line if value == m.group(2) else m.group(1) + value + m.group(3)


def repair_names(path: Path) -> int:
    """Rewrite ``path`` (an exported trace, plain JSON) with its ``"name"`` values escaped; the
    number of lines changed (the file is left as it was when none is)."""
    tmp = path.with_name(path.name + ".fix")
    changed = 0
    try:
        with open(path, "rb") as src, open(tmp, "wb") as dst:
            for line in src:
                fixed = repair_line(line)
                changed += fixed is not line
                dst.write(fixed)
        if changed:
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return changed
