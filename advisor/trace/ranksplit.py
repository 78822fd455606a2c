"""One file holding several ranks: the ranks it holds, and each one's events.

Tools that merge the traces of a job into one file for a timeline viewer (TraceLens' trace
fusion, as in its "merged_all_events" example) drop each file's ``distributedInfo`` and keep the
ranks apart in the events: each rank's processes get process ids of their own, named in their
``process_name`` metadata (``RANK 3 - CPU``, ``RANK 3 - GPU``), and the events carry
``args.rank``. Read as one trace, four ranks look like one process: the step is the slowest
rank's, per-step counts are summed over the ranks, the idle time is one GPU's.

A file holds several ranks when two or more ranks are named: by ``args.rank`` (each process id
then belongs to the rank its events name; a process id whose events name two ranks splits
nothing) or, for the processes without it, by a process name holding ``rank N``. Each rank is
then the events of its processes: CPU events, GPU work (kernels, copies, memsets, syncs),
flows and memory events by their process id. Events of a process no rank names (the profiler's
own span) are left out. A file whose ranks share process ids cannot be split and is read as one
process.
"""

from __future__ import annotations

import re

import numpy as np

from advisor.trace.columns import Columns

RANK_NAME_RE = re.compile(r"\brank[\s_#:-]*(\d+)", re.IGNORECASE)


def ranks_by_pid(col: Columns) -> dict[int, int]:
    """Each process id's rank when the file holds two or more ranks (else empty)."""
    by_arg: dict[int, set[int]] = {}
    for pid, rank in col.pid_ranks:
        by_arg.setdefault(pid, set()).add(rank)
    if any(len(r) > 1 for r in by_arg.values()):
        return {}  # ranks share process ids: nothing to split by
    out = {pid: next(iter(r)) for pid, r in by_arg.items()}
    for pid, name in col.process_names.items():
        m = RANK_NAME_RE.search(name)
        if m and pid not in out and len(m.group(1)) <= 9:
            out[pid] = int(m.group(1))
    return out if len(set(out.values())) >= 2 else {}


def split_ranks(col: Columns, pid_rank: dict[int, int]) -> dict[int, Columns]:
    """``col`` split into one Columns per rank (``pid_rank``: :func:`ranks_by_pid`)."""
    pids = np.array(sorted(pid_rank), dtype=np.int64)
    ranks = np.array([pid_rank[p] for p in pids.tolist()], dtype=np.int64)

    def rank_of(table: str, cols: dict[str, np.ndarray]) -> np.ndarray:
        p = cols.get("pid")
        if p is None:
            n = len(next(iter(cols.values())))
            return np.full(n, -1, dtype=np.int64)
        i = np.clip(np.searchsorted(pids, p), 0, len(pids) - 1)
        return np.where(pids[i] == p, ranks[i], -1)

    return col.split_by(rank_of)
