"""Text for the template: `code` spans split out of a sentence, and a docstring as paragraphs
and bullet lists (a tiny subset of Markdown; the template escapes everything)."""

from __future__ import annotations

import datetime as dt
import inspect
import os
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


DATE_FORMAT = "%Y-%m-%d %H:%M UTC"  # the one date format of the reports


def date_str(text: str) -> str:
    """A date from a trace or run.json (ISO 8601, or "... UTC") in the reports' one format;
    text that is no date is shown as it is."""
    t = text.strip()
    utc = t.endswith(" UTC")
    try:
        when = dt.datetime.fromisoformat(t.removesuffix(" UTC") + ("+00:00" if utc else ""))
    except ValueError:
        return text
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.astimezone(dt.timezone.utc).strftime(DATE_FORMAT)


_COUNTED = re.compile(r"\b(\d[\d,.]*) ([A-Za-z][\w-]*?)\(s\)")


def counted(text: str) -> str:
    """ "6 step(s)" as "6 steps", "1 call(s)" as "1 call": the report says what it counted."""
    if "(s)" not in text:
        return text
    return _COUNTED.sub(lambda m: f"{m[1]} {m[2]}" + ("" if m[1] == "1" else "s"), text)


def shown_path(path: Any, report_dir: str | None) -> str | None:
    """A path as the report shows it: relative to the report's folder (a run folder moves
    and is shared as a whole) when it is inside it or near it (at most two folders up); as it
    is when it is relative already, far away (a long ``../../..`` reads worse) or there is no
    folder."""
    if not path:
        return None
    p = str(path)
    if report_dir and os.path.isabs(p):
        try:
            rel = os.path.relpath(p, os.path.abspath(report_dir))
        except ValueError:  # another drive (Windows)
            return p
        return rel if not rel.startswith(("../../../", "..\\..\\..\\")) else p
    return p
