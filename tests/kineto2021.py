"""A built trace as PyTorch 1.8-1.10 (2021) Kineto wrote it, for tests that must hold on both
formats (not a test module).

In those files every CPU event is an ``Operator`` (ProfilerStep, user ranges and operators
alike), launches are ``Runtime``, GPU work ``Kernel``/``Memcpy``/``Memset``; there are no
``python_function`` frames (stacks, when recorded, sit on the operators: the builder's frames
around an operator become its ``Call stack``, innermost first) and no ``cuda_sync``
events; the launch link is ``external id`` (lower-case) on runtime and GPU events, thread ids
are strings and GPU events sit on ``"stream N"`` threads (see ``../shared/traces/kineto/
SOURCES.md``)::

    trace = load_2021(builder)
"""

from __future__ import annotations

import copy
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
_GPU = ("kernel", "gpu_memcpy", "gpu_memset")


def events_2021(b: TraceBuilder) -> dict[str, Any]:
    """``b``'s trace in the 2021 categories and argument spellings."""
    out = []
    frames = [e for e in b.events if e.get("cat") == "python_function"]
    for ev in copy.deepcopy(b.events):
        cat = ev.get("cat")
        if cat in ("python_function", "cuda_sync", "gpu_user_annotation"):
            continue
        if cat == "cpu_op" and frames:
            stack = _stack(frames, ev)
            if stack:
                ev.setdefault("args", {})["Call stack"] = stack
        if cat in CATEGORIES:
            ev["cat"] = CATEGORIES[cat]
        args = ev.get("args", {})
        if (cat == "cuda_runtime" or cat in _GPU) and "External id" in args:
            args["external id"] = args.pop("External id")
        if cat in _GPU:
            ev["tid"] = f"stream {args.get('stream', 7)}"
        elif "tid" in ev:
            ev["tid"] = str(ev["tid"])
        out.append(ev)
    return {**b.header, "traceEvents": out}


def load_2021(b: TraceBuilder) -> Trace:
    """The builder's trace, written the 2021 way, loaded through the normal path."""
    return load_bytes(json.dumps(events_2021(b)).encode(), "<builder-2021>")


def _stack(frames: list[dict[str, Any]], op: dict[str, Any]) -> str:
    """The frames of ``op``'s thread that hold it, innermost first, as a legacy call stack."""
    ts, end = op["ts"], op["ts"] + op.get("dur", 0)
    around = [
        f
        for f in frames
        if f.get("pid") == op.get("pid")
        and f.get("tid") == op.get("tid")
        and f["ts"] <= ts
        and end <= f["ts"] + f.get("dur", 0)
    ]
    around.sort(key=lambda f: (f["ts"], -f.get("dur", 0)))
    return ";".join(str(f["name"]) for f in reversed(around))
