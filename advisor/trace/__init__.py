"""Load PyTorch profiler (Kineto / Chrome) traces into normalized tables. Never imports torch.

Importing this package is cheap: pandas is imported when a trace is loaded or a table type is
used, so a command can start decoding (possibly in a child process) before paying for it.
Private: not an API; a detector reaches :class:`Trace` through :mod:`advisor.detect`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from advisor.trace.discover import find_traces, load_bytes, load_ranks, load_trace
    from advisor.trace.model import Device, Trace, TraceMeta

__all__ = [
    "Device",
    "Trace",
    "TraceMeta",
    "find_traces",
    "load_bytes",
    "load_ranks",
    "load_trace",
]


def __getattr__(name: str) -> Any:
    if name in ("Device", "Trace", "TraceMeta"):
        from advisor.trace import model

        return getattr(model, name)
    if name in ("find_traces", "load_bytes", "load_ranks", "load_trace"):
        from advisor.trace import discover

        return getattr(discover, name)
    raise AttributeError(f"module 'advisor.trace' has no attribute {name!r}")
