"""Find the user's own source line for a moment on a CPU thread.

With ``with_stack`` the trace has python_function events; the user's frame is the innermost
frame, enclosing the moment on the same thread, whose file is not torch, the standard library
or site-packages. Its line is the call site of the next frame inside it (the ``call_site`` arg
that ``advisor profile`` records), the exact line that was running, or, for work that Python
ran without a call (``if tensor:``, ``float(t)``, operators), the site of the frame's last
call before it; without call sites only the frame's own line is known (where it stood when the
trace began, or its ``def`` line). ``Location.line_is`` says which. Legacy traces carry a ``Call stack`` string on each op
instead, with the running line of every frame.
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
        # plain arrays for row lookups (a DataFrame row per call costs far more than the search)
        ops = trace.cpu_ops
        self._op_tid = ops["tid"].to_numpy() if len(ops) else np.zeros(0, np.int64)
        self._op_ts = ops["ts_ns"].to_numpy() if len(ops) else np.zeros(0, np.int64)
        self._op_stack = ops["call_stack"].to_numpy(dtype=object) if len(ops) else None
        self._py_file = py["file"].to_numpy(dtype=object) if len(py) else None
        self._py_line = py["line"].to_numpy() if len(py) else None
        self._py_func = py["function"].to_numpy(dtype=object) if len(py) else None
        self._call_file = py["call_file"].to_numpy(dtype=object) if len(py) else None
        self._call_line = py["call_line"].to_numpy() if len(py) else None

    def at(self, tid: int, ts_ns: int) -> Location | None:
        """The innermost user frame on ``tid`` that encloses ``ts_ns``."""
        entry = self._by_tid.get(int(tid))
        if entry is None:
            return None
        starts, rows = entry
        i = int(np.searchsorted(starts, ts_ns, side="right")) - 1
        if i < 0:
            return None
        # the chain from the latest frame that started before the moment passes, just below
        # each enclosing frame, through that frame's latest call (enclosing the moment or not)
        row, child = int(rows[i]), -1
        for _ in range(4096):  # bounded: a malformed parent chain cannot loop forever
            if row < 0:
                return None
            if self._user[row] and self._end[row] > ts_ns:
                return self._location(row, child, ts_ns)
            row, child = int(self._parent[row]), row
        return None

    def _location(self, row: int, child: int, ts_ns: int) -> Location:
        """User frame ``row`` at the line of its latest call ``child`` (-1: none) when the
        trace has that call's site, else at the frame's own line."""
        assert self._py_file is not None and self._py_line is not None
        assert self._py_func is not None
        assert self._call_file is not None and self._call_line is not None
        file, func = str(self._py_file[row]), str(self._py_func[row])
        if child >= 0 and self._call_line[child] > 0 and self._call_file[child] == file:
            kind = "call" if self._end[child] > ts_ns else "last-call"
            return Location(file, int(self._call_line[child]), func, line_is=kind)
        return Location(file, int(self._py_line[row]), func, line_is="frame-start")

    def for_op(self, op_idx: int) -> Location | None:
        """The user line that issued cpu_ops row ``op_idx`` (python frames, else Call stack)."""
        if op_idx < 0 or op_idx >= len(self._op_tid):
            return None
        assert self._op_stack is not None
        # backward ops run on the autograd thread: no user frame there (None)
        return self.near(int(self._op_tid[op_idx]), int(self._op_ts[op_idx]),
                         self._op_stack[op_idx])  # fmt: skip

    def near(self, tid: int, ts_ns: int, call_stack: object = None) -> Location | None:
        """:meth:`at`, else the first user frame of a legacy ``Call stack`` string."""
        loc = self.at(tid, ts_ns)
        if loc is None and isinstance(call_stack, str):
            return self._from_call_stack(call_stack)
        return loc

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
    c: Counter[tuple[str, int, str, str]] = Counter()
    for loc in locs:
        if loc is not None:
            c[(loc.file, loc.line, loc.function, loc.line_is)] += 1
    return tuple(Location(f, ln, fn, n, how) for (f, ln, fn, how), n in c.most_common(top))
