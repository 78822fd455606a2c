"""The compiled-regions view (``views.compiled``): GPU time per torch.compile region and graph,
split by kernel kind, so no GPU time of a compiled model is invisible.

A kernel belongs to the compiled region whose CPU range encloses the call that launched it (a
kernel launch, or the CUDA/HIP graph launch of a ``mode="reduce-overhead"`` graph): the
innermost of an Inductor graph call (the ``## Call CompiledFxGraph <hash> ##`` annotation), a
Dynamo frame (``Torch-Compiled Region: <frame>/<compile>``), or AOTAutograd's
``CompiledFunction`` / ``CompiledFunctionBackward``. Kernels outside any are "eager".

Per region: calls (None for the eager row), GPU time and share of all kernel time in the steps, and that time by kind
(:func:`advisor.detectors._kernelname.parse`): GEMMs (by library), attention (by backend),
convolutions, Triton pointwise / reduction / persistent reduction / template kernels, ATen
elementwise and reduction kernels, other. ``gemms`` lists each GEMM kernel per region with its
tile (from the name) and, where the launching op recorded shapes (eager ops and Inductor's
extern calls outside CUDA graphs), the share of the device's limit it reaches
(:mod:`advisor.detectors._efficiency`); kernels replayed from a CUDA/HIP graph carry neither
shapes nor a grid, and their efficiency is None.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from advisor.detectors._efficiency import Analysis, row_figures
from advisor.detectors._kernelname import parse, short
from advisor.trace.model import Trace
from advisor.trace.names import name_mask
from advisor.viewdata import CompiledGemm, CompiledRegion, CompiledView, KindTime

REGION_OP = re.compile(r"^(?:Torch-Compiled Region|CompiledFunction)")
GRAPH_CALL = re.compile(r"^## Call CompiledFxGraph (\w+) ##$")
EAGER = "eager (outside compiled regions)"
TOP_GEMMS = 12


def _ranges(trace: Trace) -> pd.DataFrame:
    """Compiled-region CPU ranges: label, tid, ts_ns, end_ns, graph (bool: an Inductor graph)."""
    parts = []
    ops = trace.cpu_ops
    if len(ops):
        r = ops[name_mask(ops["name"], REGION_OP)]
        parts.append(
            pd.DataFrame(
                {
                    "label": r["name"].astype(str).to_numpy(),
                    "tid": r["tid"].to_numpy(),
                    "ts_ns": r["ts_ns"].to_numpy(),
                    "end_ns": r["end_ns"].to_numpy(),
                    "graph": False,
                }
            )
        )
    an = trace.annotations
    if len(an):
        a = an[~an["on_gpu"].to_numpy(dtype=bool)]
        a = a[name_mask(a["name"], GRAPH_CALL)]
        labels = [f"graph {GRAPH_CALL.match(str(n))[1][:10]}" for n in a["name"]]  # type: ignore[index]
        parts.append(
            pd.DataFrame(
                {
                    "label": labels,
                    "tid": a["tid"].to_numpy(),
                    "ts_ns": a["ts_ns"].to_numpy(),
                    "end_ns": a["end_ns"].to_numpy(),
                    "graph": True,
                }
            )
        )
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=["label", "tid", "ts_ns", "end_ns", "graph"])
    return pd.concat(parts, ignore_index=True)


def _region_of(trace: Trace, rows: np.ndarray, rng: pd.DataFrame) -> list[str]:
    """Per kernel row: ``region › graph`` label of the innermost enclosing ranges, or EAGER."""
    k = trace.kernels
    rt = trace.runtime
    li = k["launch_idx"].to_numpy()[rows]
    ok = li >= 0
    l_ts = np.where(ok, rt["ts_ns"].to_numpy()[np.clip(li, 0, None)], -1)
    l_tid = np.where(ok, rt["tid"].to_numpy()[np.clip(li, 0, None)], -1)
    out = [EAGER] * len(rows)
    for graph in (False, True):
        sub = rng[rng["graph"].to_numpy() == graph]
        for tid, g in sub.groupby("tid"):
            g = g.sort_values("ts_ns")
            starts, ends = g["ts_ns"].to_numpy(), g["end_ns"].to_numpy()
            labels = g["label"].to_numpy()
            sel = np.flatnonzero(ok & (l_tid == tid))
            i = np.searchsorted(starts, l_ts[sel], side="right") - 1
            inside = (i >= 0) & (l_ts[sel] <= ends[np.clip(i, 0, None)])
            for j, pos in zip(sel[inside].tolist(), i[inside].tolist(), strict=True):
                lab = str(labels[pos])
                out[j] = f"{out[j]} › {lab}" if graph and out[j] != EAGER else lab
    return out


def _kind(name: str) -> str:
    p = parse(name)
    if p.kind == "gemm":
        return f"GEMM ({p.family})"
    if p.kind == "attention":
        return f"attention ({p.family})"
    if p.family == "Triton":
        return f"Triton {p.kind}"
    if p.kind == "conv":
        return "convolution"
    if p.family == "ATen":
        return f"ATen {p.kind}"
    return "other"


def compiled_view(trace: Trace, an: Analysis | None) -> CompiledView | None:
    """``views.compiled`` (see the module doc); None when the trace has no compiled region."""
    rng = _ranges(trace)
    k = trace.kernels
    if not len(rng) or not len(k):
        return None
    m = k["step"].to_numpy() >= 0
    rows = np.flatnonzero(m) if m.any() else np.arange(len(k))
    region = _region_of(trace, rows, rng)
    if all(r == EAGER for r in region):
        return None
    names = k["name"].astype(str).to_numpy()[rows]
    dur = k["dur_ns"].to_numpy()[rows].astype(float)
    kinds = {n: _kind(n) for n in set(names)}
    df = pd.DataFrame({"region": region, "name": names, "ns": dur, "row": rows})
    df["kind"] = df["name"].map(kinds)
    total = float(dur.sum())
    calls = rng.groupby("label").size().to_dict()
    regions: list[CompiledRegion] = []
    for lab, g in df.groupby("region", sort=False):
        by_kind = g.groupby("kind")["ns"].sum().sort_values(ascending=False)
        regions.append(
            CompiledRegion(
                region=str(lab),
                calls=None if lab == EAGER else int(calls.get(str(lab).split(" › ")[-1], 0)),
                gpu_ms=round(float(g["ns"].sum()) / 1e6, 3),
                share_pct=round(100.0 * float(g["ns"].sum()) / total, 2) if total else 0.0,
                kernels=int(len(g)),
                by_kind=tuple(
                    KindTime(kind=str(kd), ms=round(float(v) / 1e6, 3)) for kd, v in by_kind.items()
                ),
            )
        )
    regions.sort(key=lambda r: (r.region == EAGER, -r.gpu_ms))
    compiled_ns = float(df.loc[df["region"] != EAGER, "ns"].sum())
    return CompiledView(
        regions=tuple(regions),
        compiled_pct=round(100.0 * compiled_ns / total, 2) if total else 0.0,
        gemms=_gemms(df, an, trace),
    )


def _gemms(df: pd.DataFrame, an: Analysis | None, trace: Trace) -> tuple[CompiledGemm, ...]:
    g = df[df["kind"].str.startswith("GEMM")]
    if not len(g):
        return ()
    frac = row_figures(an, len(trace.kernels)).fraction
    out: list[CompiledGemm] = []
    for (region, name), s in g.groupby(["region", "name"], sort=False):
        p = parse(str(name))
        f = frac[s["row"].to_numpy()]
        known = ~np.isnan(f)
        w = s["ns"].to_numpy()[known]
        out.append(
            CompiledGemm(
                region=str(region),
                kernel=short(str(name)),
                family=p.family,
                tile="x".join(map(str, p.tile[:2])) if p.tile else None,
                count=int(len(s)),
                ms=round(float(s["ns"].sum()) / 1e6, 3),
                limit_pct=round(100.0 * float((f[known] * w).sum() / w.sum()), 1)
                if known.any() and w.sum() > 0
                else None,
            )
        )
    out.sort(key=lambda r: -r.ms)
    return tuple(out[:TOP_GEMMS])
