"""The report's top kernels and top operators tables (``views.kernels``, ``views.ops``).

Both cover the profiled steps (every event when the trace has none). Names are kept verbatim;
the renderers escape them.

- kernels: per kernel name, ``count``, ``total_ms``, ``mean_us`` and ``share_pct`` of all kernel
  time; ``op``: the CPU operator that launched most of them (the innermost op around the launch
  call), and ``source``: the user's line that called that operator ("file:line", when the trace
  has Python stacks), both None when unknown; ``limit_pct``: the share of the device's limit
  (peak FLOP/s for compute-bound shapes, peak bytes/s for memory-bound ones) they reach,
  ``bound`` ("compute" or "memory") and ``cause``: why they fall short of
  ``kernel_efficiency.target`` (``kernel-efficiency``'s lead cause), all None where the
  kernels' shapes or the device's peaks are unknown.
- ops: per operator name, ``count``, ``total_ms`` (inclusive host time), ``self_ms`` (minus the
  operators it called), ``mean_us``, ``share_pct`` (inclusive time over the steps' wall time),
  ``gpu_ms`` (time of the kernels it launched itself, innermost), and ``source`` as above.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from advisor.analysis.summary import op_self_ns
from advisor.arrays import unique_ints
from advisor.derive.locate import Locator
from advisor.detectors._efficiency import Analysis, row_figures
from advisor.record import UNSET
from advisor.trace.model import Trace
from advisor.trace.names import name_flags
from advisor.units import ms_of_ns, pct_of
from advisor.viewdata import KernelRow, OpRow

TOP = 15


def _in_steps(df: pd.DataFrame) -> pd.DataFrame:
    if not len(df):
        return df
    m = df["step"].to_numpy() >= 0
    return df[m] if m.any() else df


def _where(locator: Locator | None, op_idx: int) -> str | None:
    if locator is None or op_idx < 0:
        return None
    loc = locator.for_op(op_idx)
    return f"{loc.file}:{loc.line}" if loc is not None else None


def _op_names(trace: Trace) -> np.ndarray:
    """cpu_ops names as strings, once per trace (both tables read them)."""
    return trace.memo("toptables.op_names", lambda: trace.cpu_ops["name"].astype(str).to_numpy())


def _name_keys(names: pd.Series) -> tuple[np.ndarray, list[str]]:
    """An integer per row, equal for rows whose names are equal as strings (``astype(str)``),
    and the string of each integer: grouping by it groups as by the names, without hashing
    every row's string."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        cat = names.array
        strs = [str(c) for c in cat.categories] + ["nan"]  # code -1 (missing): "nan"
        of_cat, uniq = pd.factorize(np.array(strs, dtype=object))
        return of_cat[np.asarray(cat.codes)], [str(u) for u in uniq]
    codes, uniq = pd.factorize(names.astype(str).to_numpy())
    return codes, [str(u) for u in uniq]


def kernel_ops(trace: Trace, kernels: pd.DataFrame) -> np.ndarray:
    """cpu_ops row of the innermost op around each kernel's launch call (-1: unknown)."""
    if not len(kernels) or not len(trace.runtime) or "launch_idx" not in kernels:
        return np.full(len(kernels), -1, dtype=np.int64)
    launch = kernels["launch_idx"].to_numpy(dtype=np.int64)
    op_of_rt = trace.runtime["op_idx"].to_numpy(dtype=np.int64)
    ok = (launch >= 0) & (launch < len(op_of_rt))
    out = np.full(len(kernels), -1, dtype=np.int64)
    out[ok] = op_of_rt[launch[ok]]
    return out


def top_kernels(
    trace: Trace, locator: Locator | None = None, top: int = TOP, an: Analysis | None = None
) -> tuple[KernelRow, ...]:
    k = _in_steps(trace.kernels)
    if not len(k):
        return ()
    ops = trace.cpu_ops
    key, label = _name_keys(k["name"])
    df = pd.DataFrame(
        {"name": key, "dur": k["dur_ns"].to_numpy(dtype=np.int64), "op": kernel_ops(trace, k)}
    )
    figures = _limit_figures(an, trace, k.index.to_numpy(), key, df["dur"].to_numpy())
    total = float(df["dur"].sum())
    g = df.groupby("name", sort=False)["dur"].agg(["sum", "count", "mean"])
    g = g.sort_values(["sum", "count"], ascending=False).head(top)
    rows = []
    has_op = (df["op"] >= 0).to_numpy()
    for code, r in g.iterrows():
        name = label[int(code)]
        fig = figures.get(int(code))
        launched = df.loc[(key == code) & has_op, "op"]
        op_name, src = None, None
        if len(launched) and len(ops):
            names = _op_names(trace)[launched.to_numpy()]
            vals, counts = np.unique(names, return_counts=True)
            op_name = str(vals[int(np.argmax(counts))])
            first = int(launched.to_numpy()[names == op_name][0])
            src = _where(locator, first)
        rows.append(
            KernelRow(
                name=str(name),
                count=int(r["count"]),
                total_ms=ms_of_ns(r["sum"]),
                mean_us=round(float(r["mean"]) / 1e3, 3),
                share_pct=pct_of(float(r["sum"]), total),
                op=op_name,
                source=src,
                limit_pct=fig[0] if fig else None,
                bound=fig[1] if fig else None,
                cause=fig[2] if fig else None,
            )
        )
    return tuple(rows)


def _limit_figures(
    an: Analysis | None, trace: Trace, rows: np.ndarray, key: np.ndarray, dur: np.ndarray
) -> dict[int, tuple[float | None, str, str | None]]:
    """Per kernel name key: ``limit_pct`` (the share of the device's limit its kernel classes
    reach, weighted by time), ``bound`` (compute or memory, of most of its time) and ``cause``
    (the lead cause of most of its time below the target), where the kernels were modelled
    (:mod:`advisor.detectors._efficiency`)."""
    if an is None:
        return {}
    rf = row_figures(an, len(trace.kernels))
    f = rf.fraction[rows]
    bound, text = rf.bound[rows], rf.cause_text[rows]
    modelled = bound != ""
    out: dict[int, tuple[float | None, str, str | None]] = {}
    for code in unique_ints(key[modelled]):
        sel = modelled & (key == code)
        w = dur[sel].astype(float)
        known = ~np.isnan(f[sel])
        wk = w[known]
        pct = 100.0 * float((f[sel][known] * wk).sum() / wk.sum()) if wk.sum() > 0 else None
        causes = pd.Series(w).groupby(text[sel]).sum()
        causes = causes[causes.index != ""]
        bounds = pd.Series(w).groupby(bound[sel]).sum()
        out[int(code)] = (
            None if pct is None else round(pct, 1),
            str(bounds.idxmax()),
            str(causes.idxmax()) if len(causes) else None,
        )
    return out


def top_ops(trace: Trace, locator: Locator | None = None, top: int = TOP) -> tuple[OpRow, ...]:
    ops = trace.cpu_ops
    if not len(ops):
        return ()
    real = ~name_flags(
        ops["name"], lambda n: n.startswith("ProfilerStep#")
    )  # legacy traces: steps are ops
    rows_in = np.flatnonzero((ops["step"].to_numpy() >= 0) & real)
    if not len(rows_in):
        rows_in = np.flatnonzero(real)
    gpu = np.zeros(len(ops), dtype=np.int64)
    k = trace.kernels
    if len(k):
        kop = kernel_ops(trace, k)
        has = kop >= 0
        np.add.at(gpu, kop[has], k["dur_ns"].to_numpy(dtype=np.int64)[has])
    key, label = _name_keys(ops["name"])
    df = pd.DataFrame(
        {
            "name": key[rows_in],
            "dur": ops["dur_ns"].to_numpy(dtype=np.int64)[rows_in],
            "self": op_self_ns(ops)[rows_in],
            "gpu": gpu[rows_in],
            "row": rows_in,
        }
    )
    g = df.groupby("name", sort=False).agg(
        total=("dur", "sum"),
        self_ns=("self", "sum"),
        count=("dur", "size"),
        mean=("dur", "mean"),
        gpu=("gpu", "sum"),
        row=("row", "first"),
    )
    g = g.sort_values(["total", "count"], ascending=False).head(top)
    st = trace.steps
    wall = float(st["dur_ns"].sum()) if len(st) else float(df["dur"].max() if len(df) else 0)
    return tuple(
        OpRow(
            name=label[int(n)],
            count=int(r["count"]),
            total_ms=ms_of_ns(r["total"]),
            self_ms=ms_of_ns(r["self_ns"]),
            mean_us=round(float(r["mean"]) / 1e3, 3),
            share_pct=min(pct_of(float(r["total"]), wall), 100.0),
            gpu_ms=ms_of_ns(r["gpu"]) if len(k) else None,
            source=_where(locator, int(r["row"])),
        )
        for n, r in g.iterrows()
    )


@dataclass
class _Sum:
    """One name's figures summed over the ranks' tables."""

    name: str
    count: int = 0
    total_ms: float = 0.0
    self_ms: float | None = None
    gpu_ms: float | None = None
    op: str | None = None
    source: str | None = None

    def add(self, r: KernelRow | OpRow) -> None:
        self.count += int(r.count or 0)
        self.total_ms += float(r.total_ms or 0.0)
        if isinstance(r, OpRow):
            if isinstance(r.self_ms, int | float):
                self.self_ms = (self.self_ms or 0.0) + float(r.self_ms)
            if isinstance(r.gpu_ms, int | float):
                self.gpu_ms = (self.gpu_ms or 0.0) + float(r.gpu_ms)
        if isinstance(r, KernelRow) and self.op is None and r.op:
            self.op = r.op
        if self.source is None and r.source:
            self.source = r.source


def _merged(tables: Iterable[Iterable[KernelRow | OpRow]], top: int) -> tuple[list[_Sum], float]:
    acc: dict[str, _Sum] = {}
    for rows in tables:
        for r in rows:
            acc.setdefault(str(r.name), _Sum(str(r.name))).add(r)
    whole = sum(a.total_ms for a in acc.values())
    return sorted(acc.values(), key=lambda a: (-a.total_ms, -a.count, a.name))[:top], whole


def _mean_us(a: _Sum) -> float:
    return round(1000.0 * a.total_ms / a.count, 3) if a.count else 0.0


def merge_kernels(tables: Iterable[Iterable[KernelRow]], top: int = TOP) -> tuple[KernelRow, ...]:
    """The top kernels of several ranks: counts and times summed per name over the ranks' own
    top tables (a name outside a rank's top ``TOP`` adds nothing for that rank), the mean and
    the share recomputed (share: of the summed totals of all rows seen), the op and source from
    the first rank that has them."""
    rows, whole = _merged(tables, top)
    return tuple(
        KernelRow(
            name=a.name,
            count=a.count,
            total_ms=round(a.total_ms, 3),
            mean_us=_mean_us(a),
            share_pct=pct_of(a.total_ms, whole),
            op=a.op,
            source=a.source,
        )
        for a in rows
    )


def merge_ops(tables: Iterable[Iterable[OpRow]], top: int = TOP) -> tuple[OpRow, ...]:
    """The top operators of several ranks, as :func:`merge_kernels` (self and GPU time summed
    over the ranks that have them)."""
    rows, whole = _merged(tables, top)
    return tuple(
        OpRow(
            name=a.name,
            count=a.count,
            total_ms=round(a.total_ms, 3),
            mean_us=_mean_us(a),
            share_pct=pct_of(a.total_ms, whole),
            self_ms=UNSET if a.self_ms is None else round(a.self_ms, 3),
            gpu_ms=UNSET if a.gpu_ms is None else round(a.gpu_ms, 3),
            op=None,
            source=a.source,
        )
        for a in rows
    )
