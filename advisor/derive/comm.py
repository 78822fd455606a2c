"""Communication on the timeline: collectives, their overlap with compute, exposed time.

Communication kernels are the ones ``kernels.is_comm`` marks: NCCL/RCCL and the other families of
:mod:`advisor.trace.commroles` (DeepEP, custom and symmetric-memory all-reduce, all-to-all
kernels on a stream of their own...). On CPU-only runs (gloo) the collectives are the ``gloo:*``
ranges the backend records on its own thread; their duration includes the wait for the other
ranks, as an NCCL kernel's does.

Overlap follows Holistic Trace Analysis' ``get_comm_comp_overlap``: the share of the union of
communication kernels that the union of computation kernels (everything that is neither
communication nor a copy/memset) covers, over the GPU activity HTA counts
(:func:`advisor.derive.timeline.hta_window`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from advisor.derive.timeline import covered_by, hta_window, union
from advisor.trace.commroles import behaviour_note, by_rules
from advisor.trace.model import Trace

_KERNEL_RE = re.compile(r"^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z0-9]+)", re.IGNORECASE)
CPU_COLLECTIVE_PREFIXES = ("gloo:",)


def collective_name(name: str) -> str:
    """``ncclKernel_AllReduce_RING_LL_Sum_float(...)`` -> ``AllReduce``; ``gloo:all_reduce`` ->
    ``all_reduce``; anything else: the name up to its argument list."""
    m = _KERNEL_RE.match(name)
    if m:
        return m.group(1)
    head, sep, rest = name.partition(":")
    if sep and head in ("gloo", "nccl", "rccl") and rest:
        return rest
    return name.split("(", 1)[0][:60]


@dataclass(frozen=True)
class CommStats:
    """Communication on one device over the HTA window."""

    device: int
    comm_ns: int  # union of communication kernels
    compute_ns: int  # union of computation kernels
    overlap_ns: int  # communication time during which a computation kernel runs
    steps: int  # steps the window covers (for per-step figures)

    @property
    def exposed_ns(self) -> int:
        return self.comm_ns - self.overlap_ns

    @property
    def overlap_pct(self) -> float:
        return 100.0 * self.overlap_ns / self.comm_ns if self.comm_ns > 0 else 0.0

    @property
    def exposed_ms_per_step(self) -> float:
        return self.exposed_ns / 1e6 / max(self.steps, 1)


def window_steps(trace: Trace) -> int:
    """Number of steps :func:`hta_window` keeps (the last one is dropped with two or more)."""
    n = len(trace.steps)
    return n - 1 if n >= 2 and not trace.meta.synthetic_steps else max(n, 1)


def comm_activity(trace: Trace) -> pd.DataFrame:
    """GPU activity of the HTA window (kind: comm, kernel, memcpy, memset)."""
    act = trace.gpu_activity()
    return hta_window(trace, act) if len(act) else act


def comm_stats(trace: Trace) -> CommStats | None:
    """Overlap of communication with computation on the device that communicates most."""
    act = comm_activity(trace)
    if not len(act) or not (act["kind"] == "comm").any():
        return None
    best: CommStats | None = None
    for dev, g in act.groupby("device", sort=True):
        kind = g["kind"].to_numpy()
        s = g["ts_ns"].to_numpy()
        e = g["end_ns"].to_numpy()
        cs, ce = union(s[kind == "comm"], e[kind == "comm"])
        if not len(cs):
            continue
        ks, ke = union(s[kind == "kernel"], e[kind == "kernel"])
        comm = int(np.sum(ce - cs))
        overlap = int(np.sum(covered_by(ks, ke, cs, ce)))
        st = CommStats(int(dev), comm, int(np.sum(ke - ks)), overlap, window_steps(trace))
        if best is None or st.comm_ns > best.comm_ns:
            best = st
    return best


def compute_union(trace: Trace, device: int) -> tuple[np.ndarray, np.ndarray]:
    """The union of computation kernels of ``device`` in the HTA window (disjoint, sorted)."""
    act = comm_activity(trace)
    act = act[act["device"] == device]
    kind = act["kind"].to_numpy()
    return union(
        act["ts_ns"].to_numpy()[kind == "kernel"], act["end_ns"].to_numpy()[kind == "kernel"]
    )


def per_kernel_exposed(trace: Trace, device: int) -> pd.DataFrame:
    """The communication kernels of ``device`` in the HTA window with the part of each that no
    computation kernel covers: columns name, collective, stream, step, ts_ns, dur_ns,
    exposed_ns, launch_idx, row (of ``trace.kernels``)."""
    ks, ke = compute_union(trace, device)
    k = trace.kernels
    k = k.assign(row=np.arange(len(k)))
    k = k[k["is_comm"].to_numpy() & (k["device"] == device).to_numpy()]
    if len(trace.runtime):
        k = k[k["launch_idx"] >= 0]
    n = len(trace.steps)
    if n >= 2 and not trace.meta.synthetic_steps:
        k = k[k["step"] != int(trace.steps["step"].iloc[-1])]
    s = k["ts_ns"].to_numpy()
    e = k["end_ns"].to_numpy()
    exposed = (e - s) - covered_by(ks, ke, s, e)
    names = k["name"].astype(str)
    return pd.DataFrame(
        {
            "name": names.to_numpy(),
            "collective": [collective_name(x) for x in names],
            "stream": k["stream"].to_numpy(),
            "step": k["step"].to_numpy(),
            "ts_ns": s,
            "dur_ns": e - s,
            "exposed_ns": exposed,
            "launch_idx": k["launch_idx"].to_numpy(),
            "row": k["row"].to_numpy(),
        }
    )


def cpu_collectives(trace: Trace) -> pd.DataFrame:
    """CPU collective ranges (``gloo:*``) from annotations and cpu_ops: name, tid, ts_ns,
    end_ns, dur_ns, step (by start time)."""
    parts = []
    for df in (trace.annotations, trace.cpu_ops):
        if not len(df):
            continue
        names = df["name"].astype(str)
        m = names.str.startswith(CPU_COLLECTIVE_PREFIXES).to_numpy()
        if "on_gpu" in df:
            m = m & ~df["on_gpu"].to_numpy(dtype=bool)
        if m.any():
            sub = df[m]
            parts.append(
                pd.DataFrame(
                    {
                        "name": names[m].to_numpy(),
                        "tid": sub["tid"].to_numpy(),
                        "ts_ns": sub["ts_ns"].to_numpy(),
                        "end_ns": sub["end_ns"].to_numpy(),
                        "dur_ns": sub["dur_ns"].to_numpy(),
                        "step": sub["step"].to_numpy(),
                    }
                )
            )
    if not parts:
        return pd.DataFrame(columns=["name", "tid", "ts_ns", "end_ns", "dur_ns", "step"])
    out = pd.concat(parts, ignore_index=True)
    return out.drop_duplicates(["name", "tid", "ts_ns"]).sort_values("ts_ns", kind="stable")


def comm_by_behaviour(trace: Trace) -> tuple[str, str] | None:
    """(what, effect) of a trace-quality note when kernels were taken for communication by how
    they run, not by a library's name (:func:`advisor.trace.commroles.by_behaviour`)."""
    k = trace.kernels
    if not len(k) or not k["is_comm"].any():
        return None
    names = k["name"].array
    found = k["is_comm"].to_numpy(dtype=bool) & ~by_rules(
        names, k["device"].to_numpy(), k["stream"].to_numpy()
    )
    text = behaviour_note(names, found, k["dur_ns"].to_numpy())
    if not text:
        return None
    return (
        f"{text} taken for communication by how they run: named for communication, on a "
        "stream of their own beside computing streams, launching few blocks.",
        "They count as communication (communication share, comm-overlap, collectives table); "
        "a plugin rule (advisor.detect.comm_kernels) names a library's kernels for certain.",
    )


_DDP_MARKS = ("DistributedDataParallel.forward", "reducer::", "Reducer", "DDP::")


def has_ddp_reducer(trace: Trace) -> bool:
    """A DDP reducer runs in this trace (``DistributedDataParallel.forward`` ranges or the
    reducer's own ops, e.g. ``torch::distributed::reducer::mul_out``)."""
    for df in (trace.annotations, trace.cpu_ops):
        if len(df) and any(m in str(c) for c in df["name"].array.categories for m in _DDP_MARKS):
            return True
    return False
