"""Shared helpers for the checklist-A detectors (copies, tensor creation, zero_grad, conv layout).

Not a detector (leading underscore). Pure functions over the trace tables; no detector state.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd

from advisor.findings import Location
from advisor.registry import Context
from advisor.timeline import union
from advisor.trace.model import Trace
from heuristics import _gpu_timeline
from heuristics._gpu_timeline import Busy
from heuristics._gpu_timeline import ms as ms  # re-exported for detectors
from heuristics._gpu_timeline import n_steps as n_steps

# ops of the convolution family, forward and backward (aten::conv2d, aten::_convolution,
# aten::cudnn_convolution, aten::convolution_backward, CudnnConvolutionBackward0, ...)
CONV_RE = re.compile(r"conv(?:\d|_|olution)", re.IGNORECASE)
# the forward entry points whose Input Dims are (input, weight, bias, ...)
CONV_FWD_OPS = frozenset(
    f"aten::{n}"
    for n in (
        "conv1d",
        "conv2d",
        "conv3d",
        "convolution",
        "_convolution",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
    )  # fmt: skip
)
# cuDNN/MIOpen layout conversion kernels (NCHW <-> NHWC)
LAYOUT_KERNEL_RE = re.compile(r"nchw_?2_?nhwc|nhwc_?2_?nchw|nchwtonhwc|nhwctonchw", re.IGNORECASE)
WAIT_CALLS = frozenset(
    f"{p}{n}"
    for p in ("cuda", "hip")
    for n in ("StreamSynchronize", "DeviceSynchronize", "EventSynchronize", "ThreadSynchronize")
)
SYNC_COPY_RE = re.compile(r"^(cuda|hip)Memcpy(2D|3D)?(ToSymbol|FromSymbol|WithStream)?$")
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
    )  # fmt: skip
)
COPY_CALL_RE = re.compile(r"^(cuda|hip)Memcpy")


def per_step_words(trace: Trace) -> str:
    """ "per step", or how the figure reads when the trace has no step markers."""
    if trace.meta.synthetic_steps:
        return "in the trace (no ProfilerStep markers: counted as one step)"
    return "per step"


def in_steps(df: pd.DataFrame, trace: Trace) -> pd.DataFrame:
    """Rows inside a profiled step (all rows when the whole trace is one synthetic step)."""
    if trace.meta.synthetic_steps or "step" not in df:
        return df
    return df[df["step"].to_numpy() >= 0]


def issuing_ops(trace: Trace) -> np.ndarray:
    """For each runtime row, the cpu_ops row that issued it, or -1: the loader's ``op_idx``
    (matched by External id only when that op encloses the call, else by time)."""
    return trace.runtime["op_idx"].to_numpy(dtype=np.int64)


def ancestor_match(trace: Trace, pred: Callable[[str], bool]) -> np.ndarray:
    """Per cpu_ops row: the op or one of its ancestors has a name for which ``pred`` holds."""
    ops = trace.cpu_ops
    if not len(ops):
        return np.zeros(0, dtype=bool)
    cat = ops["name"].astype("category")
    hits = np.array([bool(pred(str(n))) for n in cat.cat.categories], dtype=bool)
    base = hits[cat.cat.codes.to_numpy()] if len(hits) else np.zeros(len(ops), bool)
    return under(trace, base)


def name_flags(names: pd.Series, pred: Callable[[str], bool]) -> np.ndarray:
    """Per row: ``pred(str(name))``, evaluated once per distinct name; a missing name reads
    "nan", as ``astype(str)`` writes a missing category."""
    return _gpu_timeline.name_flags(names, pred, missing=bool(pred("nan")))


def under(trace: Trace, base: np.ndarray) -> np.ndarray:
    """Per cpu_ops row: ``base`` holds for the op or one of its ancestors."""
    ops = trace.cpu_ops
    match = np.array(base, dtype=bool, copy=True)
    if not len(ops):
        return match
    parent = ops["parent_idx"].to_numpy()
    depth = ops["depth"].to_numpy()
    order = np.argsort(depth, kind="stable")
    d_sorted = depth[order]
    for d in range(1, int(depth.max()) + 1):
        lo, hi = np.searchsorted(d_sorted, [d, d + 1])
        rows = order[lo:hi]
        rows = rows[parent[rows] >= 0]
        match[rows] |= match[parent[rows]]
    return match


def gpu_rows_from(trace: Trace, df: pd.DataFrame, op_mask: np.ndarray) -> np.ndarray:
    """Mask over kernels/memcpy rows ``df`` launched by an op for which ``op_mask`` holds."""
    if not len(df) or not len(op_mask):
        return np.zeros(len(df), dtype=bool)
    op_of_rt = issuing_ops(trace)
    if not len(op_of_rt):  # GPU work but no launch calls in the trace (e.g. a cut trace)
        return np.zeros(len(df), dtype=bool)
    li = df["launch_idx"].to_numpy()
    op = np.where(li >= 0, op_of_rt[np.clip(li, 0, max(len(op_of_rt) - 1, 0))], -1)
    return (op >= 0) & op_mask[np.clip(op, 0, None)]


def main_gpu(trace: Trace) -> int | None:
    act = trace.gpu_activity()
    if not len(act):
        return None
    busy = (act["end_ns"] - act["ts_ns"]).groupby(act["device"]).sum()
    return int(busy.idxmax())


def busy_union(
    trace: Trace, device: int | None = None, kinds: Iterable[str] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint busy intervals of one device (kinds from gpu_activity: kernel/comm/memcpy/memset)."""
    act = trace.gpu_activity()
    if not len(act):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if device is not None:
        act = act[act["device"].to_numpy() == device]
    if kinds is not None:
        act = act[act["kind"].isin(list(kinds)).to_numpy()]
    return union(act["ts_ns"].to_numpy(), act["end_ns"].to_numpy())


def covered(bs: np.ndarray, be: np.ndarray, lo: int, hi: int) -> int:
    """Nanoseconds of [lo, hi) covered by disjoint sorted intervals (bs, be)."""
    if hi <= lo or not len(bs):
        return 0
    i = int(np.searchsorted(be, lo, side="right"))
    j = int(np.searchsorted(bs, hi, side="left"))
    if j <= i:
        return 0
    s = np.clip(bs[i:j], lo, hi)
    e = np.clip(be[i:j], lo, hi)
    return int(np.sum(np.maximum(e - s, 0)))


def idle_in_spans(
    bs: np.ndarray, be: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[int, int]:
    """(span_ns, idle_ns): total length of the union of host spans, and how much of it the GPU
    (busy intervals bs/be) spent idle."""
    us, ue = union(np.asarray(starts, np.int64), np.asarray(ends, np.int64))
    span = int(np.sum(ue - us))
    # one vectorized pass over all spans (integer ns: the same total as summing per span)
    busy = int(np.sum(Busy(-1, bs, be).covered(us, ue))) if len(us) else 0
    return span, span - busy


def op_locations(ctx: Context, op_rows: Iterable[int]) -> list[Location | None]:
    return [ctx.locator.for_op(int(i)) for i in op_rows]


def run_locations(rows: object, label: Callable[[dict], str]) -> list[Location]:
    """Locations from run.json rows that carry ``file`` and ``line``."""
    out: list[Location] = []
    if not isinstance(rows, list):
        return out
    for r in rows:
        if (
            isinstance(r, dict)
            and isinstance(r.get("file"), str)
            and isinstance(r.get("line"), int)
        ):
            out.append(Location(r["file"], int(r["line"]), label(r), 1))
    return out


def merge_locations(*groups: Iterable[Location | None], top: int = 5) -> tuple[Location, ...]:
    """Run.json sites first (where the object was made), then the trace's aggregated lines."""
    seen: set[tuple[str, int]] = set()
    out: list[Location] = []
    for g in groups:
        for loc in g:
            if loc is None or (loc.file, loc.line) in seen:
                continue
            seen.add((loc.file, loc.line))
            out.append(loc)
    return tuple(out[:top])


def tensor_core_gpu(trace: Trace) -> bool | None:
    """True for NVIDIA compute capability >= 7.0, False below, None when unknown."""
    dev = trace.device(main_gpu(trace))
    if dev is None or dev.compute_capability is None or dev.vendor == "amd":
        return None
    return dev.compute_capability >= (7, 0)


def dims_of(v: object) -> list | None:
    return v if isinstance(v, list) else None


def arg_dims(row_dims: object, i: int) -> list | None:
    """The i-th entry of an op's Input Dims (a list), or None."""
    d = dims_of(row_dims)
    if d is None or i >= len(d):
        return None
    x = d[i]
    return x if isinstance(x, list) else None


def launched_below(trace: Trace) -> np.ndarray:
    """Per cpu_ops row: the op or one of its descendants issued a runtime (CUDA/HIP) call."""
    ops = trace.cpu_ops
    out = np.zeros(len(ops), dtype=bool)
    issuers = issuing_ops(trace)
    issuers = issuers[issuers >= 0]
    if not len(issuers):
        return out
    out[issuers] = True
    parent = ops["parent_idx"].to_numpy()
    depth = ops["depth"].to_numpy()
    order = np.argsort(-depth, kind="stable")  # deepest first: children before parents
    for d in range(int(depth.max()), 0, -1):
        rows = order[depth[order] == d]
        rows = rows[out[rows] & (parent[rows] >= 0)]
        out[parent[rows]] = True
    return out


def outermost(trace: Trace, row: int, names: frozenset[str]) -> int:
    """Walk up from cpu_ops ``row`` while the parent's name is in ``names``."""
    ops = trace.cpu_ops
    parent = ops["parent_idx"].to_numpy()
    name = ops["name"]
    cur = row
    for _ in range(64):
        p = int(parent[cur])
        if p < 0 or str(name.iat[p]) not in names:
            break
        cur = p
    return cur
