"""CUDA/HIP runtime calls by what they do to the host: which calls wait for the device (syncs),
which copy memory (synchronously or not), which launch kernels, graphs or other GPU work, which allocate memory, which are bookkeeping that may sit between a copy and
its wait; which are recorded into a CUDA/HIP graph (stream capture); and how far the host and GPU
clocks may disagree. Read by the replay's graph
(:mod:`advisor.replay.model`) and by the detectors (``heuristics/_syncs.py``, blocking-copy,
host-tensor-creation), so all of them agree on what a sync is."""

from __future__ import annotations

import re

import numpy as np

from advisor.trace.model import Trace
from advisor.trace.names import name_flags

# an explicit wait for the device: a stream, device, event, context or thread sync
SYNC_CALL_RE = re.compile(
    r"^(?:cuda|hip)(?:Stream|Device|Event|Ctx|Thread)Synchronize$|^cu(?:Stream|Ctx|Event)Synchronize$"
)
# the syncs that wait for every stream of the device
DEVICE_SYNC_RE = re.compile(r"^(?:cuda|hip)(?:Device|Ctx|Thread)Synchronize$|^cuCtxSynchronize$")
# synchronous copy calls: the host returns when the copy is done (cudaMemcpy, cudaMemcpy2D,
# cudaMemcpyToSymbol, cudaMemcpyFromArray, cudaMemcpyPeer, hipMemcpyDtoH, hipMemcpyWithStream...)
SYNC_COPY_RE = re.compile(
    r"^(?:cuda|hip)Memcpy(?:2D|3D)?"
    r"(?:ToSymbol|FromSymbol|ToArray|FromArray|Peer|HtoD|DtoH|DtoD|WithStream)?$"
)
ASYNC_COPY_RE = re.compile(r"^(?:cuda|hip)Memcpy(?:2D|3D|Peer)?Async$")
# any copy call, synchronous or not
COPY_CALL_RE = re.compile(r"^(?:cuda|hip)Memcpy")
# runtime calls that may sit between a copy and the wait that belongs to it
BOOKKEEPING_CALLS = frozenset(
    f"{p}{n}"
    for p in ("cuda", "hip")
    for n in (
        "StreamIsCapturing",
        "GetLastError",
        "PeekAtLastError",
        "GetDevice",
        "SetDevice",
        "EventRecord",
        "EventQuery",
    )
)
# kernel launch calls (cudaLaunchKernel, cuLaunchKernel, hipExtLaunchKernel, hipModuleLaunchKernel,
# cudaLaunchCooperativeKernel...)
KERNEL_LAUNCH_RE = re.compile(
    r"^(cu|hip)(da)?(LaunchKernel|ExtLaunch|LaunchCooperative|ModuleLaunch|ExtModuleLaunch)"
)
# CUDA/HIP graph launches (one call replays a whole captured graph)
GRAPH_LAUNCH_RE = re.compile(r"^(?:cuda|hip|cu)GraphLaunch")
# calls of the device-memory and pinned-host-memory allocator that go to the driver (not the
# stream-ordered cudaMallocAsync/cudaFreeAsync, which come from a pool)
ALLOCATOR_CALL_RE = re.compile(
    r"^(cu|hip)(da)?(Malloc|Free|MemAlloc|MemFree|HostAlloc|MallocHost|FreeHost|HostMalloc|"
    r"HostFree|MallocManaged|MemAllocHost|MemFreeHost)(_v2)?$"
)
# every call that puts GPU work in a queue (name parts): kernel and graph launches, async copies
# and memsets
GPU_WORK_CALL_PARTS = (
    "LaunchKernel",
    "GraphLaunch",
    "LaunchCooperativeKernel",
    "MemcpyAsync",
    "MemsetAsync",
    "ModuleLaunchKernel",
    "ExtLaunchKernel",
)
# GPU work seen ending this soon after a sync returned had finished by then (host and GPU
# clocks are aligned only this well)
CLOCK_TOL_NS = 20_000


def is_sync_call(name: str) -> bool:
    """An explicit wait for the device: a stream, device, event, context or thread sync."""
    return SYNC_CALL_RE.match(name) is not None


# stream capture (CUDA/HIP graphs): calls between a stream's BeginCapture and EndCapture record
# graph nodes; nothing runs on the GPU until the graph is launched
CAPTURE_BEGIN_RE = re.compile(r"^(?:cuda|hip|cu)StreamBeginCapture")
CAPTURE_END_RE = re.compile(r"^(?:cuda|hip|cu)StreamEndCapture")


def capture_spans(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(thread, start, end) of each stream-capture range: from a BeginCapture call to the next
    EndCapture call on the same thread (to the end of the trace when none follows)."""
    return trace.memo("runtime.capture_spans", lambda: _capture_spans(trace))


def _capture_spans(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rt = trace.runtime
    empty = np.zeros(0, np.int64)
    if not len(rt):
        return empty, empty, empty
    begin = name_flags(rt["name"], lambda n: CAPTURE_BEGIN_RE.match(n) is not None)
    if not begin.any():
        return empty, empty, empty
    end = name_flags(rt["name"], lambda n: CAPTURE_END_RE.match(n) is not None)
    tid, ts, stop = rt["tid"].to_numpy(), rt["ts_ns"].to_numpy(), rt["end_ns"].to_numpy()
    last = int(max(stop.max(), ts.max()))
    out_t, out_s, out_e = [], [], []
    for b in np.flatnonzero(begin):
        later = np.flatnonzero(end & (tid == tid[b]) & (ts >= ts[b]))
        out_t.append(int(tid[b]))
        out_s.append(int(ts[b]))
        out_e.append(int(stop[later[np.argmin(ts[later])]]) if len(later) else last)
    return np.array(out_t), np.array(out_s), np.array(out_e)


def in_capture(trace: Trace, tid: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Whether each (thread, time) lies inside a stream-capture range of its thread."""
    ct, cs, ce = capture_spans(trace)
    out = np.zeros(len(ts), dtype=bool)
    for t, s, e in zip(ct.tolist(), cs.tolist(), ce.tolist(), strict=True):
        out |= (tid == t) & (ts >= s) & (ts <= e)
    return out
