"""The user's own source lines: the one home for "which line of the user's code was this".

With ``with_stack`` the trace has python_function events; legacy traces carry a ``Call stack``
string on each op instead. Two questions, answered from the same frame index:

- :meth:`Locator.at` / :meth:`Locator.for_op`: the innermost frame enclosing a moment whose
  file is the user's (not torch, the standard library or site-packages), at its running line;
- :meth:`Locator.calling_line` / :meth:`Locator.calling_lines`: the line that *directly* called
  an op (past builtins and torch's thin operator wrappers), or None when that caller is library
  code (a loop inside torch or a package is not the user's to change).

A frame's running line is the call site of its latest call (the ``call_site`` arg that
``advisor profile`` records on python_function events): the call enclosing the moment gives the
exact line; work that Python ran without a call (``if tensor:``, ``float(t)``, operators) gets
the site of the frame's last call before it. Without call sites only the frame's own line is
known (where it stood when the trace began, or its ``def`` line). ``Location.line_is`` says
which (``call``, ``last-call``, ``frame-start``); a legacy ``Call stack`` has running lines.

Also the locations run.json records (:func:`run_locations`) and merging/aggregating them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar

import numpy as np
import pandas as pd

from advisor.findings import Location
from advisor.trace.build import is_user_file, parse_frame
from advisor.trace.model import Trace

# thin torch wrappers between a user's line and the op (operators, torch-function modes)
_WRAPPER_FILES = (
    "torch/_tensor.py",
    "torch/overrides.py",
    "torch/utils/_device.py",
    "torch/_ops.py",
    "torch/_jit_internal.py",
)


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
            par = pos.reindex(py["parent_id"].to_numpy()).fillna(-1).to_numpy(np.int64)
            self._parent = np.where(par == np.arange(len(py)), -1, par)  # no self-parent loop
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
        """The innermost user frame on ``tid`` that encloses ``ts_ns``, at its running line."""
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
                file, line, how = self._line_of(row, child, ts_ns)
                assert self._py_func is not None
                return Location(file, line, str(self._py_func[row]), line_is=how)
            row, child = int(self._parent[row]), row
        return None

    def _line_of(self, row: int, child: int, ts_ns: int) -> tuple[str, int, str]:
        """File, running line and ``line_is`` of frame ``row`` whose latest call is ``child``
        (-1: none): that call's site when the trace has it, else the frame's own line."""
        assert self._py_file is not None and self._py_line is not None
        assert self._call_file is not None and self._call_line is not None
        file = str(self._py_file[row])
        if child >= 0 and self._call_line[child] > 0 and self._call_file[child] == file:
            how = "call" if self._end[child] > ts_ns else "last-call"
            return file, int(self._call_line[child]), how
        return file, int(self._py_line[row]), "frame-start"

    def for_op(self, op_idx: int) -> Location | None:
        """The user line that issued cpu_ops row ``op_idx`` (python frames, else Call stack)."""
        if op_idx < 0 or op_idx >= len(self._op_tid):
            return None
        assert self._op_stack is not None
        # backward ops run on the autograd thread: no user frame there (None)
        return self.near(
            int(self._op_tid[op_idx]), int(self._op_ts[op_idx]), self._op_stack[op_idx]
        )

    def near(self, tid: int, ts_ns: int, call_stack: object = None) -> Location | None:
        """:meth:`at`, else the first user frame of a legacy ``Call stack`` string."""
        loc = self.at(tid, ts_ns)
        if loc is None and isinstance(call_stack, str):
            return self._from_call_stack(call_stack)
        return loc

    def for_ops(self, op_rows: Iterable[int]) -> list[Location | None]:
        """:meth:`for_op` for many cpu_ops rows (each distinct row looked up once; rows on a
        thread without Python frames and without a ``Call stack`` string are None at once)."""
        rows = np.fromiter((int(i) for i in op_rows), dtype=np.int64)
        n = len(self._op_tid)
        ok = (rows >= 0) & (rows < n)
        if self._op_stack is not None and len(rows):
            safe = np.where(ok, rows, 0)
            framed = np.isin(self._op_tid[safe], np.fromiter(self._by_tid, np.int64))
            stack = self._op_stack[safe]
            ok &= framed | np.fromiter((isinstance(x, str) for x in stack), bool, len(stack))
        found: dict[int, Location | None] = {}
        out: list[Location | None] = []
        for i, look in zip(rows.tolist(), ok.tolist(), strict=True):
            if not look:
                out.append(None)
                continue
            if i not in found:
                found[i] = self.for_op(i)
            out.append(found[i])
        return out

    def frames_for_op(self, op_idx: int) -> list[tuple[str, int, str, str]]:
        """The Python frames enclosing cpu_ops row ``op_idx``, innermost first (at most 24),
        each as (file, running line, function, line_is): library frames too (a legacy
        trace's ``Call stack`` when there are no Python frames)."""
        if op_idx < 0 or op_idx >= len(self._op_tid):
            return []
        frames = self._frames_at(int(self._op_tid[op_idx]), int(self._op_ts[op_idx]))
        stack = self._op_stack[op_idx] if self._op_stack is not None else None
        if not frames and isinstance(stack, str):  # a legacy trace's Call stack
            for part in stack.split(";")[:24]:
                fr = parse_frame(part.strip())
                if fr is not None:
                    frames.append((*fr, "call"))
        return frames

    def _frames_at(self, tid: int, ts_ns: int) -> list[tuple[str, int, str, str]]:
        """Python frames enclosing ``ts_ns`` on ``tid``, innermost first (at most 24), each as
        (file, running line, function, line_is)."""
        entry = self._by_tid.get(int(tid))
        if entry is None:
            return []
        starts, rows = entry
        i = int(np.searchsorted(starts, ts_ns, side="right")) - 1
        if i < 0:
            return []
        assert self._py_file is not None and self._py_line is not None
        assert self._py_func is not None
        r, child = int(rows[i]), -1
        out: list[tuple[str, int, str, str]] = []
        for _ in range(512):
            if r < 0 or len(out) >= 24:
                break
            if self._end[r] > ts_ns:
                file, line, how = self._line_of(r, child, ts_ns)
                out.append((file, line, str(self._py_func[r]), how))
            r, child = int(self._parent[r]), r
        return out

    def calling_line(self, tid: int, ts_ns: int, call_stack: object = None) -> Location | None:
        """The line that directly called an op at (``tid``, ``ts_ns``): the innermost Python
        frame (else the legacy ``Call stack``), past builtin calls and torch's thin operator
        wrappers, when that frame is the user's own code; None when the op came from library
        code."""
        frames = self._frames_at(tid, ts_ns)
        if not frames and isinstance(call_stack, str):
            for part in call_stack.split(";"):
                fr = parse_frame(part.strip())
                frames.append((*fr, "call") if fr is not None else ("", -1, part.strip(), "call"))
        for file, line, func, how in frames:
            f = file.replace("\\", "/")
            if not f or f.startswith("<") or any(f.endswith(w) for w in _WRAPPER_FILES):
                continue
            return Location(file, line, func, line_is=how) if is_user_file(file) else None
        return None

    def calling_lines(self, op_rows: Iterable[int]) -> list[Location | None]:
        """:meth:`calling_line` for many cpu_ops rows."""
        assert self._op_stack is not None or not len(self._op_tid)
        return [
            self.calling_line(
                int(self._op_tid[r]),
                int(self._op_ts[r]),
                self._op_stack[r] if self._op_stack is not None else None,
            )
            for r in op_rows
        ]

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


class Sited(Protocol):
    """A run.json row that names where ``advisor profile`` saw it (:mod:`advisor.runinfo`)."""

    @property
    def file(self) -> str | None: ...
    @property
    def line(self) -> int | None: ...


S = TypeVar("S", bound=Sited)


def run_locations(rows: Iterable[S], label: Callable[[S], str]) -> list[Location]:
    """Locations from run.json rows that carry ``file`` and ``line`` (where ``advisor profile``
    saw an object made: a DataLoader, an optimizer, a module)."""
    return [
        Location(r.file, r.line, label(r), 1)
        for r in rows
        if isinstance(r.file, str) and isinstance(r.line, int)
    ]


def merge_locations(*groups: Iterable[Location | None], top: int = 5) -> tuple[Location, ...]:
    """The locations of several groups in order, each line once (run.json sites first, where
    the object was made, then the trace's aggregated lines)."""
    seen: set[tuple[str, int]] = set()
    out: list[Location] = []
    for g in groups:
        for loc in g:
            if loc is None or (loc.file, loc.line) in seen:
                continue
            seen.add((loc.file, loc.line))
            out.append(loc)
    return tuple(out[:top])
