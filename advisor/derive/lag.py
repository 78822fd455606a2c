"""How late each rank is: the per-step lag of one rank behind the others, from the digests of
several ranks' traces (:class:`advisor.digest.Digest`).

Two measures, each a median over the steps the ranks share:

- **collective lag** (:func:`collective_lags`): collectives matched across ranks
  (:func:`advisor.derive.peerwait.matched`); at each, a rank's lag is the smaller of its arrival
  (kernel start) after the other ranks' median and how much shorter its kernel is than theirs
  (the others' kernels include the wait for it); summed per step, minus the other ranks'
  typical sum, so mutual random waiting cancels;
- **step lag** (:func:`step_lags`): a rank's step time above the other ranks'.

:func:`rank_lags` combines them (the larger of the two). The ``straggler`` detector reports
from them, and the multi-rank report's per-rank table shows them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from advisor.derive.peerwait import matched
from advisor.digest import Digest

# (rank, step, lag_ms, count, worst collective's name, its ts_us)
LagRow = tuple[int, int, float, int, str, float]


def _others_median(m: np.ndarray) -> np.ndarray:
    """For each row r: the median over the other rows (column-wise)."""
    if m.shape[0] == 2:
        return m[::-1].copy()
    return np.repeat(np.median(m, axis=0, keepdims=True), m.shape[0], axis=0)


def collective_lags(digests: Sequence[Digest]) -> tuple[list[int], dict[int, float], list[LagRow]]:
    """Per-step net collective lag of each rank: (steps, {rank: median lag ms}, rows).

    rows: (rank, step, lag_ms, count, worst_name, worst_ts_us) for each rank and step."""
    take, col_step, col_name = matched([d.collectives for d in digests])
    if not len(col_step):
        return [], {}, []
    start = np.stack([d.collectives.start_abs_ns[t] for d, t in zip(digests, take, strict=True)])
    dur = np.stack([d.collectives.dur_ns[t] for d, t in zip(digests, take, strict=True)])
    arrival = start - _others_median(start)
    shorter = _others_median(dur) - dur
    lag_ns = np.maximum(np.minimum(arrival, shorter), 0)
    steps = sorted(set(col_step.tolist()))
    per_step = np.stack([lag_ns[:, col_step == s].sum(axis=1) for s in steps], axis=1) / 1e6
    net = per_step - _others_median(per_step)
    lags = {d.rank_id: float(np.median(net[i])) for i, d in enumerate(digests)}
    rows = []
    for i, d in enumerate(digests):
        for j, s in enumerate(steps):
            m = np.flatnonzero(col_step == s)
            w = m[int(np.argmax(lag_ns[i, m]))]
            rows.append(
                (
                    d.rank_id,
                    s,
                    float(net[i, j]),
                    int(np.sum(lag_ns[i, m] > 0)),
                    col_name[w],
                    float(d.collectives.ts_us[take[i][w]]),
                )
            )
    return steps, lags, rows


def step_lags(digests: Sequence[Digest]) -> tuple[list[int], dict[int, float], np.ndarray]:
    """Median over common steps of each rank's step time above the other ranks'."""
    common = set(digests[0].step_ids.tolist()).intersection(
        *(d.step_ids.tolist() for d in digests[1:])
    )
    if not common:
        return [], {}, np.zeros((0, 0))
    steps = sorted(common)
    t = np.stack([[d.step_ms[list(d.step_ids).index(s)] for s in steps] for d in digests])
    excess = t - _others_median(t)
    return steps, {d.rank_id: float(np.median(excess[i])) for i, d in enumerate(digests)}, excess


def combine(clag: dict[int, float], slag: dict[int, float]) -> dict[int, float]:
    return {r: max(clag.get(r, 0.0), slag.get(r, 0.0)) for r in sorted(set(clag) | set(slag))}


def rank_lags(digests: Sequence[Digest]) -> dict[int, float]:
    """Each rank's lag per step (ms; the larger of the collective and step-time measures)."""
    if len(digests) < 2:
        return {}
    return combine(collective_lags(digests)[1], step_lags(digests)[1])
