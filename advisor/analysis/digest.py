"""A compact digest of one analysed trace: what multi-rank analysis and ``advisor diff`` need.

A worker process loads one trace, runs the detectors and returns a :class:`Digest`: the per-rank
Report (as a dict), per-step times, the time per category, per-name kernel and op totals and
the collectives' timing. Never the tables, so a 128-rank job never holds 128 traces in memory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from advisor.derive.comm import collective_name, comm_stats, cpu_collectives
from advisor.derive.dataloader import fetch_intervals
from advisor.derive.peerwait import single_rank_transfer_ns
from advisor.derive.steps import steady_trace
from advisor.derive.timeline import covered_by, main_device, main_device_busy, union
from advisor.runfolder import RUN_NAME
from advisor.trace.discover import rank_from_name
from advisor.trace.model import Trace

TOP_NAMES = 300  # kernels / ops kept per trace for diff
CATEGORIES = ("compute", "communication", "memcpy", "idle", "dataloader")


@dataclass(frozen=True)
class Collectives:
    """One row per collective (communication kernel, or gloo range on CPU runs)."""

    step: np.ndarray  # int64
    name: list[str]  # collective name (AllReduce, all_reduce, ...)
    stream: np.ndarray  # int64 (-1 on CPU)
    start_abs_ns: np.ndarray  # int64, the file's own clock in ns
    dur_ns: np.ndarray  # int64
    ts_us: np.ndarray  # float64, the file's own timestamp (to find it in Perfetto)
    exposed_ns: np.ndarray | None = None  # int64, the part no computation kernel covers (GPU)
    transfer_ns: np.ndarray | None = None  # int64, one-rank transfer estimate (derive.peerwait)

    def __len__(self) -> int:
        return len(self.step)


@dataclass(frozen=True)
class Digest:
    path: str
    rank: int | None
    world_size: int | None
    report: dict[str, Any]  # Report.to_dict() of this trace alone
    step_ids: np.ndarray  # int64
    step_ms: np.ndarray  # float64
    gpu_busy_pct: float | None  # HTA's definition: busy share of the span of GPU activity
    comm_pct: float | None  # share of step time with communication running
    comm_overlap_pct: float | None  # HTA's comm/comp overlap
    exposed_comm_ms_per_step: float | None
    categories_ms: dict[str, float]  # per step
    kernels: dict[str, tuple[int, float]]  # name -> (count, total ms)
    ops: dict[str, tuple[int, float]]
    collectives: Collectives
    device: str | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else Path(self.path).name

    @property
    def steps(self) -> int:
        return len(self.step_ids)

    @property
    def step_ms_median(self) -> float:
        return float(np.median(self.step_ms)) if len(self.step_ms) else 0.0


def failed_digest(path: Path, error: str) -> Digest:
    empty = Collectives(
        np.zeros(0, np.int64),
        [],
        np.zeros(0, np.int64),
        np.zeros(0, np.int64),
        np.zeros(0, np.int64),
        np.zeros(0),
    )
    return Digest(
        str(path),
        rank_from_name(path),
        None,
        {},
        np.zeros(0, np.int64),
        np.zeros(0),
        None,
        None,
        None,
        None,
        {},
        {},
        {},
        empty,
        error=error,
    )


def load_rank_context(trace_path: Path, rank: int | None) -> dict[str, Any] | None:
    """``run.rank<R>.json`` (per-rank runs) or ``run.json`` beside the trace, or None."""
    names = ([f"run.rank{rank}.json"] if rank is not None else []) + [RUN_NAME]
    for name in names:
        cand = trace_path.parent / name
        if cand.is_file():
            try:
                data = json.loads(cand.read_text(encoding="utf-8"))
            except (OSError, ValueError, UnicodeDecodeError):
                return None
            return data if isinstance(data, dict) else None
    return None


def digest_file(path: str | Path, options: Any = None) -> Digest:
    """Load one trace, analyse it and digest it (the worker entry point; never raises for bad
    input: a trace that cannot be read gives a digest with ``error`` set)."""
    from advisor.analysis.pipeline import Options, analyze_trace
    from advisor.errors import AdvisorError
    from advisor.trace import load_trace

    p = Path(path)
    opts = options or Options()
    try:
        trace = load_trace(p, opts.max_trace_bytes)
    except (AdvisorError, OSError, MemoryError) as err:
        return failed_digest(p, str(err))
    rank = trace.meta.rank if trace.meta.rank is not None else rank_from_name(p)
    report = analyze_trace(trace, load_rank_context(p, rank), opts)
    return digest_trace(trace, report.to_dict(), rank)


def digest_trace(trace: Trace, report: dict[str, Any], rank: int | None = None) -> Digest:
    if rank is None:
        rank = trace.meta.rank if trace.meta.rank is not None else rank_from_name(trace.path)
    trace = steady_trace(trace)  # the per-step figures come from the steady steps
    steps = trace.steps
    cats = categories_ms(trace)
    cs = comm_stats(trace)
    dev = trace.device(main_device(trace))
    busy = main_device_busy(trace)
    return Digest(
        path=str(trace.path),
        rank=rank,
        world_size=trace.meta.world_size,
        report=report,
        step_ids=steps["step"].to_numpy(dtype=np.int64),
        step_ms=(steps["dur_ns"].to_numpy(dtype=np.float64) / 1e6),
        gpu_busy_pct=round(busy.busy_pct, 2) if busy else None,
        comm_pct=cats.pop("_comm_pct", None),
        comm_overlap_pct=round(cs.overlap_pct, 2) if cs else None,
        exposed_comm_ms_per_step=round(cs.exposed_ms_per_step, 3) if cs else None,
        categories_ms=cats,
        kernels=_totals(trace.kernels),
        ops=_op_totals(trace),
        collectives=collectives(trace),
        device=dev.name if dev else None,
        extra={
            "free_compute_ms": round((cs.compute_ns - cs.overlap_ns) / 1e6 / max(cs.steps, 1), 3),
            **_comm_replay(trace),
        }
        if cs
        else {},
    )


def _comm_replay(trace: Trace) -> dict[str, float]:
    """``comm_hidden_replay_ms``: what the steps lose in the replay with every collective
    hidden entirely (waiting included): no overlap can save more on this rank."""
    from advisor.replay.fixes import HideComm
    from advisor.replay.whatif import whatif

    rows = np.flatnonzero(trace.kernels["is_comm"].to_numpy(dtype=bool))
    s = whatif(trace, HideComm(rows, wait_ns=np.zeros(len(rows), dtype=np.int64)))
    return {"comm_hidden_replay_ms": s.ms} if s.replayed else {}


def _step_windows(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    st = trace.steps
    return st["ts_ns"].to_numpy(dtype=np.int64), st["end_ns"].to_numpy(dtype=np.int64)


def _in_steps(starts: np.ndarray, ends: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> int:
    us, ue = union(starts, ends)
    return int(np.sum(covered_by(us, ue, lo, hi)))


def categories_ms(trace: Trace) -> dict[str, Any]:
    """Per-step time by category. On GPU traces compute, communication (not under compute),
    memcpy (copies and memsets under neither) and idle split the step; dataloader is CPU time
    in DataLoader ranges and overlaps them. On CPU traces the main thread's op time is split
    into compute, communication (gloo ranges) and dataloader; the rest is idle."""
    lo, hi = _step_windows(trace)
    total = int(np.sum(hi - lo))
    n = max(len(lo), 1)
    dl = fetch_intervals(trace)
    dl_s, dl_e = dl.starts, dl.ends
    dataloader = _in_steps(dl_s, dl_e, lo, hi)
    out: dict[str, Any] = {}
    dev = main_device(trace)
    if dev is not None:
        act = trace.gpu_activity()
        act = act[act["device"] == dev]
        kind = act["kind"].to_numpy()
        s, e = act["ts_ns"].to_numpy(), act["end_ns"].to_numpy()
        comp = _in_steps(s[kind == "kernel"], e[kind == "kernel"], lo, hi)
        k = (kind == "kernel") | (kind == "comm")
        comp_comm = _in_steps(s[k], e[k], lo, hi)
        busy = _in_steps(s, e, lo, hi)
        comm_any = _in_steps(s[kind == "comm"], e[kind == "comm"], lo, hi)
        parts = {
            "compute": comp,
            "communication": comp_comm - comp,
            "memcpy": busy - comp_comm,
            "idle": total - busy,
        }
    else:
        coll = cpu_collectives(trace)
        cs, ce = coll["ts_ns"].to_numpy(dtype=np.int64), coll["end_ns"].to_numpy(dtype=np.int64)
        ms, me = _main_thread_ops(trace)
        comm_any = _in_steps(cs, ce, lo, hi)
        busy = _in_steps(np.r_[ms, cs, dl_s], np.r_[me, ce, dl_e], lo, hi)
        comm_dl = _in_steps(np.r_[cs, dl_s], np.r_[ce, dl_e], lo, hi)
        parts = {
            "compute": busy - comm_dl,
            "communication": comm_dl - dataloader,
            "memcpy": 0,
            "idle": total - busy,
        }
    for key, ns in parts.items():
        out[key] = round(max(ns, 0) / 1e6 / n, 3)
    out["dataloader"] = round(dataloader / 1e6 / n, 3)
    out["_comm_pct"] = round(100.0 * comm_any / total, 2) if total > 0 else None
    return out


def _main_thread_ops(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    ops = trace.cpu_ops
    if not len(ops):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    ann = trace.annotations
    tid = None
    if len(ann):
        steps = ann[ann["name"].astype(str).str.startswith("ProfilerStep#")]
        if len(steps):
            tid = int(steps["tid"].iloc[0])
    if tid is None:
        tid = int(ops.groupby("tid")["dur_ns"].sum().idxmax())
    top = ops[(ops["tid"] == tid) & (ops["depth"] == 0)]
    return top["ts_ns"].to_numpy(dtype=np.int64), top["end_ns"].to_numpy(dtype=np.int64)


def _totals(df: pd.DataFrame) -> dict[str, tuple[int, float]]:
    if not len(df):
        return {}
    g = df.groupby(df["name"].astype(str), sort=False)["dur_ns"].agg(["size", "sum"])
    g = g.sort_values("sum", ascending=False).head(TOP_NAMES)
    return {str(n): (int(r["size"]), round(float(r["sum"]) / 1e6, 4)) for n, r in g.iterrows()}


def _op_totals(trace: Trace) -> dict[str, tuple[int, float]]:
    """Inclusive time per name of CPU ops and annotations (not the ProfilerStep ranges)."""
    ann = trace.annotations
    if len(ann):
        ann = ann[~ann["on_gpu"].to_numpy(dtype=bool)]
    parts = [df[["name", "dur_ns"]] for df in (trace.cpu_ops, ann) if len(df)]
    if not parts:
        return {}
    both = pd.concat([p.assign(name=p["name"].astype(str)) for p in parts], ignore_index=True)
    return _totals(both[~both["name"].str.startswith("ProfilerStep#")])


def collectives(trace: Trace) -> Collectives:
    """Communication kernels inside steps (or gloo ranges on CPU runs), ordered by start."""
    k = trace.kernels
    origin_ns = int(round(trace.meta.origin_us * 1000.0))
    exposed = transfer = None
    if len(k) and k["is_comm"].any():
        c = k[k["is_comm"].to_numpy() & (k["step"].to_numpy() >= 0)].sort_values("ts_ns")
        names = [collective_name(str(x)) for x in c["name"]]
        stream = c["stream"].to_numpy(dtype=np.int64)
        exposed = _exposed(trace, c)
        transfer = single_rank_transfer_ns(
            [str(x) for x in c["name"]], stream, c["dur_ns"].to_numpy()
        )
    else:
        c = cpu_collectives(trace)
        c = c[c["step"].to_numpy() >= 0]
        names = [collective_name(str(x)) for x in c["name"]]
        stream = np.full(len(c), -1, dtype=np.int64)
    ts = c["ts_ns"].to_numpy(dtype=np.int64)
    return Collectives(
        step=c["step"].to_numpy(dtype=np.int64),
        name=names,
        stream=stream,
        start_abs_ns=ts + origin_ns,
        dur_ns=c["dur_ns"].to_numpy(dtype=np.int64),
        ts_us=np.round(trace.meta.origin_us + ts / 1000.0, 3),
        exposed_ns=exposed,
        transfer_ns=transfer,
    )


def _exposed(trace: Trace, c: pd.DataFrame) -> np.ndarray:
    """ns of each communication kernel in ``c`` that no computation kernel of its device covers."""
    act = trace.gpu_activity()
    out = np.zeros(len(c), dtype=np.int64)
    dev = c["device"].to_numpy()
    s, e = c["ts_ns"].to_numpy(), c["end_ns"].to_numpy()
    for d in np.unique(dev):
        a = act[(act["device"] == d).to_numpy() & (act["kind"] == "kernel").to_numpy()]
        ks, ke = union(a["ts_ns"].to_numpy(), a["end_ns"].to_numpy())
        m = dev == d
        out[m] = (e[m] - s[m]) - covered_by(ks, ke, s[m], e[m])
    return out
