"""Text from a trace or a file name, made safe to print on a terminal.

Kernel, op, device and file names come from the trace (or the file system) and can hold
anything: ESC sequences that recolour, move the cursor, retitle the window or hide text,
newlines that forge output lines, bidi overrides that reorder what is shown. :func:`printable`
shows every such character as a Python-style escape (``\\x1b``, ``\\n``, ``\\u202e``) and leaves
all other text as it is; terminal output never goes through rich markup either, so
``k[/oops]`` prints as ``k[/oops]``. :func:`displayable` removes the same characters (tab,
newline and carriage return aside) from text a page shows: report.html and try.html.
"""

from __future__ import annotations

import re

# C0 controls (tab and newline too: one name stays one cell, one line), DEL, C1 controls,
# and the bidi embedding/override/isolate marks
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: object) -> str:
    """``str(text)`` with control and bidi characters escaped."""
    s = str(text)
    return _UNSAFE.sub(_escape, s) if _UNSAFE.search(s) else s


# what a page shows: the same, but tab, newline and carriage return (whitespace in HTML)
_HIDDEN = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def displayable(text: str) -> str:
    """``text`` without control and bidi characters (kept verbatim in findings.json)."""
    return _HIDDEN.sub("", text) if _HIDDEN.search(text) else text


# terminal escape sequences: CSI (colours, cursor moves), OSC (window titles, links; ended by BEL
# or ST) and the two-byte ESC sequences
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")


def without_escapes(text: str) -> str:
    """``text`` with terminal escape sequences removed (an exception message a script coloured
    for its terminal, copied into run.json and the report): the words stay, the codes go."""
    return _ESCAPES.sub("", text) if "\x1b" in text else text
