"""Text for the template: `code` spans split out of a sentence, and a docstring as paragraphs
and bullet lists (a tiny subset of Markdown; the template escapes everything)."""

from __future__ import annotations

import inspect
import re
from typing import Any

_CODE_RE = re.compile(r"`([^`]+)`")


def inline(text: str) -> list[dict[str, Any]]:
    """Text with `code` spans split out: [{"text": ..., "code": bool}]."""
    parts = []
    for i, piece in enumerate(_CODE_RE.split(text)):
        if piece:
            parts.append({"text": piece, "code": i % 2 == 1})
    return parts


def doc_blocks(doc: str) -> list[dict[str, Any]]:
    """A docstring as paragraphs and bullet lists (a tiny subset of Markdown, escaped later).

    Blank lines separate paragraphs; ``- `` or ``* `` starts a list item; indented lines after
    an item continue it; `backticks` mark code."""
    blocks: list[dict[str, Any]] = []
    para: list[str] = []
    items: list[str] = []

    def flush() -> None:
        if para:
            blocks.append({"kind": "p", "parts": inline(" ".join(para))})
            para.clear()
        if items:
            blocks.append({"kind": "list", "items": [inline(it) for it in items]})
            items.clear()

    for raw in inspect.cleandoc(doc or "").splitlines():
        s = raw.strip()
        if not s:
            flush()
        elif s.startswith(("- ", "* ")):
            if para:
                flush()
            items.append(s[2:].strip())
        elif items and raw[:1].isspace():
            items[-1] += " " + s
        else:
            if items:
                flush()
            para.append(s)
    flush()
    return blocks
