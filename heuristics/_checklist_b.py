"""Helpers shared by the checklist-B detectors (not a detector: the leading underscore).

inference-without-no-grad, data-parallel, python-loop, cat-in-loop, single-tensor-optimizer,
fusible-elementwise and memory-headroom read the same derived facts: which op issued a runtime
call, which ops run inside backward, named CPU ranges (``Optimizer.step#...``), GPU idle time
inside a window and the user's own frame around an op. They are computed once per trace here.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Collection
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from advisor.findings import Location
from advisor.timeline import covered_ns, union
from advisor.trace.build import is_user_file, parse_frame
from advisor.trace.model import Trace
from heuristics._gpu_timeline import ms as ms  # re-exported for detectors
from heuristics._gpu_timeline import n_steps as n_steps
from heuristics._gpu_timeline import name_flags

T = TypeVar("T")

# backward work: the engine's wrappers, autograd nodes (``MulBackward0``, a Python Function's
# ``ScatterBackward``) and gradient accumulation
BACKWARD_RE = re.compile(
    r"^autograd::engine::evaluate_function|Backward\d*$|^torch::autograd::AccumulateGrad$"
    r"|^torch::autograd::GraphRoot$"
)

# the first path component of frames that torch >= 2 writes relative to sys.path: libraries

# thin torch wrappers between a user's line and the op (operators, torch-function modes)
_WRAPPER_FILES = ("torch/_tensor.py", "torch/overrides.py", "torch/utils/_device.py",
                  "torch/_ops.py", "torch/_jit_internal.py")  # fmt: skip


def _cached(trace: Trace, key: str, fn: Callable[[], T]) -> T:
    k = (id(trace), key)
    hit = _CACHE.get(k)
    if hit is not None and hit[0]() is trace:
        return hit[1]  # type: ignore[no-any-return]
    val = fn()

    def drop(_ref: object, k: tuple[int, str] = k) -> None:
        _CACHE.pop(k, None)

    _CACHE[k] = (weakref.ref(trace, drop), val)
    return val


_CACHE: dict[tuple[int, str], tuple[weakref.ref[Trace], Any]] = {}


# ---------------------------------------------------------------- small conveniences


def op_names(trace: Trace) -> np.ndarray:
    return _cached(trace, "op_names", lambda: trace.cpu_ops["name"].astype(str).to_numpy())


# ---------------------------------------------------------------- op structure


def inherit(trace: Trace, own: np.ndarray) -> np.ndarray:
    """``own`` spread to descendants: True where the op or any op enclosing it is True."""
    ops = trace.cpu_ops
    out = np.asarray(own, dtype=bool).copy()
    if not len(ops):
        return out
    depth = ops["depth"].to_numpy()
    parent = ops["parent_idx"].to_numpy()
    for d in range(1, int(depth.max()) + 1):
        rows = np.flatnonzero((depth == d) & (parent >= 0))
        out[rows] |= out[parent[rows]]
    return out


def in_backward(trace: Trace) -> np.ndarray:
    """Per cpu_ops row: the op is backward work (an autograd node, or runs inside one)."""

    def make() -> np.ndarray:
        return inherit(trace, name_mask(trace.cpu_ops["name"], BACKWARD_RE))

    return _cached(trace, "in_backward", make)


def runtime_op(trace: Trace) -> np.ndarray:
    """Per runtime row, the cpu_ops row that issued it: the loader's ``op_idx`` (External id when
    that op encloses the call, else the innermost op enclosing it on its thread)."""
    return trace.runtime["op_idx"].to_numpy(dtype=np.int64)


def kernel_op(trace: Trace) -> np.ndarray:
    """Per kernels row, the cpu_ops row whose runtime call launched it (-1 if unknown)."""

    def make() -> np.ndarray:
        li = trace.kernels["launch_idx"].to_numpy()
        rop = runtime_op(trace)
        if not len(rop):
            return np.full(len(li), -1, dtype=np.int64)
        return np.where(li >= 0, rop[np.clip(li, 0, None)], -1).astype(np.int64)

    return _cached(trace, "kernel_op", make)


def top_under(trace: Trace, rows: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """For each op row, the nearest enclosing op (itself included) flagged in ``targets``."""
    parent = trace.cpu_ops["parent_idx"].to_numpy()
    out = np.asarray(rows, dtype=np.int64).copy()
    for _ in range(int(trace.cpu_ops["depth"].max()) + 2 if len(parent) else 0):
        move = (out >= 0) & ~targets[np.clip(out, 0, None)]
        if not move.any():
            break
        out[move] = parent[out[move]]
    return out


def name_mask(values: Any, pattern: re.Pattern[str]) -> np.ndarray:
    """``pattern.search`` over names, evaluated once per distinct name."""
    return name_flags(values, lambda n: pattern.search(n) is not None)


def name_in(values: Any, names: Collection[str]) -> np.ndarray:
    """Whether each name is one of ``names`` (``np.isin`` without comparing every row)."""
    return name_flags(values, frozenset(names).__contains__)


def ranges(trace: Trace, pattern: re.Pattern[str]) -> pd.DataFrame:
    """CPU ranges whose name matches: user annotations and (legacy traces) operators."""
    parts = []
    an = trace.annotations
    if len(an):
        a = an[~an["on_gpu"].to_numpy(dtype=bool)]
        parts.append(a[name_mask(a["name"], pattern)])
    ops = trace.cpu_ops
    if len(ops):
        parts.append(ops[name_mask(ops["name"], pattern)])
    cols = ["name", "ts_ns", "end_ns", "tid", "step"]
    parts = [p[cols].assign(name=p["name"].astype(str)) for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=cols)
    out = pd.concat(parts, ignore_index=True).drop_duplicates(["name", "ts_ns", "tid"])
    return out.sort_values("ts_ns", kind="stable").reset_index(drop=True)


# ---------------------------------------------------------------- GPU busy / idle


def _busy(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    def make() -> tuple[np.ndarray, np.ndarray]:
        act = trace.gpu_activity()
        if not len(act):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        dur = (act["end_ns"] - act["ts_ns"]).groupby(act["device"]).sum()
        g = act[act["device"] == dur.idxmax()]
        return union(g["ts_ns"].to_numpy(), g["end_ns"].to_numpy())

    return _cached(trace, "busy", make)


def gpu_busy_ns(trace: Trace, lo: int, hi: int) -> int:
    """GPU busy time (kernels, copies, memsets) of the main device inside [lo, hi)."""
    bs, be = _busy(trace)
    if hi <= lo or not len(bs):
        return 0
    i0 = int(np.searchsorted(be, lo, side="right"))
    i1 = int(np.searchsorted(bs, hi, side="left"))
    return covered_ns(bs[i0:i1], be[i0:i1], lo, hi)


def gpu_idle_ns(trace: Trace, lo: int, hi: int) -> int:
    return max(0, (hi - lo) - gpu_busy_ns(trace, lo, hi))


# ---------------------------------------------------------------- the user's frame


def _frame_index(trace: Trace) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per thread: frame start times (sorted) and their rows in ``trace.python``."""

    def make() -> dict[int, tuple[np.ndarray, np.ndarray]]:
        py = trace.python
        out = {}
        for tid, g in py.groupby("tid", sort=False):
            g = g.sort_values(["ts_ns", "dur_ns"], ascending=[True, False], kind="stable")
            out[int(tid)] = (g["ts_ns"].to_numpy(), g.index.to_numpy())
        return out

    return _cached(trace, "frames", make)


def _frame_parents(trace: Trace) -> np.ndarray:
    """Per python row, the row of its parent frame (-1 for a root)."""

    def make() -> np.ndarray:
        py = trace.python
        if not len(py):
            return np.zeros(0, np.int64)
        by_id = pd.Series(np.arange(len(py)), index=py["python_id"].to_numpy())
        by_id = by_id[~by_id.index.duplicated(keep="first")]
        par = by_id.reindex(py["parent_id"].to_numpy()).fillna(-1).to_numpy(dtype=np.int64)
        return np.where(par == np.arange(len(py)), -1, par)

    return _cached(trace, "frame_parents", make)


_Frame = tuple[str, int, str, str]  # file, line, function, line_is (see Location)


def _frame_columns(trace: Trace) -> tuple[np.ndarray, ...]:
    def make() -> tuple[np.ndarray, ...]:
        py = trace.python
        return (py["end_ns"].to_numpy(), py["file"].to_numpy(), py["line"].to_numpy(),
                py["function"].to_numpy(), py["call_file"].to_numpy(),
                py["call_line"].to_numpy())  # fmt: skip

    return _cached(trace, "frame_columns", make)


def _frames_at(trace: Trace, tid: int, ts: int) -> list[_Frame]:
    """Python frames enclosing ``ts`` on ``tid``, innermost first (with_stack traces), each at
    the site of its latest call when the trace has it (see ``Location.line_is``).

    The frame that started last before ``ts`` is the innermost enclosing frame or one of its
    descendants (frames nest), so its parent chain leads to every enclosing frame."""
    entry = _frame_index(trace).get(int(tid))
    if entry is None:
        return []
    starts, rows = entry
    i = int(np.searchsorted(starts, ts, side="right")) - 1
    if i < 0:
        return []
    ends, files, lines, funcs, call_files, call_lines = _frame_columns(trace)
    parents = _frame_parents(trace)
    r, child = int(rows[i]), -1
    out: list[_Frame] = []
    for _ in range(512):
        if r < 0 or len(out) >= 24:
            break
        if ends[r] > ts:
            file = str(files[r])
            if child >= 0 and call_lines[child] > 0 and call_files[child] == file:
                how = "call" if ends[child] > ts else "last-call"
                out.append((file, int(call_lines[child]), str(funcs[r]), how))
            else:
                out.append((file, int(lines[r]), str(funcs[r]), "frame-start"))
        r, child = int(parents[r]), r
    return out


def _stack_frames(stack: str) -> list[_Frame]:
    out: list[_Frame] = []
    for part in stack.split(";"):
        fr = parse_frame(part.strip())
        out.append((*fr, "call") if fr is not None else ("", -1, part.strip(), "call"))
    return out


def _frames_for(trace: Trace, tid: int, ts: int, stack: object) -> list[_Frame]:
    frames = _frames_at(trace, tid, ts)
    if not frames and isinstance(stack, str):
        frames = _stack_frames(stack)
    return frames


def calling_line_at(trace: Trace, tid: int, ts: int, stack: object = None) -> Location | None:
    """The line that directly called an op at (``tid``, ``ts``): the innermost Python frame,
    past builtin calls and torch's thin operator wrappers, when that frame is the user's own
    code; None when the op came from library code (a loop inside torch or a package)."""
    for file, line, func, how in _frames_for(trace, tid, ts, stack):
        f = file.replace("\\", "/")
        if not f or f.startswith("<") or any(f.endswith(w) for w in _WRAPPER_FILES):
            continue
        return Location(file, line, func, line_is=how) if is_user_file(file) else None
    return None


def calling_lines(trace: Trace, rows: np.ndarray) -> list[Location | None]:
    """:func:`calling_line_at` for many cpu_ops rows."""
    ops = trace.cpu_ops
    tid = ops["tid"].to_numpy()
    ts = ops["ts_ns"].to_numpy()
    stack = ops["call_stack"].to_numpy()
    return [calling_line_at(trace, int(tid[r]), int(ts[r]), stack[r]) for r in rows]
