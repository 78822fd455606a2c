"""CUDA/HIP runtime calls by what they do to the host: which calls wait for the device (syncs),
which copy memory (synchronously or not), which launch kernels or other GPU work, which are bookkeeping that may sit between a copy and
its wait; and how far the host and GPU clocks may disagree. Read by the replay's graph
(:mod:`advisor.replay.model`) and by the detectors (``heuristics/_syncs.py``, blocking-copy,
host-tensor-creation), so all of them agree on what a sync is."""

from __future__ import annotations

import re

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
    r"^(cu|hip)(da)?(LaunchKernel|ExtLaunch|LaunchCooperative|ModuleLaunch)"
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
