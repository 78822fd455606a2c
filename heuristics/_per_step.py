"""Per-step figures: which work falls inside the profiled steps, the per-step divisor, and how
times read in findings. Shared by the detectors; not a detector.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from advisor.trace.model import Trace
from advisor.units import fmt_ms_text, ms_of_ns


def n_steps(trace: Trace) -> int:
    """The per-step divisor: every step in the trace (1 for a trace without step markers)."""
    return max(1, len(trace.steps))


def per_step_words(trace: Trace) -> str:
    """ "per step", or how the figure reads when the trace has no step markers."""
    if trace.meta.synthetic_steps:
        return "in the recording's one step (no unit of work repeats in it)"
    return "per step"


def in_steps(trace: Trace, ts_ns: np.ndarray) -> np.ndarray:
    """Whether each instant falls inside a step range (a synthetic step's too: the window
    without its set-up, :mod:`advisor.derive.setup`)."""
    st = trace.steps
    ts_ns = np.asarray(ts_ns, dtype=np.int64)
    if not len(st):
        return np.ones(len(ts_ns), dtype=bool)
    starts = st["ts_ns"].to_numpy()
    ends = st["end_ns"].to_numpy()
    i = np.searchsorted(starts, ts_ns, side="right") - 1
    return (i >= 0) & (ts_ns < ends[np.clip(i, 0, None)])


def rows_in_steps(df: pd.DataFrame, trace: Trace) -> pd.DataFrame:
    """Rows of a trace table tagged with a step (``step`` >= 0)."""
    if "step" not in df:
        return df
    return df[df["step"].to_numpy() >= 0]


def kernel_ns_in_steps(trace: Trace) -> int:
    """GPU kernel time inside the steps (ns): what a "% of GPU kernel time" is a share of."""
    return int(trace.kernels.loc[trace.kernels["step"] >= 0, "dur_ns"].sum())


# nanoseconds as rounded milliseconds (evidence rows); milliseconds for sentences
ms = ms_of_ns
fmt_ms = fmt_ms_text
