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

from typing import Any

import numpy as np
import pandas as pd

from advisor.analysis.summary import op_self_ns
from advisor.derive.locate import Locator
from advisor.detectors._efficiency import Analysis, row_figures
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

TOP = 15
PER_RANK = frozenset({"limit_pct", "bound", "cause"})


def _ms(ns: float) -> float:
    return round(float(ns) / 1e6, 3)


def _pct(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 2) if whole > 0 else 0.0


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
    return trace.memo("toptables.op_names", lambda: trace.cpu_ops["name"].astype(str).to_numpy())  # type: ignore[no-any-return]


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
) -> list[dict[str, Any]]:
    k = _in_steps(trace.kernels)
    if not len(k):
        return []
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
        name = label[int(code)]  # type: ignore[call-overload]
        launched = df.loc[(key == code) & has_op, "op"]
        op_name, src = None, None
        if len(launched) and len(ops):
            names = _op_names(trace)[launched.to_numpy()]
            vals, counts = np.unique(names, return_counts=True)
            op_name = str(vals[int(np.argmax(counts))])
            first = int(launched.to_numpy()[names == op_name][0])
            src = _where(locator, first)
        rows.append(
            {
                "name": str(name),
                "count": int(r["count"]),
                "total_ms": _ms(r["sum"]),
                "mean_us": round(float(r["mean"]) / 1e3, 3),
                "share_pct": _pct(float(r["sum"]), total),
                "op": op_name,
                "source": src,
                **figures.get(int(code), {"limit_pct": None, "bound": None, "cause": None}),  # type: ignore[call-overload]
            }
        )
    return rows


def _limit_figures(
    an: Analysis | None, trace: Trace, rows: np.ndarray, key: np.ndarray, dur: np.ndarray
) -> dict[int, dict[str, Any]]:
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
    out: dict[int, dict[str, Any]] = {}
    for code in np.unique(key[modelled]):
        sel = modelled & (key == code)
        w = dur[sel].astype(float)
        known = ~np.isnan(f[sel])
        wk = w[known]
        pct = 100.0 * float((f[sel][known] * wk).sum() / wk.sum()) if wk.sum() > 0 else None
        causes = pd.Series(w).groupby(text[sel]).sum()
        causes = causes[causes.index != ""]
        bounds = pd.Series(w).groupby(bound[sel]).sum()
        out[int(code)] = {
            "limit_pct": None if pct is None else round(pct, 1),
            "bound": str(bounds.idxmax()),
            "cause": str(causes.idxmax()) if len(causes) else None,
        }
    return out


def top_ops(trace: Trace, locator: Locator | None = None, top: int = TOP) -> list[dict[str, Any]]:
    ops = trace.cpu_ops
    if not len(ops):
        return []
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
    return [
        {
            "name": label[int(n)],
            "count": int(r["count"]),
            "total_ms": _ms(r["total"]),
            "self_ms": _ms(r["self_ns"]),
            "mean_us": round(float(r["mean"]) / 1e3, 3),
            "share_pct": min(_pct(float(r["total"]), wall), 100.0),
            "gpu_ms": _ms(r["gpu"]) if len(k) else None,
            "source": _where(locator, int(r["row"])),
        }
        for n, r in g.iterrows()
    ]


def merge_tables(tables: list[list[dict[str, Any]]], top: int = TOP) -> list[dict[str, Any]]:
    """The top table of several ranks: counts and times summed per name over the ranks' own
    top tables (a name outside a rank's top ``TOP`` adds nothing for that rank), the mean and
    the share recomputed (share: of the summed totals of all rows seen), the other columns
    (op, source, self and GPU time summed) from the ranks that have them; the kernels'
    efficiency figures (a rank's own) are None."""
    acc: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    for rows in tables:
        for r in rows:
            seen.update(r)
            a = acc.setdefault(
                str(r.get("name")), {"name": str(r.get("name")), "count": 0, "total_ms": 0.0}
            )
            a["count"] += int(r.get("count") or 0)
            a["total_ms"] += float(r.get("total_ms") or 0.0)
            for key in ("self_ms", "gpu_ms"):
                if isinstance(r.get(key), int | float):
                    a[key] = a.get(key, 0.0) + float(r[key])
            for key in ("op", "source"):
                if a.get(key) is None and r.get(key):
                    a[key] = r[key]
    whole = sum(a["total_ms"] for a in acc.values())
    rows_out = sorted(acc.values(), key=lambda a: (-a["total_ms"], -a["count"], a["name"]))[:top]
    for a in rows_out:
        a["mean_us"] = round(1000.0 * a["total_ms"] / a["count"], 3) if a["count"] else 0.0
        a["share_pct"] = _pct(a["total_ms"], whole)
        for key in ("total_ms", "self_ms", "gpu_ms"):
            if key in a:
                a[key] = round(a[key], 3)
        a.setdefault("op", None)
        a.setdefault("source", None)
        for key in PER_RANK & seen:  # efficiency figures are per rank: not merged
            a[key] = None
    return rows_out
