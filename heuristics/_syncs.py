"""Host-device synchronizations found in a trace, with the GPU idle time each one causes.

Shared by ``sync-point`` (which reports them) and ``gpu-idle`` (which splits idle time by
cause). Not a detector.

A *sync event* is one place where the host thread was blocked on the device: an explicit
``cuda/hip{Stream,Device,Event}Synchronize`` call, a synchronous copy (``cudaMemcpy``,
``hipMemcpy*``), or a ``cudaMemcpyAsync`` device-to-host into pageable memory (host-synchronous
by CUDA's rules). Calls issued by one op instance (``aten::_local_scalar_dense`` issues a copy
and then a stream sync) form one event. Syncs that only wait for host-to-device copies belong
to ``blocking-copy`` and are left out here, as are cuDNN autotuning syncs.

Cost model: while the host waits for ``W`` ns of queued GPU work, it is not launching the next
work; when the sync returns the GPU has drained its queue and stays idle for ``G`` ns until the
host launches again. Without the sync the host would have been ``W`` ahead, so the idle time
the sync causes is ``min(G, W)``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from advisor.derive.runtime import ASYNC_COPY_RE, CLOCK_TOL_NS, SYNC_CALL_RE, SYNC_COPY_RE
from advisor.derive.timeline import busy_by_device, main_device
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

from ._ops import op_chain, op_names
from ._per_step import in_steps

_AUTOTUNE_OPS = (
    "cudnn_convolution",
    "convolution_backward",
    "ConvolutionBackward",
    "miopen_convolution",
)

# reason kind -> (op names that identify it, label shown to users)
REASONS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "branch",
        ("aten::is_nonzero",),
        "data-dependent Python branch (`if tensor:` / `bool(tensor)` / `while t.any():`)",
    ),
    ("equal", ("aten::equal", "aten::allclose"), "torch.equal / allclose on GPU tensors"),
    (
        "nonzero",
        (
            "aten::nonzero",
            "aten::masked_select",
            "aten::unique",
            "aten::_unique2",
            "aten::unique_consecutive",
            "aten::unique_dim",
            "aten::repeat_interleave",
            "aten::masked_scatter",
        ),
        "data-dependent output size (nonzero / boolean-mask indexing / unique / masked_select)",
    ),
    (
        "item",
        ("aten::item", "aten::_local_scalar_dense"),
        "`.item()` / `float(t)` / `int(t)` (scalar read back to the host)",
    ),
    (
        "to_cpu",
        ("aten::to", "aten::_to_copy", "aten::copy_", "aten::cpu"),
        "`.cpu()` / `.to('cpu')` / `.tolist()` / `.numpy()` (device-to-host copy)",
    ),
)
EXPLICIT = {
    "device": "torch.cuda.synchronize()",
    "stream": "stream.synchronize() / torch.cuda.current_stream().synchronize()",
    "event": "event.synchronize() / event.elapsed_time()",
}

COLUMNS = [
    "start_ns",
    "end_ns",
    "wait_ns",
    "pid",
    "tid",
    "rt_idx",
    "step",
    "op_idx",
    "reason_idx",
    "kind",
    "label",
    "api",
    "device",
    "idle_after_ns",
    "idle_from_ns",
    "gpu_busy_ns",
    "caused_ns",
]


def classify(chain: list[int], names: np.ndarray) -> tuple[str, int, str]:
    """(kind, reason op row, label) from the op chain (innermost first)."""
    chain_names = [names[i] for i in chain]
    for kind, ops, label in REASONS:
        # the outermost match names what the user wrote (`.item()` above `_local_scalar_dense`)
        hits = [i for i, n in zip(chain, chain_names, strict=True) if n in ops]
        if hits:
            return kind, hits[-1], label
    aten = [i for i, n in zip(chain, chain_names, strict=True) if "::" in n]
    if aten:
        i = aten[0]
        return "op", i, f"sync inside {names[i]}"
    return "explicit", -1, ""


def sync_events(trace: Trace) -> pd.DataFrame:
    """All sync events of the trace (see module doc), with their cost columns."""
    return trace.memo("syncs.events", lambda: _build(trace))


def _build(trace: Trace) -> pd.DataFrame:
    rt = trace.runtime
    if not len(rt) or not trace.has_gpu:
        return pd.DataFrame(columns=COLUMNS)
    names = rt["name"].astype(str).to_numpy()
    is_call = name_flags(rt["name"], lambda n: bool(SYNC_CALL_RE.match(n)))
    is_sync_copy = name_flags(rt["name"], lambda n: bool(SYNC_COPY_RE.match(n)))
    is_async_copy = name_flags(rt["name"], lambda n: bool(ASYNC_COPY_RE.match(n)))

    # copies each runtime call launched: kind and destination
    mc = trace.memcpy
    dtoh_any = np.zeros(len(rt), dtype=bool)
    dtoh_pageable = np.zeros(len(rt), dtype=bool)
    copy_dev = np.full(len(rt), -1, dtype=np.int64)
    launched_copy = np.zeros(len(rt), dtype=bool)
    if len(mc):
        li = mc["launch_idx"].to_numpy()
        ok = li >= 0
        kind = mc["kind"].astype(str).to_numpy()
        dst = mc["dst"].astype(str).to_numpy()
        is_copy = kind != "Memset"
        dtoh = (kind == "DtoH") & ok
        launched_copy[li[ok & is_copy]] = True
        dtoh_any[li[dtoh]] = True
        dtoh_pageable[li[dtoh & (dst != "Pinned")]] = True
        copy_dev[li[ok]] = mc["device"].to_numpy()[ok]

    blocking = is_call | (is_sync_copy & dtoh_any) | (is_async_copy & dtoh_pageable)
    if not blocking.any():
        return pd.DataFrame(columns=COLUMNS)

    op_idx = rt["op_idx"].to_numpy()
    # per op instance: did it launch copies, and were any of them device-to-host?
    inst_copy: dict[int, bool] = {}
    inst_dtoh: dict[int, bool] = {}
    for i in np.flatnonzero((op_idx >= 0) & launched_copy):
        inst_copy[int(op_idx[i])] = True
        inst_dtoh[int(op_idx[i])] = inst_dtoh.get(int(op_idx[i]), False) or bool(dtoh_any[i])

    sync_dev: dict[int, int] = {}
    if len(trace.syncs):
        s = trace.syncs
        for c, d in zip(s["correlation"].to_numpy(), s["device"].to_numpy(), strict=True):
            if c >= 0 and d >= 0:
                sync_dev[int(c)] = int(d)
    default_dev = main_device(trace)
    opn = op_names(trace)
    corr = rt["correlation"].to_numpy()
    ts = rt["ts_ns"].to_numpy()
    end = rt["end_ns"].to_numpy()
    pid = rt["pid"].to_numpy()
    tid = rt["tid"].to_numpy()

    groups: dict[tuple[int, int], list[int]] = {}
    for i in np.flatnonzero(blocking):
        oi = int(op_idx[i])
        if oi >= 0 and inst_copy.get(oi) and not inst_dtoh.get(oi):
            continue  # waits for host-to-device copies only: blocking-copy's finding
        key = (oi, -1) if oi >= 0 else (-1, int(i))
        groups.setdefault(key, []).append(int(i))

    rows = []
    for (oi, _), idx in groups.items():
        first = idx[0]
        chain = op_chain(trace, oi) if oi >= 0 else []
        kind, reason_idx, label = classify(chain, opn)
        apis = sorted({names[i] for i in idx})
        if kind == "op" and any(a.endswith("EventSynchronize") for a in apis):
            if any(any(t in opn[c] for t in _AUTOTUNE_OPS) for c in chain):
                continue  # cudnn.benchmark autotuning: a one-time cost of the first iterations
        if kind == "explicit":
            api = apis[0]
            sub = (
                "device"
                if "Device" in api or "Ctx" in api or "Thread" in api
                else "event"
                if "Event" in api
                else "stream"
            )
            kind, label = f"explicit-{sub}", EXPLICIT[sub]
        dev = next((sync_dev[int(corr[i])] for i in idx if int(corr[i]) in sync_dev), -1)
        if dev < 0:
            dev = next((int(copy_dev[i]) for i in idx if copy_dev[i] >= 0), -1)
        if dev < 0:
            dev = default_dev if default_dev is not None else -1
        start = int(ts[first])
        stop = int(max(end[i] for i in idx))
        wait = int(sum(int(end[i] - ts[i]) for i in idx))
        rows.append(
            (
                start,
                stop,
                wait,
                int(pid[first]),
                int(tid[first]),
                first,
                int(rt["step"].iat[first]),
                oi,
                reason_idx,
                kind,
                label,
                "+".join(apis),
                dev,
                0,
                stop,
                0,
                0,
            )
        )
    df = pd.DataFrame(rows, columns=COLUMNS)
    if not len(df):
        return df
    df = df.sort_values("start_ns", kind="stable").reset_index(drop=True)
    df = df[in_steps(trace, df["start_ns"].to_numpy())].reset_index(drop=True)
    busy = busy_by_device(trace)
    for dev, g in df.groupby("device", sort=False):
        b = busy.get(int(dev))
        if b is None:
            continue
        w = b.covered(g["start_ns"].to_numpy(), g["end_ns"].to_numpy())
        frm, gap = b.idle_window(g["end_ns"].to_numpy(), CLOCK_TOL_NS)
        df.loc[g.index, "idle_from_ns"] = frm
        df.loc[g.index, "gpu_busy_ns"] = w
        df.loc[g.index, "idle_after_ns"] = gap
        df.loc[g.index, "caused_ns"] = np.minimum(w, gap)
    return df
