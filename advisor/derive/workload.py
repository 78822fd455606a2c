"""What a step computes, as far as the trace says: the input shapes of the ops that launch most
of the GPU work, and the samples per step (:class:`advisor.digest.Workload`). ``advisor diff``
compares them first: two runs whose steps compute different things are not a regression.

- **Top ops**: the CPU ops that launch kernels directly (the innermost op around each launch),
  ranked by the GPU time of the kernels they launch in the steady steps (the host time of the
  ops, on a trace without GPU work); the first :data:`TOP_OPS`.
- **Signature** of a call: its tensor inputs' shapes and dtypes as the profiler recorded them
  (``record_shapes=True``), ``4x128x1024 float; 1024x1024 float``; scalars and empty lists
  left out. Per op, its signatures with their calls per step, the most frequent first. A trace
  recorded without shapes has no signatures (nothing to compare).
- **Samples per step**: the DataLoader's ``batch_size`` from the run's context (run.json of
  ``advisor profile``), times the batches one steady step fetches when the trace holds the
  DataLoader's ranges (one otherwise). Unknown for a trace from elsewhere.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from advisor.derive.dataloader import fetches
from advisor.digest import OpShapes, Workload
from advisor.runinfo import RunInfo
from advisor.trace.model import Trace

TOP_OPS = 8  # ops compared per run
TOP_SIGNATURES = 4  # signatures kept per op


def signature(dims: Any, types: Any) -> str:
    """The tensor inputs of one call, ``4x128x1024 float; 1024x1024 float`` ("" none)."""
    if not isinstance(dims, list | tuple):
        return ""
    tys = list(types) if isinstance(types, list | tuple) else []
    parts = []
    for i, d in enumerate(dims):
        if not isinstance(d, list | tuple) or not d:
            continue
        if not all(isinstance(x, int) for x in d):
            continue  # a list of tensors (TensorList) or of something else: not one tensor
        ty = str(tys[i]) if i < len(tys) and tys[i] else ""
        parts.append("x".join(str(x) for x in d) + (f" {ty}" if ty else ""))
    return "; ".join(parts)


def workload(trace: Trace, run: RunInfo | None = None) -> Workload:
    """The steady steps' top ops with their input signatures, and samples per step."""
    samples, how = _samples(trace, run)
    return Workload(ops=_top_ops(trace), samples_per_step=samples, samples_how=how)


def _top_ops(trace: Trace) -> tuple[OpShapes, ...]:
    ops = trace.cpu_ops
    n = len(trace.steps)
    if not len(ops) or n == 0:
        return ()
    rows, weight = _launching_ops(trace)
    if not len(rows):
        return ()
    name = ops["name"].astype(str).to_numpy()[rows]
    dims = ops["input_dims"].to_numpy()[rows]
    types = ops["input_types"].to_numpy()[rows]
    sig = np.array([signature(d, t) for d, t in zip(dims, types, strict=True)], dtype=object)
    df = pd.DataFrame({"name": name, "sig": sig, "w": weight})
    per_op = df.groupby("name")["w"].sum().sort_values(ascending=False).head(TOP_OPS)
    out = []
    for op, w in per_op.items():
        calls = df[df["name"] == op].groupby("sig").size().sort_values(ascending=False)
        sigs = tuple((str(s), float(c) / n) for s, c in calls.items() if s)[:TOP_SIGNATURES]
        out.append(OpShapes(name=str(op), gpu_ms=float(w) / 1e6 / n, signatures=sigs))
    return tuple(out)


def _launching_ops(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """The ``cpu_ops`` rows inside steady steps that launch kernels, with the GPU time (ns) of
    their kernels; without GPU work, every op in the steps with its host time."""
    k, rt, ops = trace.kernels, trace.runtime, trace.cpu_ops
    if len(k) and len(rt):
        k = k[(k["step"].to_numpy() >= 0) & ~k["is_comm"].to_numpy(dtype=bool)]
        launch = k["launch_idx"].to_numpy()
        ok = (launch >= 0) & (launch < len(rt))
        op = np.full(len(k), -1, dtype=np.int64)
        op[ok] = rt["op_idx"].to_numpy()[launch[ok]]
        has = op >= 0
        if has.any():
            w = pd.Series(k["dur_ns"].to_numpy()[has]).groupby(op[has]).sum()
            return w.index.to_numpy(np.int64), w.to_numpy(np.float64)
    inside = np.flatnonzero(ops["step"].to_numpy() >= 0)
    return inside, ops["dur_ns"].to_numpy(np.float64)[inside]


def _samples(trace: Trace, run: RunInfo | None) -> tuple[float | None, str | None]:
    """Samples per step from run.json's DataLoader batch size (the training loader's), times
    the fetches per steady step the trace shows (one when it shows none)."""
    sizes: list[int] = []
    for dl in run.dataloaders if run is not None else ():
        if dl.phase not in (None, "train"):
            continue
        if dl.batch_size is not None and dl.batch_size > 0:
            sizes.append(dl.batch_size)
    if len(set(sizes)) != 1:
        return None, None  # no loader, or several of different sizes: which one feeds a step?
    f = fetches(trace)
    n = len(trace.steps)
    per_step = float((f["step"].to_numpy() >= 0).sum()) / n if n and len(f) else 0.0
    per = per_step if per_step >= 1 else 1.0
    how = f"DataLoader batch_size {sizes[0]}" + (f" x {per:g} batches per step" if per != 1 else "")
    return sizes[0] * per, how
