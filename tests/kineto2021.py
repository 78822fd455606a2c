"""A built trace as PyTorch 1.8-1.10 (2021) Kineto wrote it, for tests that must hold on both.

Those traces name their categories ``Operator`` (operators and the ``ProfilerStep#N`` ranges),
``Runtime``, ``Kernel``, ``Memcpy``, ``Memset``; write the launch link as ``external id``
(lower-case) on runtime and GPU events; and give thread ids as strings, GPU events on
``"stream N"`` threads (see ``../shared/traces/kineto/SOURCES.md``)::

    trace = load_2021(builder)
"""

from __future__ import annotations

import copy
import json
from typing import Any

from advisor.trace import Trace, load_bytes
from tests.tracebuilder import TraceBuilder

_CATS = {
    "cpu_op": "Operator",
    "cuda_runtime": "Runtime",
    "kernel": "Kernel",
    "gpu_memcpy": "Memcpy",
    "gpu_memset": "Memset",
}


def events_2021(b: TraceBuilder) -> list[dict[str, Any]]:
    """The builder's events in the 2021 categories and argument spellings."""
    out = []
    for ev in copy.deepcopy(b.events):
        cat = ev.get("cat")
        if cat == "user_annotation" and str(ev.get("name", "")).startswith("ProfilerStep#"):
            ev["cat"] = "Operator"
        elif cat in _CATS:
            ev["cat"] = _CATS[cat]
        args = ev.get("args", {})
        if cat in ("cuda_runtime", "kernel", "gpu_memcpy", "gpu_memset") and "External id" in args:
            args["external id"] = args.pop("External id")
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            ev["tid"] = f"stream {args.get('stream', 7)}"
        elif "tid" in ev:
            ev["tid"] = str(ev["tid"])
        out.append(ev)
    return out


def load_2021(b: TraceBuilder) -> Trace:
    """The builder's trace, written the 2021 way, loaded through the normal path."""
    data = {**b.header, "traceEvents": events_2021(b)}
    return load_bytes(json.dumps(data).encode(), "<builder 2021>")
