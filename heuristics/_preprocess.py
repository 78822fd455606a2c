"""Host work inside the steps that gives the device nothing to do: the Python frames (from
``python_function`` events) that run for a while without launching any GPU work. Shared by
``host-preprocessing`` (which reports them) and ``gpu-idle`` (which no longer counts the GPU's
idle time under them as waiting for launches); not a detector.

A frame *launches GPU work* when one of the thread's runtime calls that queue or wait for GPU
work (a kernel launch, copy, memset or sync: rows of ``trace.runtime`` linked to a kernel or
copy, and explicit syncs) starts inside it. On a trace without GPU activity (a CPU run) the
device's work is the model's own operators: those recording an autograd sequence number (grad
mode on), backward work, and operators under an ``nn.Module`` frame or an optimizer step; a
frame with none of them inside does the same kind of host work. Only the outermost such frames
are kept (a frame inside one is part of it), only on threads that do device work, only the part
inside the steps, never inside a DataLoader fetch (``dataloader-stall``'s) and never frames of
torch.profiler or of torch-advisor itself.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from advisor.derive.dataloader import fetch_intervals
from advisor.derive.runtime import SYNC_CALL_RE
from advisor.derive.timeline import covered_by, subtract, union
from advisor.detect.thresholds import register
from advisor.trace.model import Trace
from advisor.trace.names import name_mask

from ._ops import in_backward

register(
    "host_preprocessing.min_frame_ms",
    1.0,
    "a frame must run this long (ms) without launching GPU work to count as host work",
)

COLUMNS = ["row", "tid", "ts_ns", "end_ns", "in_steps_ns", "parent_row"]
# frames that are the profiler's own or the advisor's (never the user's preprocessing)
_OWN_FILE_RE = re.compile(r"(^|/)torch/profiler/|(^|/)torch/autograd/profiler|(^|/)advisor/")
_OPT_STEP_RE = re.compile(r"^Optimizer\.step#|^Optimizer\.zero_grad#")


def parent_rows(py: pd.DataFrame) -> np.ndarray:
    """Per python row, the row of its parent frame (-1 at the top)."""
    ids = py["python_id"].to_numpy()
    pos = pd.Series(np.arange(len(py)), index=ids)
    pos = pos[~pos.index.duplicated(keep="first")]
    par = pos.reindex(py["parent_id"].to_numpy()).fillna(-1).to_numpy(np.int64)
    return np.where(par == np.arange(len(py)), -1, par)


def _work_instants(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(tid, ts_ns) of the moments the device's work is issued (see the module doc)."""
    if trace.has_gpu:
        rt = trace.runtime
        if not len(rt):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        linked = np.zeros(len(rt), dtype=bool)
        for tbl in (trace.kernels, trace.memcpy):
            li = tbl["launch_idx"].to_numpy()
            linked[li[(li >= 0) & (li < len(rt))]] = True
        linked |= name_mask(rt["name"], SYNC_CALL_RE)
        return rt["tid"].to_numpy()[linked].astype(np.int64), rt["ts_ns"].to_numpy()[linked]
    ops = trace.cpu_ops
    if not len(ops):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    work = (ops["seq"].to_numpy() >= 0) | in_backward(trace)
    tid, ts = ops["tid"].to_numpy(), ops["ts_ns"].to_numpy()
    py = trace.python
    spans = [
        (
            py["tid"].to_numpy()[m],
            py["ts_ns"].to_numpy()[m],
            py["end_ns"].to_numpy()[m],
        )
        for m in [py["name"].astype(str).str.startswith("nn.Module: ").to_numpy()]
    ]
    an = trace.annotations
    if len(an):
        m = name_mask(an["name"], _OPT_STEP_RE)
        spans.append(
            (an["tid"].to_numpy()[m], an["ts_ns"].to_numpy()[m], an["end_ns"].to_numpy()[m])
        )
    for st, ss, se in spans:
        for t in np.unique(st):
            us, ue = union(ss[st == t], se[st == t])
            on = tid == t
            i = np.searchsorted(us, ts[on], side="right") - 1
            inside = (i >= 0) & (ts[on] < ue[np.clip(i, 0, None)])
            work[np.flatnonzero(on)[inside]] = True
    return tid[work].astype(np.int64), ts[work]


def quiet_frames(trace: Trace) -> pd.DataFrame:
    """The outermost Python frames inside the steps that launch no device work (see the
    module doc); ``in_steps_ns``: the part of each inside the steps and outside DataLoader
    fetches. Kept with the trace (``preprocess.quiet``)."""
    return trace.memo("preprocess.quiet", lambda: _build(trace))  # type: ignore[no-any-return]


def _build(trace: Trace) -> pd.DataFrame:
    py = trace.python
    empty = pd.DataFrame({c: np.zeros(0, np.int64) for c in COLUMNS})
    if not len(py) or not len(trace.steps):
        return empty
    wt, wts = _work_instants(trace)
    if not len(wt):
        return empty
    tid = py["tid"].to_numpy().astype(np.int64)
    ts, end = py["ts_ns"].to_numpy(), py["end_ns"].to_numpy()
    busy = np.zeros(len(py), dtype=bool)
    for t in np.unique(wt):
        inst = np.sort(wts[wt == t])
        on = np.flatnonzero(tid == t)
        n = np.searchsorted(inst, end[on], side="left") - np.searchsorted(inst, ts[on], "left")
        busy[on] = n > 0
    working = np.isin(tid, np.unique(wt))
    own = name_mask(py["file"], _OWN_FILE_RE)
    quiet = working & ~busy & ~own & (end > ts)
    parent = parent_rows(py)
    top = quiet & ~np.where(parent >= 0, quiet[np.clip(parent, 0, None)], False)
    rows = np.flatnonzero(top)
    if not len(rows):
        return empty
    inside = covered_by(*allowed_spans(trace), ts[rows], end[rows])
    keep = inside > 0
    rows = rows[keep]
    return pd.DataFrame(
        {
            "row": rows,
            "tid": tid[rows],
            "ts_ns": ts[rows],
            "end_ns": end[rows],
            "in_steps_ns": inside[keep].astype(np.int64),
            "parent_row": parent[rows],
        }
    )


def allowed_spans(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """The steps, less the DataLoader fetches inside them."""
    st = trace.steps
    ss, se = union(st["ts_ns"].to_numpy(), st["end_ns"].to_numpy())
    fi = fetch_intervals(trace)
    return subtract(ss, se, fi.starts, fi.ends) if len(fi) else (ss, se)


def preprocessing_spans(trace: Trace, min_frame_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """The union of the quiet frames of at least ``min_frame_ns`` inside the steps."""
    q = quiet_frames(trace)
    q = q[(q["end_ns"] - q["ts_ns"]).to_numpy() >= min_frame_ns]
    fs, fe = union(q["ts_ns"].to_numpy(), q["end_ns"].to_numpy())
    return subtract(fs, fe, *subtract(fs, fe, *allowed_spans(trace)))  # the frames, where allowed
