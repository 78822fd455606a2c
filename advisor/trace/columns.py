"""Sort decoded event chunks into column arrays, one set per table.

Per chunk, the category and phase of every event are factorized once, then each table takes its
rows with numpy masks and reads its fields with ``map`` over the structs (C loops, no per-event
Python branches). Names become integer ids into one shared list; shapes and other raw JSON values
are decoded once per distinct text and shared between rows.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np

from advisor.arrays import unique_ints
from advisor.trace.structs import NULL, Event

K_OP, K_ANN, K_GANN, K_PY, K_RT, K_DRV, K_KERNEL, K_MEMCPY, K_MEMSET, K_SYNC = range(10)
K_IGNORED, K_UNKNOWN, K_NONE, K_NOT_X = 10, 11, 12, 13
CATEGORIES: dict[str, int] = {
    "cpu_op": K_OP,
    "operator": K_OP,
    "user_annotation": K_ANN,
    "gpu_user_annotation": K_GANN,
    "python_function": K_PY,
    "cuda_runtime": K_RT,
    "runtime": K_RT,
    "cuda_driver": K_DRV,
    "kernel": K_KERNEL,
    "gpu_memcpy": K_MEMCPY,
    "memcpy": K_MEMCPY,
    "gpu_memset": K_MEMSET,
    "memset": K_MEMSET,
    "cuda_sync": K_SYNC,
    # known categories that carry nothing the tables need
    "trace": K_IGNORED,
    "ac2g": K_IGNORED,
    "async": K_IGNORED,
    "fwdbwd": K_IGNORED,
    "cpu_instant_event": K_IGNORED,
    "python": K_IGNORED,
    "overhead": K_IGNORED,
    "cuda_profiler_range": K_IGNORED,
    "async_cpu_to_gpu": K_IGNORED,
    "advisor_finding": K_IGNORED,  # the findings track of trace.annotated.json.gz
}
LEGACY_CATEGORIES = {"Operator", "Runtime", "Kernel", "Memcpy", "Memset"}
TABLES: dict[str, tuple[int, ...]] = {
    "cpu_ops": (K_OP,),
    "annotations": (K_ANN, K_GANN),
    "python": (K_PY,),
    "runtime": (K_RT, K_DRV),
    "kernels": (K_KERNEL,),
    "memcpy": (K_MEMCPY, K_MEMSET),
    "syncs": (K_SYNC,),
}
# A decoding child sends a table's columns in pieces of this many rows: big enough that every
# numeric piece (128 KiB) gets its own mapping in the receiver, freed for good once joined.
SPILL_ROWS = 16384
# columns that hold codes into Columns.values while decoding
OBJECT_COLUMNS: dict[str, tuple[str, ...]] = {
    "cpu_ops": ("input_dims", "input_types", "call_stack", "comm"),
    "python": ("call_site",),
    "kernels": ("grid", "block", "comm"),
    "memcpy": ("argkind",),
    "syncs": ("sync_kind",),
}
# Times beyond these are corrupt: rebased nanoseconds must fit int64 (about 9.2e18).
TS_LIMIT_US = 4e15  # |ts| (microseconds; epoch times are about 1.7e15)
DUR_LIMIT_US = 1e12  # about 11.6 days
_I64 = (-(1 << 63), (1 << 63) - 1)

_PH, _CAT, _NAME, _TS, _DUR = (attrgetter(k) for k in ("ph", "cat", "name", "ts", "dur"))
_PID, _TID, _ARGS = attrgetter("pid"), attrgetter("tid"), attrgetter("args")
_ID = attrgetter("id")
_RANK = attrgetter("rank")
_COLL = attrgetter("coll_name")
# the instant torch.profiler writes where its recording window ends
WINDOW_END_NAME = "Record Window End"
# the category of the span covering the whole recording ("PyTorch Profiler (0)")
TRACE_SPAN_CATEGORIES = ("Trace", "trace")


def _as_int(v: Any) -> int | None:
    """An int, or a string of one (else None)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            return None
    return None


def _decode_raw(text: bytes) -> Any:
    try:
        return msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return None


class Columns:
    """Accumulates the columns of every table over the chunks of one trace."""

    def __init__(self) -> None:
        self.parts: dict[str, dict[str, list[np.ndarray]]] = {
            t: {} for t in (*TABLES, "memory", "flows")
        }
        self.names: dict[str, int] = {}
        self.id_codes: dict[str, int] = {}  # non-numeric pid/tid strings -> negative codes
        # object columns (shapes, grids, call stacks...) hold integer codes into ``values``
        # until ``concat``: each distinct raw JSON text is decoded once, each distinct string
        # kept once, and the columns travel between processes as plain integer arrays
        self.values: list[Any] = []
        self.value_ids: dict[Any, int] = {}  # raw JSON bytes, or ("s", str), -> code
        # when set: called with a table's pieces (taken out of here) every SPILL_ROWS, and by flush
        self.spill: Callable[[dict[str, dict[str, list[np.ndarray]]]], None] | None = None
        self.events = 0
        self.usable = 0
        self.skipped = 0
        self.unknown: Counter[str] = Counter()
        self.legacy = 0
        self.ranges = 0
        self.tmin = math.inf
        self.tmax = -math.inf
        # where the recording window ends: the "Record Window End" instant and the end of the
        # profiler's own span (-inf when the trace has none)
        self.window_end = -math.inf
        self.span_end = -math.inf
        # several ranks in one file: the rank each process id's events carry (``args.rank``)
        # and each process's name (``process_name`` metadata), see advisor.trace.ranksplit
        self.pid_ranks: set[tuple[int, int]] = set()
        self.process_names: dict[int, str] = {}

    # ---------------------------------------------------------------- per chunk
    def add(self, evs: list[Event], dropped: int) -> None:
        n = len(evs)
        self.events += n + dropped
        self.skipped += dropped
        self.usable += n
        if not n:
            return
        ph = _objects(list(map(_PH, evs)))
        isx = ph == "X"
        cc, cu = _factorize(list(map(_CAT, evs)))
        kinds_u = np.array([_kind(c) for c in cu], dtype=np.int8)
        kind = np.where(isx, kinds_u[cc], K_NOT_X)
        ts = np.fromiter(map(_TS, evs), np.float64, n)
        dur = np.fromiter(map(_DUR, evs), np.float64, n)
        with np.errstate(invalid="ignore"):
            ok = (np.abs(ts) <= TS_LIMIT_US) & (dur >= 0) & (dur <= DUR_LIMIT_US)
        self.skipped += int(np.count_nonzero(kind == K_NONE))
        for u in np.flatnonzero(kinds_u == K_UNKNOWN).tolist():
            n_unknown = int(np.count_nonzero(isx & (cc == u)))
            if n_unknown:
                self.unknown[cu[u]] += n_unknown
        for code, c in enumerate(cu):
            if c in LEGACY_CATEGORIES or c == "cuda_profiler_range":
                hits = int(np.count_nonzero(isx & (cc == code)))
                if c == "cuda_profiler_range":
                    self.ranges += hits
                else:
                    self.legacy += hits
        for code, c in enumerate(cu):
            if c in TRACE_SPAN_CATEGORIES:
                m = isx & (cc == code) & ok
                if m.any():
                    self.span_end = max(self.span_end, float((ts + dur)[m].max()))
        self._ranks(evs)
        in_table = kind < K_IGNORED
        self.skipped += int(np.count_nonzero(in_table & ~ok))
        keep = in_table & ok
        if keep.any():
            self.tmin = min(self.tmin, float(ts[keep].min()))
            self.tmax = max(self.tmax, float((ts + dur)[keep].max()))
        for table, ks in TABLES.items():
            sel = kind == ks[0]
            for k in ks[1:]:
                sel |= kind == k
            idx = np.flatnonzero(keep & sel)
            if len(idx):
                getattr(self, "_" + table)(_take(evs, idx), ts[idx], dur[idx], kind[idx])
        not_x = kind == K_NOT_X
        flow = not_x & ((ph == "s") | (ph == "f")) & (np.abs(ts) <= TS_LIMIT_US)
        if flow.any():
            idx = np.flatnonzero(flow)
            self._flows(_take(evs, idx), ts[idx])
        rest = np.flatnonzero(not_x & ~flow)
        if len(rest):
            self._memory(_take(evs, rest), ts[rest])
        if self.spill is not None:
            for table, parts in self.parts.items():
                held = parts.get("ts")
                if held and sum(len(a) for a in held) >= SPILL_ROWS:
                    self.flush(table)

    # ---------------------------------------------------------------- tables
    def _put(self, table: str, **cols: np.ndarray) -> None:
        parts = self.parts[table]
        for k, v in cols.items():
            parts.setdefault(k, []).append(v)

    def _common(self, evs: list[Event], ts: np.ndarray, dur: np.ndarray) -> dict[str, np.ndarray]:
        return {"ts": ts, "dur": dur, "name": self._names(list(map(_NAME, evs)))}

    def _cpu_ops(self, evs: list[Event], ts: np.ndarray, dur: np.ndarray, kind: np.ndarray) -> None:
        a = list(map(_ARGS, evs))
        dims = [x.input_dims if x.input_dims is not NULL else x.input_dims_legacy for x in a]
        self._put(
            "cpu_ops",
            **self._common(evs, ts, dur),
            pid=self._ids(map(_PID, evs)),
            tid=self._ids(map(_TID, evs)),
            external_id=_ext(a),
            seq=_ints(a, "seq"),
            fwd_tid=_ints(a, "fwd_tid"),
            input_dims=self._raws(dims),
            input_types=self._raws(map(attrgetter("input_type"), a)),
            call_stack=self._strs(map(attrgetter("call_stack"), a)),
            comm=self._comm(a),
        )

    def _annotations(
        self, evs: list[Event], ts: np.ndarray, dur: np.ndarray, kind: np.ndarray
    ) -> None:
        a = list(map(_ARGS, evs))
        self._put(
            "annotations",
            **self._common(evs, ts, dur),
            pid=self._ids(map(_PID, evs)),
            tid=self._ids(map(_TID, evs)),
            on_gpu=kind == K_GANN,
            external_id=_ext(a),
        )

    def _python(self, evs: list[Event], ts: np.ndarray, dur: np.ndarray, kind: np.ndarray) -> None:
        a = list(map(_ARGS, evs))
        self._put(
            "python",
            **self._common(evs, ts, dur),
            pid=self._ids(map(_PID, evs)),
            tid=self._ids(map(_TID, evs)),
            python_id=_ints(a, "python_id"),
            parent_id=_ints(a, "python_parent_id"),
            call_site=self._strs(map(attrgetter("call_site"), a)),
        )

    def _runtime(self, evs: list[Event], ts: np.ndarray, dur: np.ndarray, kind: np.ndarray) -> None:
        a = list(map(_ARGS, evs))
        self._put(
            "runtime",
            **self._common(evs, ts, dur),
            pid=self._ids(map(_PID, evs)),
            tid=self._ids(map(_TID, evs)),
            correlation=_ints(a, "correlation"),
            external_id=_ext(a),
            is_driver=kind == K_DRV,
        )

    def _device(self, evs: list[Event], a: list[Any]) -> np.ndarray:
        dev = _ints(a, "device")
        if (dev < 0).any():
            dev = np.where(dev >= 0, dev, self._ids(map(_PID, evs)))
        return dev

    def _kernels(self, evs: list[Event], ts: np.ndarray, dur: np.ndarray, kind: np.ndarray) -> None:
        a = list(map(_ARGS, evs))
        self._put(
            "kernels",
            **self._common(evs, ts, dur),
            device=self._device(evs, a),
            stream=_streams(a),
            correlation=_ints(a, "correlation"),
            external_id=_ext(a),
            pid=self._ids(map(_PID, evs)),
            grid=self._raws(map(attrgetter("grid"), a)),
            block=self._raws(map(attrgetter("block"), a)),
            comm=self._comm(a),
        )

    def _memcpy(self, evs: list[Event], ts: np.ndarray, dur: np.ndarray, kind: np.ndarray) -> None:
        a = list(map(_ARGS, evs))
        argkind = self._raws(map(attrgetter("kind"), a))
        argkind[kind == K_MEMSET] = self._code(("s", "Memset"), "Memset")
        self._put(
            "memcpy",
            **self._common(evs, ts, dur),
            device=self._device(evs, a),
            stream=_streams(a),
            correlation=_ints(a, "correlation"),
            external_id=_ext(a),
            pid=self._ids(map(_PID, evs)),
            bytes=_floats(a, "nbytes"),
            argkind=argkind,
        )

    def _syncs(self, evs: list[Event], ts: np.ndarray, dur: np.ndarray, kind: np.ndarray) -> None:
        a = list(map(_ARGS, evs))
        self._put(
            "syncs",
            **self._common(evs, ts, dur),
            sync_kind=self._strs(map(attrgetter("sync_kind"), a)),
            pid=self._ids(map(_PID, evs)),
            device=_ints(a, "device"),
            stream=_streams(a),
            correlation=_ints(a, "correlation"),
        )

    def _flows(self, evs: list[Event], ts: np.ndarray) -> None:
        """Flow events: where each end of a flow sits (pid, tid, ts) and its id; the table
        builder links launch calls to GPU work through them (:func:`advisor.trace.links`)."""
        self._put(
            "flows",
            ts=ts,
            pid=self._ids(map(_PID, evs)),
            tid=self._ids(map(_TID, evs)),
            fid=self._ids(map(_ID, evs)),
        )

    def _ranks(self, evs: list[Event]) -> None:
        """The (process id, rank) pairs of the events that carry ``args.rank``."""
        ranks = list(map(_RANK, map(_ARGS, evs)))
        if ranks.count(-1) == len(ranks):
            return
        idx = [i for i, r in enumerate(ranks) if r != -1]
        pids = self._ids(_PID(evs[i]) for i in idx)
        for p, r in set(zip(pids.tolist(), (ranks[i] for i in idx), strict=True)):
            v = _as_int(r)
            if v is not None:
                self.pid_ranks.add((p, v))

    def _memory(self, evs: list[Event], ts: np.ndarray) -> None:
        names = list(map(_NAME, evs))
        for i, n in enumerate(names):
            if n == "process_name":
                label = (
                    _decode_raw(bytes(evs[i].args.label)) if evs[i].args.label is not NULL else None
                )
                pid = self._ids([_PID(evs[i])])[0]
                if isinstance(label, str):
                    self.process_names[int(pid)] = label
        ends = [
            t
            for n, t in zip(names, ts.tolist(), strict=True)
            if n == WINDOW_END_NAME and abs(t) <= TS_LIMIT_US
        ]
        if ends:
            self.window_end = max(self.window_end, *ends)
        sel = np.array([n == "[memory]" for n in names], dtype=bool)
        sel &= np.abs(ts) <= TS_LIMIT_US
        if not sel.any():
            return
        idx = np.flatnonzero(sel)
        a = list(map(_ARGS, _take(evs, idx)))
        self._put(
            "memory",
            ts=ts[idx],
            pid=self._ids(map(_PID, _take(evs, idx))),
            bytes=_floats(a, "mem_bytes"),
            total_allocated=_floats(a, "total_allocated"),
            total_reserved=_floats(a, "total_reserved"),
            device_type=_ints(a, "device_type"),
            device_id=_ints(a, "device_id"),
        )

    # ---------------------------------------------------------------- values
    def _names(self, values: list[str]) -> np.ndarray:
        codes, uniq = _factorize(values)
        names = self.names
        ids = np.array([names.setdefault(u, len(names)) for u in uniq], dtype=np.int64)
        return ids[codes]

    def _ids(self, values: Iterable[Any]) -> np.ndarray:
        """pid/tid: ints as they are, numeric strings parsed, other strings coded negative."""
        vals = list(values)
        try:
            return np.array(vals, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            pass
        codes = self.id_codes
        out = []
        for x in vals:
            if isinstance(x, int):
                out.append(x if _I64[0] <= x <= _I64[1] else -1)
                continue
            if isinstance(x, str):
                try:
                    v = int(x)
                    out.append(v if _I64[0] <= v <= _I64[1] else -1)
                    continue
                except ValueError:
                    out.append(codes.setdefault(x, -1000 - len(codes)))
                    continue
            out.append(-1)
        return np.array(out, dtype=np.int64)

    def _raws(self, values: Iterable[msgspec.Raw]) -> np.ndarray:
        """Codes of raw JSON values (-1: absent), each distinct text decoded once."""
        raws = list(values)
        if raws.count(NULL) == len(raws):  # none given: skip the per-value work
            return np.full(len(raws), -1, dtype=np.int64)
        ids = self.value_ids
        keys = [b"" if r is NULL else bytes(r) for r in raws]  # b"": absent (never valid JSON)
        for key in set(keys).difference(ids):
            if key:
                self._code(key, _decode_raw(key))
        ids[b""] = -1
        try:
            return np.fromiter(map(ids.__getitem__, keys), np.int64, len(keys))
        finally:
            del ids[b""]

    def _strs(self, values: Iterable[Any]) -> np.ndarray:
        """Codes of optional strings (-1: None), each distinct string kept once."""
        vals = list(values)
        if vals.count(None) == len(vals):
            return np.full(len(vals), -1, dtype=np.int64)
        code = self._code
        return np.array([-1 if v is None else code(("s", v), v) for v in vals], dtype=np.int64)

    def _comm(self, args: list[Any]) -> np.ndarray:
        """Codes of a collective's metadata, (name, in elements, out elements, dtype, group
        size), where the event carries a ``Collective name`` (-1: none)."""
        names = list(map(_COLL, args))
        if names.count(None) == len(names):
            return np.full(len(names), -1, dtype=np.int64)
        out = np.full(len(names), -1, dtype=np.int64)
        for i, (n, x) in enumerate(zip(names, args, strict=True)):
            if isinstance(n, str):
                v = (
                    n,
                    _int(x.in_nelems),
                    _int(x.out_nelems),
                    str(x.dtype or ""),
                    _int(x.group_size),
                )
                out[i] = self._code(("c", v), v)
        return out

    def _code(self, key: Any, value: Any) -> int:
        code = self.value_ids.get(key)
        if code is None:
            code = self.value_ids[key] = len(self.values)
            self.values.append(value)
        return code

    # ---------------------------------------------------------------- result
    def flush(self, table: str | None = None) -> None:
        """Hand the pieces held so far (of ``table``, or of every table) to ``spill``, each column
        joined into one array."""
        if self.spill is None:
            return
        parts = self.take_parts(table)
        for cols in parts.values():
            for k, v in cols.items():
                cols[k] = [_join(v)]
        if parts:
            self.spill(parts)

    def take_parts(self, table: str | None = None) -> dict[str, dict[str, list[np.ndarray]]]:
        """The column pieces added so far (of ``table``, or all; removed from here): how a
        decoding child sends a trace as it goes, so it never holds the whole (see
        :mod:`advisor.trace.prefetch`)."""
        names = [table] if table is not None else list(self.parts)
        out = {t: self.parts[t] for t in names if self.parts[t]}
        for t in out:
            self.parts[t] = {}
        return out

    def put_parts(self, parts: dict[str, dict[str, list[np.ndarray]]]) -> None:
        """Append pieces taken from another Columns (the same trace, in order)."""
        for t, cols in parts.items():
            mine = self.parts[t]
            for k, v in cols.items():
                mine.setdefault(k, []).extend(v)

    def concat(self, table: str) -> dict[str, np.ndarray]:
        """The table's columns over all chunks (empty arrays when it has no rows); object
        columns come back as the values themselves (None where absent)."""
        parts = self.parts[table]
        out = {k: _join(v) for k, v in parts.items()}
        parts.clear()
        coded = [k for k in OBJECT_COLUMNS.get(table, ()) if k in out]
        if coded:
            lookup = np.empty(len(self.values) + 1, dtype=object)  # code -1: the None at the end
            for i, v in enumerate(self.values):
                lookup[i] = v  # one by one: a list value stays one element
            for k in coded:
                out[k] = lookup[out[k]]
        return out

    def split_by(
        self, key: Callable[[str, dict[str, np.ndarray]], np.ndarray]
    ) -> dict[int, Columns]:
        """These columns split into one Columns per group: ``key(table, columns)`` gives each
        row's group (-1: in none). Names and values are shared; the times and counts are each
        group's own; these columns are emptied."""
        joined = {t: {k: _join(v) for k, v in parts.items()} for t, parts in self.parts.items()}
        for parts in self.parts.values():
            parts.clear()
        groups = {t: key(t, cols) for t, cols in joined.items() if cols}
        out: dict[int, Columns] = {}
        for g in sorted({int(x) for v in groups.values() for x in unique_ints(v) if x >= 0}):
            sub = Columns()
            sub.names, sub.id_codes = self.names, self.id_codes
            sub.values, sub.value_ids = self.values, self.value_ids
            sub.unknown, sub.legacy, sub.ranges = self.unknown, self.legacy, self.ranges
            sub.window_end, sub.span_end = self.window_end, self.span_end
            for t, cols in joined.items():
                if t not in groups:
                    continue
                m = groups[t] == g
                sub.parts[t] = {k: [v[m]] for k, v in cols.items()}
                n = int(np.count_nonzero(m))
                if t in TABLES and n:
                    ts, dur = cols["ts"][m], cols["dur"][m]
                    sub.tmin = min(sub.tmin, float(ts.min()))
                    sub.tmax = max(sub.tmax, float((ts + dur).max()))
                    sub.events += n
            sub.usable = sub.events
            out[g] = sub
        return out

    def name_list(self) -> np.ndarray:
        out = np.empty(len(self.names), dtype=object)
        out[:] = list(self.names)
        return out


def _int(v: Any) -> int:
    """An int arg (a number, or a numeric string); -1 otherwise."""
    try:
        return int(v) if isinstance(v, int | float | str) and not isinstance(v, bool) else -1
    except (ValueError, OverflowError):
        return -1


def _join(pieces: list[np.ndarray]) -> np.ndarray:
    """The pieces end to end, each freed as soon as it is copied (memory: the result plus one
    piece, not twice the column as with ``np.concatenate``); empties ``pieces``."""
    if len(pieces) == 1:
        return pieces.pop()
    out = np.empty(sum(len(p) for p in pieces), dtype=np.result_type(*pieces))
    end = len(out)
    while pieces:
        p = pieces.pop()
        out[end - len(p) : end] = p
        end -= len(p)
    return out


def _kind(cat: str | None) -> int:
    if cat is None:
        return K_NONE
    k = CATEGORIES.get(cat)
    if k is None:
        k = CATEGORIES.get(cat.lower(), K_UNKNOWN)
    return k


def _objects(values: list[Any]) -> np.ndarray:
    """A 1-d object array of the values as they are (lists stay elements)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _factorize(values: list[Any]) -> tuple[np.ndarray, list[Any]]:
    """(code of each value, distinct values in order of first appearance); None is a value.

    A dict is as fast as pandas here, and keeps this module free of the pandas import (a
    decoding child process starts without it)."""
    uniq = list(dict.fromkeys(values))  # two C-level passes instead of a Python loop
    if len(uniq) == 1:
        return np.zeros(len(values), dtype=np.int64), uniq
    index = {v: i for i, v in enumerate(uniq)}
    return np.fromiter(map(index.__getitem__, values), np.int64, len(values)), uniq


def _take(evs: list[Event], idx: np.ndarray) -> list[Event]:
    if len(idx) == len(evs):
        return evs
    return [evs[i] for i in idx.tolist()]


def _ints(args: list[Any], key: str) -> np.ndarray:
    get = attrgetter(key)
    try:
        return np.fromiter(map(get, args), np.int64, len(args))
    except OverflowError:
        vals = map(get, args)
        return np.array([v if _I64[0] <= v <= _I64[1] else -1 for v in vals], dtype=np.int64)


def _ext(args: list[Any]) -> np.ndarray:
    ext = _ints(args, "external_id")
    if (ext < 0).any():
        ext = np.where(ext >= 0, ext, _ints(args, "external_id_legacy"))
    return ext


def _floats(args: list[Any], key: str) -> np.ndarray:
    return np.fromiter(map(attrgetter(key), args), np.float64, len(args))


def _streams(args: list[Any]) -> np.ndarray:
    vals = list(map(attrgetter("stream"), args))
    try:
        return np.array(vals, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        pass
    out = []
    for x in vals:
        v = -1
        if isinstance(x, int):
            v = x
        elif isinstance(x, str):
            try:
                v = int(x, 0)
            except ValueError:
                v = -1
        out.append(v if _I64[0] <= v <= _I64[1] else -1)
    return np.array(out, dtype=np.int64)
