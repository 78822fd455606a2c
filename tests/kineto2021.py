"""A built trace as torch.profiler wrote it in 2021 (Kineto's first categories), for tests
that must hold on both formats (not a test module).

In those files every CPU event is an ``Operator`` (ProfilerStep, user ranges and operators
alike), launches are ``Runtime``, GPU work ``Kernel``/``Memcpy``/``Memset``; there are no
``python_function`` frames (stacks, when recorded, sit on the operators) and no ``cuda_sync``
events."""

from __future__ import annotations

import json
from typing import Any

from advisor.trace import Trace, load_bytes
from tests.tracebuilder import TraceBuilder

CATEGORIES = {
    "cpu_op": "Operator",
    "user_annotation": "Operator",
    "cuda_runtime": "Runtime",
    "kernel": "Kernel",
    "gpu_memcpy": "Memcpy",
    "gpu_memset": "Memset",
}


def events_2021(b: TraceBuilder) -> dict[str, Any]:
    """``b``'s trace in 2021 categories."""
    out = []
    for ev in b.events:
        cat = ev.get("cat")
        if cat in ("python_function", "cuda_sync", "gpu_user_annotation"):
            continue
        ev = dict(ev)
        if cat in CATEGORIES:
            ev["cat"] = CATEGORIES[cat]
        out.append(ev)
    return {**b.header, "traceEvents": out}


def load_2021(b: TraceBuilder) -> Trace:
    return load_bytes(json.dumps(events_2021(b)).encode(), "<builder-2021>")
