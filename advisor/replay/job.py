"""The job replay: every rank's step graph, joined at the collectives.

Each rank's graph comes reduced to its collectives (:mod:`advisor.replay.skeleton`, built in the
worker that read the trace and carried by its :class:`~advisor.digest.Digest`): each collective's
start (the rank's *arrival*) and each step boundary is either decided by the end of an earlier
collective of that rank (plus the measured path after it, which may shrink by at most its
slack) or by nothing the ranks share (its measured time). The copies of one collective are
matched across ranks by name and end time (:func:`advisor.derive.peerwait.matched`; the ranks'
clocks are aligned on the matched ends) and replayed in order:

- a matched collective's transfer starts when the last rank arrives, and lasts its shortest copy
  (the last rank's, which waited for nobody); every copy ends then: the others' waiting is not
  taken from their own kernels but from the other ranks' arrivals;
- a collective no other rank here shares (another process group, or a rank that is not in the
  folder) keeps its measured duration, waiting included.

A rank's replayed step is the time between its replayed boundaries; the job's step is the slowest
rank's, per step. Unchanged, the replay gives back every rank's measured step up to how well the
collectives' ends agree (``accuracy``). What-ifs change the join, not one rank: ``late_rank``
caps that rank's arrival at each collective at the median of the other ranks' (its extra work
before the collectives removed), ``hide_transfer`` hides every collective's transfer (the
waiting stays). Linear in the collectives of all ranks.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from advisor.derive.peerwait import clock_offsets_ns, matched
from advisor.digest import Digest


@dataclass(frozen=True)
class JobReplay:
    """Per rank (rows, in the digests' order) and step every rank has (columns): the measured
    and the replayed step time, ms."""

    ranks: tuple[int, ...]
    steps: tuple[int, ...]
    measured_ms: np.ndarray
    replayed_ms: np.ndarray
    matched: int  # collective instances joined across the ranks

    @property
    def job_measured_ms(self) -> float:
        """The job's step (the slowest rank's), median over the steps."""
        return float(np.median(self.measured_ms.max(axis=0))) if self.steps else 0.0

    @property
    def job_replayed_ms(self) -> float:
        return float(np.median(self.replayed_ms.max(axis=0))) if self.steps else 0.0

    @property
    def worst_error_pct(self) -> float:
        """The largest difference of a rank's replayed step from its measured one, in % of the
        measured (median over the steps)."""
        if not self.steps:
            return 0.0
        err = np.abs(self.replayed_ms - self.measured_ms) / np.maximum(self.measured_ms, 1e-9)
        return float(np.median(err, axis=1).max() * 100.0)


@dataclass(frozen=True)
class _Rank:
    """One rank's collectives and boundaries, times on the common (aligned) clock."""

    start: np.ndarray
    dur: np.ndarray
    wait_est: np.ndarray  # the one-rank estimate of each collective's waiting
    root: np.ndarray
    off: np.ndarray
    slack: np.ndarray
    alt: np.ndarray
    b_root: np.ndarray
    b_off: np.ndarray
    b_slack: np.ndarray
    b_alt: np.ndarray
    b_measured: np.ndarray


def _ranks(digests: Sequence[Digest], offsets: np.ndarray) -> list[_Rank]:
    out = []
    for d, o in zip(digests, offsets.tolist(), strict=True):
        c, sk = d.collectives, d.skeleton
        assert sk is not None
        start = c.start_abs_ns - o
        free = sk.coll_root < 0
        bfree = sk.bound_root < 0
        tr = c.transfer_ns if c.transfer_ns is not None else c.dur_ns
        out.append(
            _Rank(
                start=start,
                dur=c.dur_ns,
                wait_est=np.maximum(c.dur_ns - tr, 0),
                root=sk.coll_root,
                off=np.where(free, 0, sk.coll_off_ns),
                slack=sk.coll_slack_ns,
                alt=sk.coll_alt_root,
                b_root=sk.bound_root,
                b_off=np.where(bfree, sk.bound_off_ns - o, sk.bound_off_ns),
                b_slack=sk.bound_slack_ns,
                b_alt=sk.bound_alt_root,
                b_measured=np.where(bfree, sk.bound_off_ns - o, 0),
            )
        )
    return out


def _bound(measured: int, slack: int, alt: int, r: _Rank, end: np.ndarray) -> int:
    """The earliest a time may move to: ``slack`` before its measured time, moved as the end of
    the collective the limiting edge follows (``alt``, -1: none) moved."""
    shift = int(end[alt]) - int(r.start[alt] + r.dur[alt]) if alt >= 0 else 0
    return measured - slack + shift


def _arrival(r: _Rank, i: int, end: np.ndarray, bounded: bool = True) -> int:
    """Rank ``r``'s replayed arrival at its collective ``i`` (``end``: its replayed ends);
    ``bounded``: no earlier than its slack allows (False: for a rank whose own extra work is
    removed, what follows a collective moves with it)."""
    root = int(r.root[i])
    if root < 0:
        return int(r.start[i])
    t = int(end[root]) + int(r.off[i])
    if not bounded:
        return t
    return max(t, _bound(int(r.start[i]), int(r.slack[i]), int(r.alt[i]), r, end))


def job_replay(
    digests: Sequence[Digest], late_ranks: Collection[int] = (), hide_transfer: bool = False
) -> JobReplay | None:
    """Replay the job (see the module doc); None when a rank has no skeleton (its steps could
    not be replayed) or the ranks share no step. ``late_ranks``: ranks (``Digest.rank``)."""
    if len(digests) < 2 or any(d.skeleton is None for d in digests):
        return None
    common = set(digests[0].step_ids.tolist()).intersection(
        *(d.step_ids.tolist() for d in digests[1:])
    )
    if not common:
        return None
    colls = [d.collectives for d in digests]
    rows, _, _ = matched(colls)
    n_inst = len(rows[0]) if rows else 0
    if n_inst:
        m_start = np.stack([c.start_abs_ns[r] for c, r in zip(colls, rows, strict=True)])
        m_dur = np.stack([c.dur_ns[r] for c, r in zip(colls, rows, strict=True)])
        offsets = clock_offsets_ns(m_start, m_dur)
    else:
        offsets = np.zeros(len(digests), dtype=np.int64)
    rk = _ranks(digests, offsets)
    ends = [r.start + r.dur for r in rk]  # replayed ends, filled in order
    late = np.array([d.rank in set(late_ranks) for d in digests], dtype=bool)
    capped = late.any() and not late.all()
    # the instances in order of their measured transfer start: matched ones, then the rest
    in_match = [np.zeros(len(r.start), dtype=bool) for r in rk]
    events: list[tuple[int, int, int]] = []  # (measured key, kind 0 matched / 1 own, index)
    for j in range(n_inst):
        key = max(int(rk[i].start[rows[i][j]]) for i in range(len(rk)))
        events.append((key, 0, j))
        for i in range(len(rk)):
            in_match[i][rows[i][j]] = True
    own: list[tuple[int, int]] = []
    for i, r in enumerate(rk):
        for x in np.flatnonzero(~in_match[i]).tolist():
            events.append((int(r.start[x]), 1, len(own)))
            own.append((i, x))
    events.sort()
    for _, kind, j in events:
        if kind == 1:
            i, x = own[j]
            r = rk[i]
            keep = int(r.wait_est[x]) if hide_transfer else int(r.dur[x])
            ends[i][x] = _arrival(r, x, ends[i], not late[i]) + keep
            continue
        arr = np.array(
            [_arrival(r, int(rows[i][j]), ends[i], not late[i]) for i, r in enumerate(rk)]
        )
        if capped:
            arr[late] = np.minimum(arr[late], int(np.median(arr[~late])))
        transfer = 0 if hide_transfer else min(int(rk[i].dur[rows[i][j]]) for i in range(len(rk)))
        t_end = int(arr.max()) + transfer
        for i in range(len(rk)):
            ends[i][rows[i][j]] = t_end
    steps = sorted(common)
    meas = np.zeros((len(rk), len(steps)))
    rep = np.zeros((len(rk), len(steps)))
    for i, (d, r) in enumerate(zip(digests, rk, strict=True)):
        b = np.array(
            [
                int(r.b_measured[x])
                if r.b_root[x] < 0
                else max(int(ends[i][r.b_root[x]]) + int(r.b_off[x]), 0)
                for x in range(len(r.b_root))
            ],
            dtype=np.int64,
        )
        bm = _measured_bounds(r, ends_measured=r.start + r.dur)
        if not late[i]:
            lo = [
                _bound(int(bm[x]), int(r.b_slack[x]), int(r.b_alt[x]), r, ends[i])
                for x in range(len(bm))
            ]
            b = np.maximum(b, np.asarray(lo, dtype=np.int64))
        ids = d.step_ids.tolist()
        for j, s in enumerate(steps):
            k = ids.index(s)
            if k + 1 < len(b):
                meas[i, j] = (bm[k + 1] - bm[k]) / 1e6
                rep[i, j] = (b[k + 1] - b[k]) / 1e6
    return JobReplay(
        ranks=tuple(int(d.rank) if d.rank is not None else -1 for d in digests),
        steps=tuple(steps),
        measured_ms=meas,
        replayed_ms=rep,
        matched=n_inst,
    )


def _measured_bounds(r: _Rank, ends_measured: np.ndarray) -> np.ndarray:
    """A rank's step boundaries as measured (aligned clock)."""
    root = np.clip(r.b_root, 0, None)
    at = ends_measured[root] + r.b_off if len(ends_measured) else r.b_off
    return np.where(r.b_root >= 0, at, r.b_measured).astype(np.int64)
