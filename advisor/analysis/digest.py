"""Digest one analysed trace (:class:`advisor.digest.Digest`): what multi-rank analysis and
``advisor diff`` need. The worker entry point is :func:`digest_file`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from advisor import runinfo
from advisor.analysis.options import Options
from advisor.arrays import unique_ints
from advisor.derive.arrival import preceding
from advisor.derive.breakdown import step_breakdown
from advisor.derive.comm import collective_name, comm_stats, cpu_collectives
from advisor.derive.peerwait import single_rank_transfer_ns
from advisor.derive.steps import steady_trace
from advisor.derive.timeline import covered_by, main_device, union
from advisor.digest import NO_COLLECTIVES, Collectives, Digest, KernelSeq, Skeleton
from advisor.report import Report
from advisor.runfacts import RunFacts
from advisor.runfolder import RUN_NAME, rank_run_name
from advisor.runinfo import RunInfo
from advisor.trace.discover import rank_from_name
from advisor.trace.model import Trace

TOP_NAMES = 300  # kernels / ops kept per trace for diff


def failed_digest(path: Path, error: str) -> Digest:
    return Digest(
        str(path),
        rank_from_name(path),
        None,
        Report(run=RunFacts(trace=str(path)), findings=()),
        np.zeros(0, np.int64),
        np.zeros(0),
        None,
        None,
        None,
        {},
        {},
        {},
        NO_COLLECTIVES,
        error=error,
    )


def load_rank_context(trace_path: Path, rank: int | None) -> RunInfo | None:
    """``run.rank<R>.json`` (per-rank runs) or ``run.json`` beside the trace, or None."""
    names = ([rank_run_name(rank)] if rank is not None else []) + [RUN_NAME]
    for name in names:
        cand = trace_path.parent / name
        if cand.is_file():
            return runinfo.read_file(cand)
    return None


def digest_file(path: str | Path, options: Options | None = None) -> Digest:
    """Load one trace, analyse it and digest it (the worker entry point; never raises for bad
    input: a trace that cannot be read gives a digest with ``error`` set)."""
    from advisor.analysis.pipeline import analyze_trace
    from advisor.errors import AdvisorError
    from advisor.trace import load_trace

    p = Path(path)
    opts = options or Options()
    try:
        trace = load_trace(p, opts.max_trace_bytes)
    except (AdvisorError, OSError, MemoryError) as err:
        return failed_digest(p, str(err))
    rank = trace.meta.rank if trace.meta.rank is not None else rank_from_name(p)
    run = load_rank_context(p, rank)
    report = analyze_trace(trace, run, opts)
    return digest_trace(trace, report, rank, opts.kernel_sequence, run)


def digest_trace(
    trace: Trace,
    report: Report,
    rank: int | None = None,
    with_kernels: bool = False,
    run: RunInfo | None = None,
) -> Digest:
    """The trace's digest (``with_kernels``: with its kernels in order and the other facts
    ``advisor diff`` compares, :mod:`advisor.analysis.diffdigest`; ``run``: its run.json)."""
    from advisor.analysis.diffdigest import diff_facts

    if rank is None:
        rank = trace.meta.rank if trace.meta.rank is not None else rank_from_name(trace.path)
    trace = steady_trace(trace)  # the per-step figures come from the steady steps
    steps = trace.steps
    cs = comm_stats(trace)
    dev = trace.device(main_device(trace))
    colls, rows = _collectives(trace)
    calls, work, once = diff_facts(trace, run) if with_kernels else (None, None, None)
    return Digest(
        path=str(trace.path),
        rank=rank,
        world_size=trace.meta.world_size,
        report=report,
        step_ids=steps["step"].to_numpy(dtype=np.int64),
        step_ms=(steps["dur_ns"].to_numpy(dtype=np.float64) / 1e6),
        comm_pct=comm_pct(trace),
        comm_overlap_pct=round(cs.overlap_pct, 2) if cs else None,
        exposed_comm_ms_per_step=round(cs.exposed_ms_per_step, 3) if cs else None,
        categories_ms=step_breakdown(trace).mean_ms(),
        kernels=_totals(trace.kernels),
        ops=_op_totals(trace),
        collectives=colls,
        device=dev.name if dev else None,
        free_compute_ms=round((cs.compute_ns - cs.overlap_ns) / 1e6 / max(cs.steps, 1), 3)
        if cs
        else None,
        comm_hidden_replay_ms=_comm_replay(trace) if cs else None,
        skeleton=_skeleton(trace, rows),
        kernel_seq=kernel_sequence(trace) if with_kernels else None,
        runtime_calls=calls,
        workload=work,
        one_time=once,
    )


def kernel_sequence(trace: Trace) -> KernelSeq:
    """The steady steps' kernels on the main GPU, communication aside, in start order, with
    the innermost CPU op around each launch (:class:`advisor.digest.KernelSeq`)."""
    k = trace.kernels
    dev = main_device(trace)
    keep = (k["step"].to_numpy() >= 0) & ~k["is_comm"].to_numpy(dtype=bool)
    if dev is not None:
        keep &= (k["device"] == dev).to_numpy()
    rows = np.flatnonzero(keep)
    rows = rows[np.argsort(k["ts_ns"].to_numpy()[rows], kind="stable")]
    launch = k["launch_idx"].to_numpy()[rows]
    rt_op = trace.runtime["op_idx"].to_numpy() if len(trace.runtime) else np.zeros(0, np.int64)
    op = np.full(len(rows), -1, dtype=np.int64)
    ok = (launch >= 0) & (launch < len(rt_op))
    op[ok] = rt_op[launch[ok]]
    op_names = trace.cpu_ops["name"].astype(str).to_numpy() if len(trace.cpu_ops) else None
    op_name = np.full(len(rows), "", dtype=object)
    if op_names is not None:
        has = op >= 0
        op_name[has] = op_names[op[has]]
    name_codes, names = pd.factorize(k["name"].astype(str).to_numpy()[rows])
    op_codes, ops = pd.factorize(op_name)
    return KernelSeq(
        names=[str(x) for x in names],
        ops=[str(x) for x in ops],
        step=k["step"].to_numpy(dtype=np.int64)[rows],
        name_idx=name_codes.astype(np.int64),
        op_idx=op_codes.astype(np.int64),
        stream=k["stream"].to_numpy(dtype=np.int64)[rows],
        dur_ns=k["dur_ns"].to_numpy(dtype=np.int64)[rows],
    )


def _comm_replay(trace: Trace) -> float | None:
    """What the steps lose in the replay with every collective hidden entirely (waiting
    included): no overlap can save more on this rank. None when the steps are not replayed."""
    from advisor.replay.fixes import HideComm
    from advisor.replay.whatif import whatif

    rows = np.flatnonzero(trace.kernels["is_comm"].to_numpy(dtype=bool))
    s = whatif(trace, HideComm(rows, wait_ns=np.zeros(len(rows), dtype=np.int64)))
    return s.ms if s.replayed else None


def comm_pct(trace: Trace) -> float | None:
    """Share of the steps' wall time with communication running, in %: communication
    kernels of the main GPU, or gloo ranges on CPU runs (None: no steps)."""
    st = trace.steps
    lo, hi = st["ts_ns"].to_numpy(dtype=np.int64), st["end_ns"].to_numpy(dtype=np.int64)
    total = int(np.sum(hi - lo))
    dev = main_device(trace)
    if dev is not None:
        act = trace.gpu_activity()
        act = act[(act["device"] == dev).to_numpy() & (act["kind"] == "comm").to_numpy()]
        s, e = act["ts_ns"].to_numpy(), act["end_ns"].to_numpy()
    else:
        coll = cpu_collectives(trace)
        s, e = coll["ts_ns"].to_numpy(dtype=np.int64), coll["end_ns"].to_numpy(dtype=np.int64)
    us, ue = union(s, e)
    comm_any = int(np.sum(covered_by(us, ue, lo, hi)))
    return round(100.0 * comm_any / total, 2) if total > 0 else None


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
    return _collectives(trace)[0]


def _collectives(trace: Trace) -> tuple[Collectives, np.ndarray]:
    """The collectives, and the ``trace.kernels`` row of each (empty on CPU runs)."""
    k = trace.kernels
    origin_ns = int(round(trace.meta.origin_us * 1000.0))
    exposed = transfer = before = None
    rows = np.zeros(0, dtype=np.int64)
    if len(k) and k["is_comm"].any():
        m = np.flatnonzero(k["is_comm"].to_numpy() & (k["step"].to_numpy() >= 0))
        rows = m[np.argsort(k["ts_ns"].to_numpy()[m], kind="stable")]
        c = k.iloc[rows]
        names = [collective_name(str(x)) for x in c["name"]]
        stream = c["stream"].to_numpy(dtype=np.int64)
        exposed = _exposed(trace, c)
        transfer = single_rank_transfer_ns(
            [str(x) for x in c["name"]], stream, c["dur_ns"].to_numpy()
        )
        before = preceding(trace, c)
    else:
        c = cpu_collectives(trace)
        c = c[c["step"].to_numpy() >= 0]
        names = [collective_name(str(x)) for x in c["name"]]
        stream = np.full(len(c), -1, dtype=np.int64)
    ts = c["ts_ns"].to_numpy(dtype=np.int64)
    out = Collectives(
        step=c["step"].to_numpy(dtype=np.int64),
        name=names,
        stream=stream,
        start_abs_ns=ts + origin_ns,
        dur_ns=c["dur_ns"].to_numpy(dtype=np.int64),
        ts_us=np.round(trace.meta.origin_us + ts / 1000.0, 3),
        exposed_ns=exposed,
        transfer_ns=transfer,
        before=before,
    )
    return out, rows


def _skeleton(trace: Trace, rows: np.ndarray) -> Skeleton | None:
    """The step graph reduced to the collectives at ``rows`` (None: not replayable)."""
    from advisor.replay.model import graph
    from advisor.replay.skeleton import skeleton
    from advisor.replay.whatif import replayable

    if not len(rows) or not replayable(trace):
        return None
    return skeleton(graph(trace), rows, int(round(trace.meta.origin_us * 1000.0)))


def _exposed(trace: Trace, c: pd.DataFrame) -> np.ndarray:
    """ns of each communication kernel in ``c`` that no computation kernel of its device covers."""
    act = trace.gpu_activity()
    out = np.zeros(len(c), dtype=np.int64)
    dev = c["device"].to_numpy()
    s, e = c["ts_ns"].to_numpy(), c["end_ns"].to_numpy()
    for d in unique_ints(dev):
        a = act[(act["device"] == d).to_numpy() & (act["kind"] == "kernel").to_numpy()]
        ks, ke = union(a["ts_ns"].to_numpy(), a["end_ns"].to_numpy())
        m = dev == d
        out[m] = (e[m] - s[m]) - covered_by(ks, ke, s[m], e[m])
    return out
