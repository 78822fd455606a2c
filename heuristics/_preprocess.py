"""Host work inside the steps that gives the device nothing to do: the Python frames (from
``python_function`` events) that run for a while without launching any GPU work. Shared by
``host-preprocessing`` (which reports them) and ``gpu-idle`` (which no longer counts the GPU's
idle time under them as waiting for launches); not a detector.

A frame *gives the device work* when, while it runs, any thread of its process starts a CUDA/HIP
runtime call other than bookkeeping (``cudaGetDevice``, ``cudaGetLastError``...): a kernel or
graph launch (captured launches too), a copy, memset, sync, allocation or graph management. On a trace without GPU activity (a CPU run) the
device's work is the model's own operators: those recording an autograd sequence number (grad
mode on), backward work, and operators under an ``nn.Module`` frame or an optimizer step; a
frame with none of them inside does the same kind of host work. Only the outermost such frames
are kept (a frame inside one is part of it), only on threads that do device work, only the part
inside the steps, never inside a DataLoader fetch (``dataloader-stall``'s) or a torch.compile
compilation (one-time work), and never frames of torch.profiler or of torch-advisor itself, nor
anything they call (a thread the profiler or the advisor starts).
An outermost quiet frame in torch's own machinery around the model's work (the optimizer's step
wrapper, torch.compile/dynamo wrappers, ``torch.compiler`` checks) is framework overhead, not
input preparation: neither it nor anything inside it counts (a lazy import on the optimizer's
first step is one-time work of torch's, not the user's preprocessing).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from advisor.arrays import unique_ints
from advisor.derive.dataloader import fetch_intervals
from advisor.derive.onetime import one_time_events
from advisor.derive.runtime import BOOKKEEPING_CALLS
from advisor.derive.timeline import covered_by, subtract, union
from advisor.detect.thresholds import register
from advisor.trace.model import Trace
from advisor.trace.names import name_mask

from ._ops import in_backward, parent_has

register(
    "host_preprocessing.min_frame_ms",
    1.0,
    "a frame must run this long (ms) without launching GPU work to count as host work",
)

COLUMNS = ["row", "tid", "ts_ns", "end_ns", "in_steps_ns", "parent_row"]
# frames that are the profiler's own or the advisor's (never the user's preprocessing)
_OWN_FILE_RE = re.compile(r"(^|/)torch/profiler/|(^|/)torch/autograd/profiler|(^|/)advisor/")
MAX_CALLED_DEPTH = 64  # library frames below the profiler's or the advisor's, followed this deep
_OPT_STEP_RE = re.compile(r"^Optimizer\.step#|^Optimizer\.zero_grad#")
# torch's machinery around the model's work: quiet there is framework overhead, not the input
_MACHINERY_RE = re.compile(r"(^|/)torch/(optim|_dynamo|compiler|_inductor|_functorch|fx)/")


def parent_rows(py: pd.DataFrame) -> np.ndarray:
    """Per python row, the row of its parent frame (-1 at the top)."""
    ids = py["python_id"].to_numpy()
    pos = pd.Series(np.arange(len(py)), index=ids)
    pos = pos[~pos.index.duplicated(keep="first")]
    par = pos.reindex(py["parent_id"].to_numpy()).fillna(-1).to_numpy(np.int64)
    return np.where(par == np.arange(len(py)), -1, par)


def _called_by(mask: np.ndarray, parent: np.ndarray, user: np.ndarray) -> np.ndarray:
    """``mask`` and the frames it calls down to the user's code: a library or standard-library
    frame below a frame in ``mask`` belongs to it (a thread the advisor starts), a frame of the
    user's files does not (the advisor runs the user's script), nor anything below that."""
    out = mask.copy()
    has = parent >= 0
    for _ in range(MAX_CALLED_DEPTH):
        grown = out | (has & ~user & out[np.clip(parent, 0, None)])
        if (grown == out).all():
            break
        out = grown
    return out


def _work_instants(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pid, tid, ts_ns) of the moments device work is issued (see the module doc)."""
    z = np.zeros(0, np.int64)
    if trace.has_gpu:
        rt = trace.runtime
        if not len(rt):
            return z, z, z
        # every runtime call but bookkeeping: launches (also those captured into a CUDA graph,
        # whose kernels are not in the trace), copies, syncs, allocations, graph management
        work = ~rt["name"].astype(str).isin(BOOKKEEPING_CALLS).to_numpy()
        return (
            rt["pid"].to_numpy()[work].astype(np.int64),
            rt["tid"].to_numpy()[work].astype(np.int64),
            rt["ts_ns"].to_numpy()[work],
        )
    ops = trace.cpu_ops
    if not len(ops):
        return z, z, z
    work = (ops["seq"].to_numpy() >= 0) | in_backward(trace)
    tid, ts = ops["tid"].to_numpy(), ops["ts_ns"].to_numpy()
    py = trace.python
    mod = py["name"].astype(str).str.startswith("nn.Module: ").to_numpy()
    spans = [(py["tid"].to_numpy()[mod], py["ts_ns"].to_numpy()[mod], py["end_ns"].to_numpy()[mod])]
    an = trace.annotations
    if len(an):
        m = name_mask(an["name"], _OPT_STEP_RE)
        spans.append(
            (an["tid"].to_numpy()[m], an["ts_ns"].to_numpy()[m], an["end_ns"].to_numpy()[m])
        )
    for st, ss, se in spans:
        for t in unique_ints(st):
            us, ue = union(ss[st == t], se[st == t])
            on = tid == t
            i = np.searchsorted(us, ts[on], side="right") - 1
            inside = (i >= 0) & (ts[on] < ue[np.clip(i, 0, None)])
            work[np.flatnonzero(on)[inside]] = True
    return ops["pid"].to_numpy()[work].astype(np.int64), tid[work].astype(np.int64), ts[work]


def quiet_frames(trace: Trace) -> pd.DataFrame:
    """The outermost Python frames inside the steps that launch no device work (see the
    module doc); ``in_steps_ns``: the part of each inside the steps and outside DataLoader
    fetches. Kept with the trace (``preprocess.quiet``)."""
    return trace.memo("preprocess.quiet", lambda: _build(trace))


def _build(trace: Trace) -> pd.DataFrame:
    py = trace.python
    empty = pd.DataFrame({c: np.zeros(0, np.int64) for c in COLUMNS})
    if not len(py) or not len(trace.steps):
        return empty
    wp, wt, wts = _work_instants(trace)
    if not len(wt):
        return empty
    pid = py["pid"].to_numpy().astype(np.int64)
    tid = py["tid"].to_numpy().astype(np.int64)
    ts, end = py["ts_ns"].to_numpy(), py["end_ns"].to_numpy()
    # busy: any thread of the process issued device work while the frame ran (a frame waiting
    # for another thread's work, as backward() on the main thread, is not host work)
    busy = np.zeros(len(py), dtype=bool)
    for p in unique_ints(wp):
        inst = np.sort(wts[wp == p])
        on = np.flatnonzero(pid == p)
        n = np.searchsorted(inst, end[on], side="left") - np.searchsorted(inst, ts[on], "left")
        busy[on] = n > 0
    working = np.isin(tid, unique_ints(wt))
    own = name_mask(py["file"], _OWN_FILE_RE)
    parent = parent_rows(py)
    # what the profiler or the advisor calls, down to the user's code, is theirs
    own = _called_by(own, parent, py["is_user"].to_numpy(dtype=bool))
    quiet = working & ~busy & ~own & (end > ts)
    machinery = name_mask(py["file"], _MACHINERY_RE)
    # a frame inside a quiet one is part of it, also when that one is torch's machinery (dropped)
    top = quiet & ~machinery & ~parent_has(quiet, parent)
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
    """The steps, less the DataLoader fetches (dataloader-stall's) and torch.compile
    compilations (one-time work: compile-recompiles and one-time-init) inside them."""
    st = trace.steps
    ss, se = union(st["ts_ns"].to_numpy(), st["end_ns"].to_numpy())
    fi = fetch_intervals(trace)
    ev = one_time_events(trace)
    ev = ev[ev["kind"] == "compile"]
    cs, ce = union(
        np.r_[fi.starts, ev["ts_ns"].to_numpy()].astype(np.int64),
        np.r_[fi.ends, ev["end_ns"].to_numpy()].astype(np.int64),
    )
    return subtract(ss, se, cs, ce) if len(cs) else (ss, se)


def preprocessing_spans(trace: Trace, min_frame_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """The union of the quiet frames of at least ``min_frame_ns`` inside the steps."""
    q = quiet_frames(trace)
    q = q[(q["end_ns"] - q["ts_ns"]).to_numpy() >= min_frame_ns]
    fs, fe = union(q["ts_ns"].to_numpy(), q["end_ns"].to_numpy())
    return subtract(fs, fe, *subtract(fs, fe, *allowed_spans(trace)))  # the frames, where allowed
