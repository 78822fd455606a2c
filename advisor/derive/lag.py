"""How late each rank is, by its arrival at the collectives, from the digests of several ranks'
traces (:class:`advisor.digest.Digest`).

The copies of one collective are matched across ranks (:func:`advisor.derive.peerwait.matched`:
by name and end time, else by step, name, stream and order). A collective's kernel starts on
each rank when that rank reaches it and ends on every rank at about the same time, once the
last rank has arrived and the data moved; so a rank's **arrival** is measured back from the
common end, ``end - duration``, which needs no agreement between the hosts' clocks. At each
matched collective:

- **lateness**: the rank's arrival after the earliest rank's;
- **waiting**: the time from its arrival to the last rank's (spent inside the collective, waiting
  for the others: never counted against it);
- **lag**: its arrival after the median of the other ranks' (none when earlier): how long it
  holds the typical rank back.

The figures add up over a step's collectives. A rank's lag per step is its sum minus the other
ranks' typical (median) sum (ranks that take turns cancel out), never below zero; every figure is
the median over the steps
the ranks share. The *straggler* is the rank with the largest lag. Without a matched collective,
the lag is the rank's step time above the other ranks' (:func:`step_lags`).

:func:`explain` says what the late rank did before it arrived (:mod:`advisor.derive.arrival`):
per collective where it lags, its anchor (its previous collective's end, or its step's start)
against the others' (clocks aligned on the matched ends: a late step start is time lost before
the recorded step), and its stretch before the arrival against theirs, part by part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from advisor.derive.peerwait import clock_offsets_ns, matched
from advisor.digest import PARTS, Digest

PART_LABELS = {
    "compute": "computation on the GPU",
    "copy": "other GPU work (copies, other collectives)",
    "loader": "data loading (GPU idle)",
    "idle": "host work with the GPU idle",
}


def _others_median(m: np.ndarray) -> np.ndarray:
    """For each row r: the median over the other rows (column-wise)."""
    if m.shape[0] == 2:
        return m[::-1].copy()
    out = np.empty_like(m, dtype=np.float64)
    for r in range(m.shape[0]):
        out[r] = np.median(np.delete(m, r, axis=0), axis=0)
    return out


@dataclass(frozen=True)
class Arrivals:
    """Arrival-based figures of the matched collectives (``[rank, instance]`` arrays, ns)."""

    ranks: list[int]
    rows: list[np.ndarray]  # per rank: its Collectives row of each instance
    step: np.ndarray  # each instance's step (the first rank's)
    name: list[str]
    arrival_ns: np.ndarray  # -duration: the arrival before the common end
    lateness_ns: np.ndarray
    waiting_ns: np.ndarray
    lag_ns: np.ndarray
    offsets_ns: np.ndarray  # per rank: its clock's offset (on the matched ends)

    @property
    def steps(self) -> list[int]:
        return sorted(set(self.step.tolist()))

    def per_step(self, a: np.ndarray) -> np.ndarray:
        """``[rank, step]`` sums of ``a`` over each step's instances, in ms."""
        return np.stack([a[:, self.step == s].sum(axis=1) for s in self.steps], axis=1) / 1e6

    def lag_ms(self) -> dict[int, float]:
        """Each rank's lag per step (net of the other ranks' typical lag), median over the
        steps; never below zero (a rank ahead of the others holds nobody back)."""
        per = self.per_step(self.lag_ns)
        net = per - _others_median(per)
        return {r: max(float(np.median(net[i])), 0.0) for i, r in enumerate(self.ranks)}

    def lateness_ms(self) -> dict[int, float]:
        per = self.per_step(self.lateness_ns)
        return {r: float(np.median(per[i])) for i, r in enumerate(self.ranks)}

    def waiting_ms(self) -> dict[int, float]:
        per = self.per_step(self.waiting_ns)
        return {r: float(np.median(per[i])) for i, r in enumerate(self.ranks)}

    def last_counts(self) -> dict[int, int]:
        """How many collectives per step each rank arrives last at (median over the steps)."""
        last = (self.waiting_ns == 0) & (self.lateness_ns > 0)
        per = np.stack([last[:, self.step == s].sum(axis=1) for s in self.steps], axis=1)
        return {r: int(round(float(np.median(per[i])))) for i, r in enumerate(self.ranks)}

    def per_step_count(self) -> int:
        """Matched collectives per step (median over the steps)."""
        return int(np.median([int(np.sum(self.step == s)) for s in self.steps]))


def arrivals(digests: Sequence[Digest]) -> Arrivals | None:
    """The arrival figures of the collectives every rank ran (None: none matched)."""
    colls = [d.collectives for d in digests]
    if len(colls) < 2 or any(not len(c) for c in colls):
        return None
    rows, step, name = matched(colls)
    if not len(step):
        return None
    start = np.stack([c.start_abs_ns[r] for c, r in zip(colls, rows, strict=True)])
    dur = np.stack([c.dur_ns[r] for c, r in zip(colls, rows, strict=True)])
    arrival = -dur
    lateness = arrival - arrival.min(axis=0, keepdims=True)
    waiting = arrival.max(axis=0, keepdims=True) - arrival
    lag = np.maximum(arrival - _others_median(arrival), 0)
    return Arrivals(
        ranks=[d.rank_id for d in digests],
        rows=rows,
        step=np.asarray(step),
        name=name,
        arrival_ns=arrival,
        lateness_ns=lateness,
        waiting_ns=waiting,
        lag_ns=lag.astype(np.int64),
        offsets_ns=clock_offsets_ns(start, dur),
    )


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


@dataclass(frozen=True)
class RankLateness:
    """One rank's figures per step (ms, median over the steps): ``lag`` (see the module doc),
    and by arrival at the matched collectives (None without one) ``lateness`` and ``waiting``."""

    lag_ms: float
    lateness_ms: float | None = None
    waiting_ms: float | None = None


def rank_lateness(digests: Sequence[Digest]) -> dict[int, RankLateness]:
    """Each rank's :class:`RankLateness`: by arrival at the matched collectives, else the lag by
    step time alone."""
    if len(digests) < 2:
        return {}
    arr = arrivals(digests)
    if arr is None:
        return {r: RankLateness(v) for r, v in step_lags(digests)[1].items()}
    lag, late, wait = arr.lag_ms(), arr.lateness_ms(), arr.waiting_ms()
    return {r: RankLateness(lag[r], late[r], wait[r]) for r in arr.ranks}


@dataclass(frozen=True)
class Explanation:
    """What one rank did before the collectives where it lags, per step (ms, median-free sums
    over those collectives divided by the steps): how much later than the others' its anchors
    were (the previous shared collective's end, or the step's start), and per part of the stretch
    from the anchor to its arrival (:data:`advisor.digest.PARTS`) how much longer it was than the
    others' (the other ranks' median)."""

    instances: int  # collectives per step where it lags
    late_start_ms: float  # its step started this much after the others' (at a step's first)
    first_step: bool  # ...and that step is the first in the trace (what came before is not in it)
    extra_ms: dict[str, float]  # per part: its stretches minus the others'
    kernel: str  # its longest computation kernel in those stretches ("" none)
    kernel_ms: float  # that kernel's time per step there


def explain(digests: Sequence[Digest], arr: Arrivals, rank: int) -> Explanation | None:
    """:class:`Explanation` of ``rank`` (None: it lags nowhere, or a trace carries no
    breakdown of the time before its collectives)."""
    i = arr.ranks.index(rank)
    cs = [d.collectives for d in digests]
    pre = [c.before for c in cs]
    hit = arr.lag_ns[i] > 0
    if any(p is None for p in pre) or not hit.any():
        return None
    n_inst = len(arr.step)
    same = np.r_[False, arr.step[1:] == arr.step[:-1]]  # the previous instance is in the step
    anchor = np.zeros((len(cs), n_inst))
    parts = np.zeros((len(cs), n_inst, len(PARTS)))
    for k, (c, p, r, o) in enumerate(zip(cs, pre, arr.rows, arr.offsets_ns, strict=True)):
        assert p is not None
        prev = np.r_[r[:1], r[:-1]]
        anchor[k] = np.where(same, c.start_abs_ns[prev] + c.dur_ns[prev], p.step_abs_ns[r]) - o
        base = np.where(same[:, None], p.at_end_ns[prev], p.at_step_ns[r])
        parts[k] = p.at_start_ns[r] - base
    n = max(len(arr.steps), 1)
    late_start = (anchor - _others_median(anchor))[i]
    at_step = hit & ~same
    extra = {
        part: float((parts[:, :, x] - _others_median(parts[:, :, x]))[i][hit].sum()) / 1e6 / n
        for x, part in enumerate(PARTS)
    }
    own = pre[i]
    assert own is not None
    rows = arr.rows[i][hit]
    kern = np.asarray([own.kernel[int(x)] for x in rows], dtype=object)
    kns = own.kernel_ns[rows].astype(np.float64)
    best, best_ms = "", 0.0
    if len(kns) and kns.max() > 0:
        names, inv = np.unique(kern, return_inverse=True)
        tot = np.bincount(inv, weights=kns)
        j = int(np.argmax(tot))
        best, best_ms = str(names[j]), float(tot[j]) / 1e6 / n
    first_steps = {int(d.step_ids[0]) for d in digests if len(d.step_ids)}
    return Explanation(
        instances=int(round(hit.sum() / n)),
        late_start_ms=float(np.maximum(late_start[at_step], 0).sum()) / 1e6 / n,
        first_step=bool(np.isin(arr.step[at_step], list(first_steps)).any()),
        extra_ms=extra,
        kernel=best,
        kernel_ms=best_ms,
    )
