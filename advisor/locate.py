"""Find the user's own source line for a moment on a CPU thread.

With ``with_stack`` the trace has python_function events; the user's line is the innermost
frame, enclosing the moment on the same thread, whose file is not torch, the standard library
or site-packages. Legacy traces carry a ``Call stack`` string on each op instead.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np
import pandas as pd

from advisor.findings import Location
from advisor.trace.build import is_user_file, parse_frame
from advisor.trace.model import Trace


class Locator:
    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        py = trace.python
        # per thread: frames sorted by start; walking parents from the latest frame that started
        # at or before a moment passes through every frame that encloses it (frames nest)
        self._by_tid: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._end = py["end_ns"].to_numpy() if len(py) else np.zeros(0, np.int64)
        self._user = py["is_user"].to_numpy(dtype=bool) if len(py) else np.zeros(0, bool)
        self._parent = np.full(len(py), -1, dtype=np.int64)
        if len(py):
            ids = py["python_id"].to_numpy()
            pos = pd.Series(np.arange(len(py)), index=ids)
            pos = pos[~pos.index.duplicated(keep="first")]
            self._parent = pos.reindex(py["parent_id"].to_numpy()).fillna(-1).to_numpy(np.int64)
            for tid, g in py.groupby("tid", sort=False):
                g = g.sort_values(["ts_ns", "dur_ns"], ascending=[True, False], kind="stable")
                self._by_tid[int(tid)] = (g["ts_ns"].to_numpy(), g.index.to_numpy())
        self._stack_cache: dict[str, Location | None] = {}

    def at(self, tid: int, ts_ns: int) -> Location | None:
        """The innermost user frame on ``tid`` that encloses ``ts_ns``."""
        entry = self._by_tid.get(int(tid))
        if entry is None:
            return None
        starts, rows = entry
        i = int(np.searchsorted(starts, ts_ns, side="right")) - 1
        if i < 0:
            return None
        row = int(rows[i])
        for _ in range(4096):  # bounded: a malformed parent chain cannot loop forever
            if row < 0:
                return None
            if self._user[row] and self._end[row] > ts_ns:
                r = self.trace.python.iloc[row]
                return Location(str(r["file"]), int(r["line"]), str(r["function"]))
            row = int(self._parent[row])
        return None

    def for_op(self, op_idx: int) -> Location | None:
        """The user line that issued cpu_ops row ``op_idx`` (python frames, else Call stack)."""
        if op_idx < 0 or op_idx >= len(self.trace.cpu_ops):
            return None
        op = self.trace.cpu_ops.iloc[op_idx]
        loc = self.at(int(op["tid"]), int(op["ts_ns"]))
        if loc is not None:
            return loc
        stack = op["call_stack"]
        if isinstance(stack, str):
            return self._from_call_stack(stack)
        # backward ops run on the autograd thread: no user frame there
        return None

    def _from_call_stack(self, stack: str) -> Location | None:
        if stack in self._stack_cache:
            return self._stack_cache[stack]
        found = None
        for frame in stack.split(";"):
            fr = parse_frame(frame.strip())
            if fr and is_user_file(fr[0]):
                found = Location(fr[0], fr[1], fr[2])
                break
        self._stack_cache[stack] = found
        return found


def aggregate(locs: Iterable[Location | None], top: int = 5) -> tuple[Location, ...]:
    """Count identical lines and return the most frequent first."""
    c: Counter[tuple[str, int, str]] = Counter()
    for loc in locs:
        if loc is not None:
            c[(loc.file, loc.line, loc.function)] += 1
    return tuple(Location(f, ln, fn, n) for (f, ln, fn), n in c.most_common(top))
