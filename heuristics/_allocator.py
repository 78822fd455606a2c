"""Device-memory allocator calls inside the steady steps (shared by allocator-churn and gpu-idle).

A caching allocator that works as intended calls ``cudaMalloc``/``cudaFree`` (``hipMalloc``/
``hipFree`` on ROCm) only while its pool grows, in the first iterations: that is
``one-time-init``'s. A call inside a steady step means memory went back to the driver and is
requested again (``torch.cuda.empty_cache()`` in the loop, ``PYTORCH_NO_CUDA_MEMORY_CACHING=1``,
shapes that keep changing) or a pinned host buffer is allocated every step. Stream-ordered
calls (``cudaMallocAsync``/``cudaFreeAsync``) come from a pool and are not counted.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from advisor.arrays import unique_ints
from advisor.derive.runtime import ALLOCATOR_CALL_RE
from advisor.derive.timeline import subtract, union
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

CALL_RE = ALLOCATOR_CALL_RE  # which calls are the allocator's: advisor.derive.runtime
FREE_RE = re.compile(r"Free")
HOST_RE = re.compile(r"Host")


def is_allocator_call(name: str) -> bool:
    return bool(CALL_RE.match(name))


def allocator_calls(trace: Trace) -> pd.DataFrame:
    """Runtime rows of allocator calls inside the steps."""
    return trace.memo("allocator.calls", lambda: _calls(trace))


def _calls(trace: Trace) -> pd.DataFrame:
    rt = trace.runtime
    if not len(rt):
        return rt
    hit = name_flags(rt["name"], is_allocator_call) & (rt["step"].to_numpy() >= 0)
    return rt[hit]


def allocator_spans(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """The allocator calls inside steps as disjoint sorted intervals (host time)."""
    calls = allocator_calls(trace)
    if not len(calls):
        empty = np.zeros(0, np.int64)
        return empty, empty
    return union(calls["ts_ns"].to_numpy(np.int64), calls["end_ns"].to_numpy(np.int64))


def without_allocator(
    trace: Trace, starts: np.ndarray, ends: np.ndarray, tids: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Host ranges (per thread when ``tids`` is given) less the allocator calls inside them:
    what a fix other than allocator-churn's can shrink."""
    a_s, a_e = allocator_spans(trace)
    if tids is None:
        s, e = subtract(*union(starts, ends), a_s, a_e)
        return s, e, None
    parts = []
    for t in unique_ints(tids):
        m = tids == t
        s, e = subtract(*union(starts[m], ends[m]), a_s, a_e)
        parts.append((s, e, np.full(len(s), t, dtype=np.asarray(tids).dtype)))
    if not parts:
        return starts, ends, tids
    return tuple(np.concatenate(p) for p in zip(*parts, strict=True))  # type: ignore[return-value]
