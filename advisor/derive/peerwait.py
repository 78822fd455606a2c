"""Waiting for a peer versus moving data, inside each collective.

A collective kernel (NCCL/RCCL) starts on each rank when that rank reaches it, then spins until
the last rank has arrived, then transfers: every rank's copy of one collective *ends* at about
the same time, while the starts differ by how late each rank was. The part before the last
rank's arrival is *waiting for the peer*: the straggler's doing, which no overlap with compute
can hide. The rest is *transfer*, which overlap can hide.

- **Several ranks at hand** (a folder with one trace per rank): the instances of each
  collective are matched across ranks by name and end time (:func:`match_by_end`; instances of
  a process group some rank is not in stay unmatched); the ranks' clocks are aligned on the
  matched ends (:func:`clock_offsets_ns`), then a rank's wait is the time from its own start to
  the last rank's start (:func:`cross_rank_wait_ns`). When the folder holds only some of the
  job's ranks, the last of them may itself wait for a rank that is not there: the wait is then
  at least the one-rank estimate below. :func:`align` (same step, name, stream and order) is
  the ``straggler`` check's matching.
- **One rank only**: the shortest instance of the same collective kernel (same name: algorithm,
  protocol and dtype; same stream) is taken as the transfer time of every instance, and the
  rest as waiting (:func:`single_rank_transfer_ns`). Message sizes are not in the trace, so a
  larger message's longer transfer is counted as waiting too: this overstates waiting and
  understates exposed transfer, which keeps an overlap saving conservative.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from advisor.derive.timeline import covered_by
from advisor.digest import Collectives


def single_rank_transfer_ns(
    names: Sequence[str], streams: np.ndarray, dur_ns: np.ndarray
) -> np.ndarray:
    """Per collective kernel: the transfer time estimated from one rank (see the module doc)."""
    if not len(dur_ns):
        return np.zeros(0, dtype=np.int64)
    df = pd.DataFrame({"n": list(names), "s": np.asarray(streams), "d": np.asarray(dur_ns)})
    return df.groupby(["n", "s"], sort=False)["d"].transform("min").to_numpy(dtype=np.int64)


def split_exposed(
    ts_ns: np.ndarray,
    dur_ns: np.ndarray,
    wait_ns: np.ndarray,
    busy_starts: np.ndarray,
    busy_ends: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(exposed transfer, exposed wait) ns of each collective: the waiting at its start, the
    transfer after it, each minus what the compute intervals (disjoint, sorted) cover."""
    ts = np.asarray(ts_ns, dtype=np.int64)
    end = ts + np.asarray(dur_ns, dtype=np.int64)
    mid = ts + np.clip(np.asarray(wait_ns, dtype=np.int64), 0, np.asarray(dur_ns))
    transfer = (end - mid) - covered_by(busy_starts, busy_ends, mid, end)
    wait = (mid - ts) - covered_by(busy_starts, busy_ends, ts, mid)
    return transfer.astype(np.int64), wait.astype(np.int64)


def align_keys(coll: Collectives, with_stream: bool) -> list[tuple[Any, ...]]:
    """A key per collective of a digest's ``Collectives``: (step, name, stream, occurrence)."""
    seen: Counter[tuple[Any, ...]] = Counter()
    out = []
    for i in range(len(coll)):
        base = (int(coll.step[i]), coll.name[i], int(coll.stream[i]) if with_stream else 0)
        out.append(base + (seen[base],))
        seen[base] += 1
    return out


def align(colls: Sequence[Collectives]) -> tuple[list[tuple[Any, ...]], list[np.ndarray]]:
    """The keys every rank has (sorted) and, per rank, the row of each in its collectives:
    matched with the stream first, else without it (ranks may number streams differently)."""
    for with_stream in (True, False):
        keysets = [align_keys(c, with_stream) for c in colls]
        common = set(keysets[0]).intersection(*keysets[1:])
        if common:
            cols = sorted(common)
            idx = [{k: i for i, k in enumerate(ks)} for ks in keysets]
            return cols, [np.array([ix[k] for k in cols], dtype=np.int64) for ix in idx]
    return [], [np.zeros(0, dtype=np.int64) for _ in colls]


END_TOL_NS = 1_000_000  # copies of one collective end within this on every rank


def match_by_end(
    names: Sequence[Sequence[str]],
    start_ns: Sequence[np.ndarray],
    dur_ns: Sequence[np.ndarray],
    tol_ns: int = END_TOL_NS,
) -> np.ndarray:
    """Rows (ranks) x matched collectives: each rank's row of one collective instance, matched
    to the first rank's by name and end time (nearest end within ``tol_ns`` after removing the
    median clock offset). Instances some rank lacks (another process group) are left out."""
    ref_n = np.asarray(names[0], dtype=object)
    ref_end = np.asarray(start_ns[0]) + np.asarray(dur_ns[0])
    rows = [np.arange(len(ref_end))]
    ok = np.ones(len(ref_end), dtype=bool)
    for nm, s, d in zip(names[1:], start_ns[1:], dur_ns[1:], strict=True):
        end = np.asarray(s) + np.asarray(d)
        n = np.asarray(nm, dtype=object)
        idx, diff = _nearest(ref_n, ref_end, n, end)
        off = int(np.median(diff[idx >= 0])) if (idx >= 0).any() else 0
        if (np.abs(diff) <= tol_ns).sum() * 2 < len(ref_end):  # clocks apart: match again
            idx, diff = _nearest(ref_n, ref_end + off, n, end)
        ok &= (idx >= 0) & (np.abs(diff) <= tol_ns)
        rows.append(idx)
    return np.stack(rows)[:, ok] if len(ref_end) else np.zeros((len(names), 0), dtype=np.int64)


def _nearest(
    ref_n: np.ndarray, ref_end: np.ndarray, n: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each reference collective: the row of the same-named one ending nearest, and the
    difference of the ends (its minus the reference's)."""
    idx = np.full(len(ref_end), -1, dtype=np.int64)
    diff = np.full(len(ref_end), np.iinfo(np.int64).max // 2, dtype=np.int64)
    for name in set(ref_n.tolist()):
        rm, cm = np.flatnonzero(ref_n == name), np.flatnonzero(n == name)
        if not len(cm):
            continue
        order = cm[np.argsort(end[cm], kind="stable")]
        e = end[order]
        j = np.clip(np.searchsorted(e, ref_end[rm]), 0, len(e) - 1)
        jl = np.clip(j - 1, 0, len(e) - 1)
        pick = np.where(np.abs(e[jl] - ref_end[rm]) < np.abs(e[j] - ref_end[rm]), jl, j)
        idx[rm] = order[pick]
        diff[rm] = e[pick] - ref_end[rm]
    return idx, diff


def matched(colls: Sequence[Collectives]) -> tuple[list[np.ndarray], np.ndarray, list[str]]:
    """The collective instances every rank ran: per rank its rows, and each instance's step and
    name (from the first rank). Matched by end time (:func:`match_by_end`), else, when no end
    agrees, by step, name, stream and order (:func:`align`)."""
    m = match_by_end(
        [c.name for c in colls], [c.start_abs_ns for c in colls], [c.dur_ns for c in colls]
    )
    if m.shape[1]:
        rows = [np.asarray(r, dtype=np.int64) for r in m]
    else:
        rows = align(colls)[1]
    first = colls[0]
    return rows, np.asarray(first.step)[rows[0]], [first.name[int(i)] for i in rows[0]]


def clock_offsets_ns(start_ns: np.ndarray, dur_ns: np.ndarray) -> np.ndarray:
    """Per rank (rows), how far its clock runs ahead of the others', from the collectives'
    ends (columns), which coincide on every rank up to the last transfer step."""
    end = start_ns + dur_ns
    if end.shape[1] == 0:
        return np.zeros(end.shape[0], dtype=np.int64)
    ref = np.median(end, axis=0, keepdims=True)
    return np.median(end - ref, axis=1).astype(np.int64)


def cross_rank_wait_ns(start_ns: np.ndarray, dur_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(wait per rank and collective, clock offset per rank): each rank's time from its own
    start to the last rank's start, clocks aligned on the ends, within the kernel's duration."""
    off = clock_offsets_ns(start_ns, dur_ns)
    s = start_ns - off[:, None]
    last = s.max(axis=0, keepdims=True)
    return np.clip(last - s, 0, dur_ns), off
