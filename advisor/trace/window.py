"""The recording window: where the trace's recording ends, and the events that outlive it.

The end is the profiler's own span (the ``Trace`` category event, "PyTorch Profiler (0)"), else
the ``Record Window End`` instant; it is never before the last runtime call or GPU activity. A
trace with neither holds no boundary to hold ranges to (its window ends with its last event). Ranges the profiler closes late can
run far past it: Python-tracer frames still open at the stop (the tracer closes them when the
trace is written, hundreds of milliseconds later), a ``ProfilerStep#N`` whose step ends long
after the recording stopped. Host ranges (ops, annotations, Python frames) that end more than
``TOLERANCE`` past the end are cut there, and those that start after it are left out; the trace
did not record that time, so no figure rests on it, and a window without step markers ends with
the last event not cut (the recorded work). The counts go to ``run.trace_quality``
(:mod:`advisor.derive.quality`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from advisor.trace.model import Window

TOLERANCE_NS = 1_000_000  # a range closing this soon after the end closes with it...
TOLERANCE_SHARE = 0.05  # ...or within this share of the window
CLIPPED_TABLES = ("cpu_ops", "annotations", "python")  # host ranges the profiler closes late
MAX_OVERRUNS = 16


def clip(
    tables: dict[str, pd.DataFrame], span_end_us: float, window_end_us: float, origin_us: float
) -> Window:
    """Cut the host ranges of ``tables`` (in place) at the recording's end; what was done."""
    act = [
        int(df["end_ns"].max())
        for n in ("runtime", "kernels", "memcpy", "syncs")
        if len(df := tables[n])
    ]
    ops = tables["cpu_ops"]
    last = max([*act, int(ops["end_ns"].max()) if len(ops) else -1])
    if math.isfinite(span_end_us):
        end, source = _ns(span_end_us, origin_us), "profiler span"
    elif math.isfinite(window_end_us):
        end, source = _ns(window_end_us, origin_us), "Record Window End"
    elif last >= 0:  # no recording boundary in the file: nothing to hold the ranges to
        return Window(max(act, default=last), _last(tables), "last activity")
    else:
        return Window()
    end = max([end, *act])
    limit = end + max(TOLERANCE_NS, int(TOLERANCE_SHARE * max(end, 0)))
    clipped = dropped = latest = 0
    kept = max(act, default=0)
    overruns: list[tuple[str, int, int]] = []
    for name in CLIPPED_TABLES:
        df = tables[name]
        if not len(df):
            continue
        ts, stop = df["ts_ns"].to_numpy(), df["end_ns"].to_numpy()
        late = ts > limit
        over = (stop > limit) & ~late
        if (~late & ~over).any():
            kept = max(kept, int(stop[~late & ~over].max()))
        if not late.any() and not over.any():
            continue
        latest = max(latest, int(stop[late | over].max()))
        if name != "python":
            rows = np.flatnonzero(over)
            for i in rows[np.argsort(ts[rows] - stop[rows], kind="stable")][:MAX_OVERRUNS]:
                overruns.append((str(df["name"].iat[i]), int(ts[i]), int(stop[i])))
        if over.any():
            new_end = np.where(over, end, stop)
            df["end_ns"] = np.maximum(new_end, ts)
            df["dur_ns"] = df["end_ns"].to_numpy() - ts
        clipped += int(over.sum())
        dropped += int(late.sum())
        if late.any():
            tables[name] = df[~late].reset_index(drop=True)
    overruns.sort(key=lambda o: o[1] - o[2])
    return Window(end, kept, source, clipped, dropped, latest, tuple(overruns[:MAX_OVERRUNS]))


def _last(tables: dict[str, pd.DataFrame]) -> int:
    ends = [int(df["end_ns"].max()) for n, df in tables.items() if len(df) and n != "memory"]
    return max(ends, default=0)


def _ns(us: float, origin_us: float) -> int:
    return int(round((us - origin_us) * 1000.0))
