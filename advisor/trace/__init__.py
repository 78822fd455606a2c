"""Load PyTorch profiler (Kineto / Chrome) traces into normalized tables. Never imports torch."""

from __future__ import annotations

from advisor.trace.discover import find_traces, load_bytes, load_trace
from advisor.trace.model import Device, Trace, TraceMeta

__all__ = ["Device", "Trace", "TraceMeta", "find_traces", "load_bytes", "load_trace"]
