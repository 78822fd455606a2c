"""What the host's quiet frames (``_preprocess.quiet_frames``) spend their time on, and so which
advice fits them. Shared by ``host-preprocessing``; not a detector.

**Whose work.** Each quiet frame's time is split over the frames inside it by their self time
(a frame's time less its children's), each counted for the kind of library it belongs to
(``_frameworks.kind_of``: the user's code, a data library, torch, a framework); the standard
library and builtins whose owner says nothing count for their caller's kind, and everything
inside a data library's frame is that library's (an image processor may run torch operators
on its CPU tensors). Time inside torch *operators* (the profiler's CPU ops) outside a data
library is torch's work, whatever Python frame called them (a loss function, a gradient
clipping call). The kind holding the most time is the frame's:

- *input*: the user's code or a data library: decoding, tokenizing, image processing, NumPy
  on the inputs, building the batch in Python: the only work "preprocessing" advice fits;
- *torch*: torch operators outside the forward (the loss in an evaluation loop,
  ``clip_grad_norm_``): the step's own math on the host, not input preparation; never
  reported as preprocessing;
- *framework*: a framework's own bookkeeping (its hooks, logging, checks); named with the
  library, and its setting when ``_frameworks.CAUSES`` knows it;
- *output*: input-kind work (a data library or the user's code) that runs after the step's last
  read of device results (a device-to-host copy or a sync) with no launch or copy after it in
  the step (an upload for the next input would be one): post-processing of the results
  (``numpy_to_pil`` after the image came back), which overlaps with the next request rather
  than moving into DataLoader workers. Only a trace with GPU activity has reads to go by.

A torch operator's time counts for torch also on a GPU trace (an operator on CPU tensors);
the data library's own operators (``torchvision.transforms`` on CPU tensors) stay the data
library's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from advisor.arrays import unique_ints
from advisor.derive.runtime import GPU_WORK_CALL_PARTS
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

from ._frameworks import DATA, FRAMEWORK, TORCH, USER, kind_of, library_of
from ._preprocess import parent_rows

KINDS = (USER, DATA, TORCH, FRAMEWORK)
MAX_DEPTH = 256  # frames followed this deep below a quiet frame


def _own_kinds(py: pd.DataFrame) -> np.ndarray:
    """Per python row, the index of its own kind in KINDS (-1: takes its caller's)."""
    names = py["name"].astype(str)
    files = py["file"].astype(str)
    user = py["is_user"].to_numpy(dtype=bool)
    key = pd.MultiIndex.from_arrays([files, names, user])
    codes, uniq = pd.factorize(key)
    per = np.array(
        [KINDS.index(k) if (k := kind_of(f, n, bool(u))) else -1 for f, n, u in uniq], np.int64
    )
    return per[codes] if len(per) else np.zeros(len(py), np.int64)


def _down(parent: np.ndarray, seed: np.ndarray, rule: object) -> np.ndarray:
    """Propagate a per-row value from parents to children until it settles."""
    out = seed.copy()
    has = parent >= 0
    safe = np.clip(parent, 0, None)
    for _ in range(MAX_DEPTH):
        grown = rule(out, np.where(has, out[safe], -1))  # type: ignore[operator]
        if (grown == out).all():
            break
        out = grown
    return out


def classify(trace: Trace, q: pd.DataFrame) -> pd.DataFrame:
    """Per quiet frame (rows of ``q``): ``kind`` (input, torch, framework, output), ``library``
    (the framework holding the most of its framework time, else ""), and the time of each kind
    inside it (``<kind>_ns``)."""
    py = trace.python
    n = len(q)
    out = pd.DataFrame({"kind": np.full(n, "input", dtype=object), "library": [""] * n})
    if not n:
        return out
    parent = parent_rows(py)
    own = _own_kinds(py)
    data = KINDS.index(DATA)

    def eff_rule(cur: np.ndarray, par: np.ndarray) -> np.ndarray:
        return np.where(par == data, data, np.where(own >= 0, own, par))

    eff = _down(parent, own, eff_rule)
    rows = q["row"].to_numpy()
    root0 = np.full(len(py), -1, np.int64)
    root0[rows] = np.arange(n)

    def root_rule(cur: np.ndarray, par: np.ndarray) -> np.ndarray:
        return np.where(root0 >= 0, root0, par)

    root = _down(parent, root0, root_rule)
    dur = py["dur_ns"].to_numpy().astype(np.int64)
    kid_ns = np.bincount(parent[parent >= 0], weights=dur[parent >= 0], minlength=len(py))
    self_ns = np.maximum(dur - kid_ns.astype(np.int64), 0)
    k = np.where(eff >= 0, eff, KINDS.index(USER))
    inside = root >= 0
    ns = np.zeros((n, len(KINDS)), np.int64)
    np.add.at(ns, (root[inside], k[inside]), self_ns[inside])
    _torch_ops(trace, q, py, parent, root, k, ns)
    lib = _framework_library(py, root, own, dur, n)
    for j, name in enumerate(KINDS):
        out[f"{name}_ns"] = ns[:, j]
    best = np.argmax(ns, axis=1)
    kind = np.where(
        best == KINDS.index(TORCH),
        "torch",
        np.where(best == KINDS.index(FRAMEWORK), "framework", "input"),
    ).astype(object)
    after = _after_last_read(trace, q)
    kind[(kind == "input") & after] = "output"
    out["kind"] = kind
    out["library"] = lib
    return out


def _torch_ops(
    trace: Trace,
    q: pd.DataFrame,
    py: pd.DataFrame,
    parent: np.ndarray,
    root: np.ndarray,
    k: np.ndarray,
    ns: np.ndarray,
) -> None:
    """Move the time of top-level CPU operators inside the quiet frames to torch (in place),
    from the kind of the innermost frame enclosing each, unless that frame is a data
    library's."""
    ops = trace.cpu_ops
    if not len(ops):
        return
    top = (ops["depth"].to_numpy() == 0) if "depth" in ops else np.ones(len(ops), bool)
    o_tid, o_ts = ops["tid"].to_numpy()[top], ops["ts_ns"].to_numpy()[top]
    o_dur = ops["dur_ns"].to_numpy()[top].astype(np.int64)
    tid, ts, end = py["tid"].to_numpy(), py["ts_ns"].to_numpy(), py["end_ns"].to_numpy()
    data, torch_k = KINDS.index(DATA), KINDS.index(TORCH)
    for t in unique_ints(q["tid"].to_numpy()):
        on = np.flatnonzero(tid == t)
        order = on[np.lexsort((-(end[on] - ts[on]), ts[on]))]
        starts = ts[order]
        sel = np.flatnonzero(o_tid == t)
        i = np.searchsorted(starts, o_ts[sel], side="right") - 1
        row = np.where(i >= 0, order[np.clip(i, 0, None)], -1)
        for _ in range(MAX_DEPTH):  # up to the innermost frame that encloses the op
            bad = (row >= 0) & (end[np.clip(row, 0, None)] <= o_ts[sel])
            if not bad.any():
                break
            row = np.where(bad, parent[np.clip(row, 0, None)], row)
        ok = row >= 0
        r, d = row[ok], o_dur[sel][ok]
        rt = root[r]
        keep = (rt >= 0) & (k[r] != data)
        np.add.at(ns, (rt[keep], k[r][keep]), -d[keep])
        np.add.at(ns, (rt[keep], np.full(int(keep.sum()), torch_k)), d[keep])
    np.maximum(ns, 0, out=ns)


def _framework_library(
    py: pd.DataFrame, root: np.ndarray, own: np.ndarray, dur: np.ndarray, n: int
) -> list[str]:
    """Per quiet frame, the framework whose own frames inside it run longest."""
    fw = (root >= 0) & (own == KINDS.index(FRAMEWORK))
    out = [""] * n
    if not fw.any():
        return out
    files = py["file"].astype(str).to_numpy()[fw]
    names = py["name"].astype(str).to_numpy()[fw]
    libs = np.array([library_of(f, m) or "" for f, m in zip(files, names, strict=True)])
    df = pd.DataFrame({"root": root[fw], "lib": libs, "ns": dur[fw]})
    best = df.groupby(["root", "lib"])["ns"].sum().reset_index()
    best = best.sort_values(["root", "ns"], ascending=[True, False]).drop_duplicates("root")
    for r, lib in zip(best["root"], best["lib"], strict=True):
        out[int(r)] = str(lib)
    return out


def _after_last_read(trace: Trace, q: pd.DataFrame) -> np.ndarray:
    """Per quiet frame: it starts after its step's last read of device results (a DtoH copy
    or a sync) and no device work is issued after it in the step (module doc, *output*)."""
    n = len(q)
    if not trace.has_gpu or not len(trace.runtime) or not len(trace.steps):
        return np.zeros(n, bool)
    rt = trace.runtime
    work = name_flags(rt["name"], lambda m: any(p in m for p in GPU_WORK_CALL_PARTS))
    sync = name_flags(rt["name"], lambda m: "Synchronize" in m)
    rts, rend = rt["ts_ns"].to_numpy(), rt["end_ns"].to_numpy()
    mc = trace.memcpy
    dtoh = (mc["kind"].astype(str) == "DtoH").to_numpy() if len(mc) else np.zeros(0, bool)
    read_end = np.r_[rend[sync], mc["end_ns"].to_numpy()[dtoh] if len(mc) else []]
    st = trace.steps.sort_values("ts_ns")
    s_start, s_end = st["ts_ns"].to_numpy(), st["end_ns"].to_numpy()
    f_ts, f_end = q["ts_ns"].to_numpy(), q["end_ns"].to_numpy()
    i = np.searchsorted(s_start, f_ts, side="right") - 1
    inside = (i >= 0) & (f_ts < s_end[np.clip(i, 0, None)])
    a, b = s_start[np.clip(i, 0, None)], s_end[np.clip(i, 0, None)]
    reads = np.sort(read_end)
    launches = np.sort(rts[work])
    # a read ending in (step start, frame start], and no launch or copy in [frame end, step end)
    n_reads = np.searchsorted(reads, f_ts, side="right") - np.searchsorted(reads, a, side="right")
    n_later = np.maximum(
        np.searchsorted(launches, b, side="left") - np.searchsorted(launches, f_end, "left"), 0
    )
    return inside & (n_reads > 0) & (n_later == 0)
