"""Turn decoded events into the normalized tables of :mod:`advisor.trace.model`.

One pass over the events sorts them into per-table row lists; everything after that (time
rebasing, step assignment, correlation, nesting) is vectorized or runs once per table.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from advisor.trace.decode import Args, Decoded, Event
from advisor.trace.model import Device, Trace, TraceMeta

K_OP, K_ANN, K_GANN, K_PY, K_RT, K_DRV, K_KERNEL, K_MEMCPY, K_MEMSET, K_SYNC = range(10)
_IGNORED = -1
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
    "trace": _IGNORED,
    "ac2g": _IGNORED,
    "async": _IGNORED,
    "fwdbwd": _IGNORED,
    "cpu_instant_event": _IGNORED,
    "python": _IGNORED,
    "overhead": _IGNORED,
    "cuda_profiler_range": _IGNORED,
    "async_cpu_to_gpu": _IGNORED,
    "advisor_finding": _IGNORED,  # the findings track of trace.annotated.json.gz
}
_LEGACY_CATS = {"Operator", "Runtime", "Kernel", "Memcpy", "Memset"}
_EMPTY_ARGS = Args()
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
_MEMCPY_RE = re.compile(r"^Mem(?:cpy|set)\s*(\w+)?\s*(?:\((\w+)(?:\s*->\s*(\w+))?\))?")
_FRAME_RE = re.compile(r"^(.*)\((\d+)\): (.*)$")
_NON_USER_PARTS = (
    "/torch/", "site-packages", "dist-packages", "/lib/python3", "/advisor/runner",
    "<frozen", "<string>", "/usr/lib/python",
)  # fmt: skip

# top-level packages whose frames are never the user's own code
_LIBRARY_TOPS = frozenset(
    "torch torchvision torchaudio torchtext triton advisor numpy pandas scipy sklearn PIL tqdm "
    "transformers accelerate datasets huggingface_hub safetensors tokenizers lightning "
    "pytorch_lightning lightning_fabric deepspeed fairscale apex timm einops torchmetrics "
    "typer click rich jinja2 google absl tensorboard fsspec filelock sympy networkx".split()
)

# standard-library modules seen in profiler stacks. Not all of sys.stdlib_module_names: a user's
# own script is written relative to its folder too ("train.py"), and may be called test.py,
# trace.py or profile.py.
_STDLIB_IN_STACKS = frozenset(
    "typing contextlib threading runpy functools abc enum dataclasses copy copyreg inspect "
    "importlib collections weakref multiprocessing concurrent queue selectors socket asyncio "
    "json posixpath genericpath ntpath os random re warnings traceback logging tempfile shutil "
    "pathlib codecs encodings pickle subprocess signal argparse linecache tokenize ast types "
    "operator itertools heapq bisect numbers string textwrap pprint reprlib dis opcode".split()
)
# console-script launchers (frames of /path/to/bin/advisor etc.)
_LAUNCHERS = frozenset({"advisor", "torchrun", "torch-advisor", "python", "python3"})

OP_COLS = ["ts", "dur", "name", "pid", "tid", "external_id", "seq", "fwd_tid",
           "input_dims", "input_types", "call_stack"]  # fmt: skip
ANN_COLS = ["ts", "dur", "name", "pid", "tid", "on_gpu", "external_id"]
PY_COLS = ["ts", "dur", "name", "pid", "tid", "python_id", "parent_id"]
RT_COLS = ["ts", "dur", "name", "pid", "tid", "correlation", "external_id", "is_driver"]
KER_COLS = ["ts", "dur", "name", "device", "stream", "correlation", "external_id", "grid", "block"]
MEM_COLS = [
    "ts",
    "dur",
    "name",
    "device",
    "stream",
    "correlation",
    "external_id",
    "bytes",
    "argkind",
]
SYNC_COLS = ["ts", "dur", "name", "sync_kind", "device", "stream", "correlation"]
MEMORY_COLS = ["ts", "bytes", "total_allocated", "total_reserved", "device_type", "device_id"]


def _norm_id(x: Any, codes: dict[str, int]) -> int:
    if isinstance(x, int):
        return x
    if isinstance(x, str):
        try:
            return int(x)
        except ValueError:
            code = codes.get(x)
            if code is None:
                code = codes[x] = -1000 - len(codes)
            return code
    return -1


def _stream_id(x: Any) -> int:
    if isinstance(x, int):
        return x
    if isinstance(x, str):
        try:
            return int(x, 0)
        except ValueError:
            return -1
    return -1


def build_trace(dec: Decoded, path: str) -> Trace:
    """Build a :class:`Trace` from decoded events (see the module doc of ``model``)."""
    ops: list[tuple] = []
    anns: list[tuple] = []
    pys: list[tuple] = []
    rts: list[tuple] = []
    kers: list[tuple] = []
    mems: list[tuple] = []
    syncs: list[tuple] = []
    memory: list[tuple] = []
    unknown: dict[str, int] = {}
    skipped = dec.skipped_events
    ranges = 0
    legacy = 0
    tmin = np.inf
    tmax = -np.inf
    codes: dict[str, int] = {}
    cats = CATEGORIES
    for ev in dec.events:
        ph = ev.ph
        if ph != "X":
            if ev.name == "[memory]" and ev.ts is not None:
                a = ev.args or _EMPTY_ARGS
                memory.append((ev.ts, a.mem_bytes, a.total_allocated, a.total_reserved,
                               a.device_type, a.device_id))  # fmt: skip
            continue
        cat = ev.cat
        kind = cats.get(cat) if cat is not None else None
        if kind is None:
            if cat is None:
                skipped += 1
                continue
            kind = cats.get(cat.lower())
            if kind is None:
                unknown[cat] = unknown.get(cat, 0) + 1
                continue
            if cat in _LEGACY_CATS:
                legacy += 1
        if kind == _IGNORED:
            if cat == "cuda_profiler_range":
                ranges += 1
            continue
        ts = ev.ts
        dur = ev.dur
        if ts is None or dur is None or dur < 0 or ts != ts or dur != dur:
            skipped += 1
            continue
        if ts < tmin:
            tmin = ts
        if ts + dur > tmax:
            tmax = ts + dur
        a = ev.args or _EMPTY_ARGS
        ext = a.external_id if a.external_id is not None else a.external_id_legacy
        if kind == K_KERNEL:
            dev = a.device if a.device is not None else _norm_id(ev.pid, codes)
            kers.append((ts, dur, ev.name, dev, _stream_id(a.stream), a.correlation, ext,
                         a.grid, a.block))  # fmt: skip
        elif kind == K_RT or kind == K_DRV:
            rts.append((ts, dur, ev.name, _norm_id(ev.pid, codes), _norm_id(ev.tid, codes),
                        a.correlation, ext, kind == K_DRV))  # fmt: skip
        elif kind == K_OP:
            dims = a.input_dims if a.input_dims is not None else a.input_dims_legacy
            ops.append((ts, dur, ev.name, _norm_id(ev.pid, codes), _norm_id(ev.tid, codes), ext,
                        a.seq, a.fwd_tid, dims, a.input_type, a.call_stack))  # fmt: skip
        elif kind == K_PY:
            pys.append((ts, dur, ev.name, _norm_id(ev.pid, codes), _norm_id(ev.tid, codes),
                        a.python_id, a.python_parent_id))  # fmt: skip
        elif kind == K_ANN or kind == K_GANN:
            anns.append((ts, dur, ev.name, _norm_id(ev.pid, codes), _norm_id(ev.tid, codes),
                         kind == K_GANN, ext))  # fmt: skip
        elif kind == K_MEMCPY or kind == K_MEMSET:
            dev = a.device if a.device is not None else _norm_id(ev.pid, codes)
            mems.append((ts, dur, ev.name, dev, _stream_id(a.stream), a.correlation, ext,
                         a.nbytes, a.kind if kind == K_MEMCPY else "Memset"))  # fmt: skip
        else:  # K_SYNC
            syncs.append((ts, dur, ev.name, a.sync_kind, a.device, _stream_id(a.stream),
                          a.correlation))  # fmt: skip
    origin = float(tmin) if tmin != np.inf else 0.0
    T = _Tables(origin)
    cpu_ops = T.frame(ops, OP_COLS)
    annotations = T.frame(anns, ANN_COLS)
    python = T.frame(pys, PY_COLS)
    runtime = T.frame(rts, RT_COLS)
    kernels = T.frame(kers, KER_COLS)
    memcpy = T.frame(mems, MEM_COLS)
    sync_df = T.frame(syncs, SYNC_COLS)
    memory_df = _memory_frame(memory, origin)

    for df, cols in ((cpu_ops, ["external_id", "seq", "fwd_tid"]),
                     (annotations, ["external_id"]), (python, ["python_id", "parent_id"]),
                     (runtime, ["correlation", "external_id"]),
                     (kernels, ["device", "stream", "correlation", "external_id"]),
                     (memcpy, ["device", "stream", "correlation", "external_id"]),
                     (sync_df, ["device", "stream", "correlation"])):  # fmt: skip
        for c in cols:
            df[c] = _int_col(df[c])

    steps, synthetic = _steps(annotations, cpu_ops, origin, tmax)
    for df in (cpu_ops, annotations, python, runtime, sync_df, memory_df):
        df["step"] = _assign_steps(df["ts_ns"].to_numpy(), steps)
    _nest_ops(cpu_ops)
    runtime["op_idx"] = _op_index(runtime, cpu_ops)
    for df in (kernels, memcpy):
        df["launch_idx"] = _launch_index(df, runtime)
        df["step"] = _gpu_steps(df, runtime, steps)
    kernels["is_comm"] = _is_comm(kernels["name"])
    _memcpy_kinds(memcpy)
    _python_frames(python)
    for df in (cpu_ops, annotations, python, runtime, kernels, memcpy, sync_df):
        df["name"] = df["name"].astype("category")

    header = dec.header
    devices = _devices(header)
    dist = (
        header.get("distributedInfo") if isinstance(header.get("distributedInfo"), dict) else None
    )
    rank = dist.get("rank") if dist else None
    world = dist.get("world_size") if dist else None
    base = header.get("baseTimeNanoseconds")
    platform = _platform(runtime, kernels, memcpy, devices)
    meta = TraceMeta(
        path=path,
        origin_us=origin,
        devices=devices,
        distributed=dist,
        rank=rank if isinstance(rank, int) else None,
        world_size=world if isinstance(world, int) else None,
        schema_version=header.get("schemaVersion"),
        base_time_ns=base if isinstance(base, int) else None,
        format="legacy" if legacy else "kineto",
        synthetic_steps=synthetic,
        event_count=len(dec.events) + dec.skipped_events,
        skipped_events=skipped,
        unknown_categories=unknown,
        profiler_ranges=ranges,
        raw_bytes=dec.raw_bytes,
        platform=platform,
    )
    return Trace(meta, kernels, memcpy, runtime, cpu_ops, python, annotations, sync_df,
                 memory_df, steps)  # fmt: skip


class _Tables:
    def __init__(self, origin_us: float) -> None:
        self.origin = origin_us

    def frame(self, rows: list[tuple], cols: list[str]) -> pd.DataFrame:
        df = (
            pd.DataFrame.from_records(rows, columns=cols)
            if rows
            else pd.DataFrame({c: pd.Series([], dtype=object) for c in cols})
        )
        ts = df.pop("ts").to_numpy(dtype=np.float64)
        dur = df.pop("dur").to_numpy(dtype=np.float64)
        ts_ns = np.rint((ts - self.origin) * 1000.0).astype(np.int64)
        dur_ns = np.rint(dur * 1000.0).astype(np.int64)
        df.insert(0, "ts_ns", ts_ns)
        df.insert(1, "dur_ns", dur_ns)
        df.insert(2, "end_ns", ts_ns + dur_ns)
        return df


def _int_col(s: pd.Series) -> pd.Series:
    """Integer ids with -1 for missing (ids are never negative in traces)."""
    if s.dtype.kind == "i":
        return s.astype(np.int64)
    num = pd.to_numeric(s, errors="coerce")
    return num.fillna(-1).astype(np.int64)


def _memory_frame(rows: list[tuple], origin: float) -> pd.DataFrame:
    df = (
        pd.DataFrame.from_records(rows, columns=MEMORY_COLS)
        if rows
        else pd.DataFrame({c: pd.Series([], dtype=float) for c in MEMORY_COLS})
    )
    ts = df.pop("ts").to_numpy(dtype=np.float64)
    df.insert(0, "ts_ns", np.rint((ts - origin) * 1000.0).astype(np.int64))
    df.insert(1, "dur_ns", np.zeros(len(df), dtype=np.int64))
    df.insert(2, "end_ns", df["ts_ns"].to_numpy())
    for c in ("bytes", "total_allocated", "total_reserved"):
        df[c] = pd.to_numeric(df[c], errors="coerce")
    for c in ("device_type", "device_id"):
        df[c] = _int_col(df[c])
    return df


def _steps(
    ann: pd.DataFrame, ops: pd.DataFrame, origin: float, tmax: float
) -> tuple[pd.DataFrame, bool]:
    rows = []
    for df in (ann, ops):
        if not len(df):
            continue
        names = df["name"].astype(str)
        mask = names.str.startswith("ProfilerStep#")
        if "on_gpu" in df:
            mask &= ~df["on_gpu"].astype(bool)
        for name, ts, dur in zip(names[mask], df["ts_ns"][mask], df["dur_ns"][mask], strict=True):
            m = _STEP_RE.match(name)
            if m:
                rows.append((int(m.group(1)), int(ts), int(dur)))
    if rows:
        st = pd.DataFrame(rows, columns=["step", "ts_ns", "dur_ns"])
        st = st.sort_values(["step", "dur_ns"]).drop_duplicates("step", keep="last")
        st = st.sort_values("ts_ns").reset_index(drop=True)
        synthetic = False
    else:
        span = max(0, int(round((tmax - origin) * 1000.0))) if tmax != -np.inf else 0
        st = pd.DataFrame({"step": [0], "ts_ns": [0], "dur_ns": [span]})
        synthetic = True
    st = st.astype({"step": np.int64, "ts_ns": np.int64, "dur_ns": np.int64})
    st["end_ns"] = st["ts_ns"] + st["dur_ns"]
    st["synthetic"] = synthetic
    return st[["step", "ts_ns", "dur_ns", "end_ns", "synthetic"]], synthetic


def _assign_steps(ts: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    starts = steps["ts_ns"].to_numpy()
    ends = steps["end_ns"].to_numpy()
    nums = steps["step"].to_numpy()
    if not len(starts) or not len(ts):
        return np.full(len(ts), -1, dtype=np.int64)
    idx = np.searchsorted(starts, ts, side="right") - 1
    ok = (idx >= 0) & (ts < ends[np.clip(idx, 0, None)])
    return np.where(ok, nums[np.clip(idx, 0, None)], -1).astype(np.int64)


def _nest_ops(ops: pd.DataFrame) -> None:
    """depth and parent_idx of each cpu op within its thread (ops nest properly per thread)."""
    n = len(ops)
    depth = np.zeros(n, dtype=np.int64)
    parent = np.full(n, -1, dtype=np.int64)
    if n:
        order = np.lexsort((-ops["dur_ns"].to_numpy(), ops["ts_ns"].to_numpy(),
                            ops["tid"].to_numpy()))  # fmt: skip
        tids = ops["tid"].to_numpy()[order]
        ts = ops["ts_ns"].to_numpy()[order]
        ends = ops["end_ns"].to_numpy()[order]
        stack: list[int] = []
        stack_end: list[int] = []
        cur_tid = None
        for i in range(n):
            t = tids[i]
            if t != cur_tid:
                stack.clear()
                stack_end.clear()
                cur_tid = t
            s = ts[i]
            while stack_end and stack_end[-1] <= s:
                stack.pop()
                stack_end.pop()
            row = order[i]
            if stack:
                parent[row] = stack[-1]
                depth[row] = len(stack)
            stack.append(row)
            stack_end.append(ends[i])
    ops["depth"] = depth
    ops["parent_idx"] = parent


def _op_index(rt: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """Row in cpu_ops of the op that issued each runtime call.

    Matched by External id when the matched op is on the same thread and encloses the call in
    time; otherwise (some 2.0-era traces set a runtime call's External id to its correlation
    id, which may collide with an unrelated op's id) the innermost op on the same thread whose
    time range encloses the call.
    """
    out = np.full(len(rt), -1, dtype=np.int64)
    if not len(rt) or not len(ops):
        return out
    ext = ops["external_id"].to_numpy()
    valid = ext >= 0
    if valid.any():
        # innermost op wins when an id repeats: deeper ops come later after sorting by depth
        o = pd.Series(np.arange(len(ops))[valid], index=ext[valid])
        o = o.iloc[np.argsort(ops["depth"].to_numpy()[valid], kind="stable")]
        o = o[~o.index.duplicated(keep="last")]
        out = o.reindex(rt["external_id"].to_numpy()).fillna(-1).to_numpy(dtype=np.int64)
    ok = out >= 0
    if ok.any():
        ok &= _encloses(ops, rt, np.clip(out, 0, None))
    if not ok.all():
        out = np.where(ok, out, _enclosing_op(rt, ops))
    return out


_ENCLOSE_TOL_NS = 1000  # clock rounding between op and runtime events


def _encloses(ops: pd.DataFrame, rt: pd.DataFrame, cand: np.ndarray) -> np.ndarray:
    """Whether cpu_ops rows ``cand`` are on each runtime call's thread and enclose it in time."""
    tol = _ENCLOSE_TOL_NS
    return (
        (ops["tid"].to_numpy()[cand] == rt["tid"].to_numpy())
        & (ops["pid"].to_numpy()[cand] == rt["pid"].to_numpy())
        & (ops["ts_ns"].to_numpy()[cand] <= rt["ts_ns"].to_numpy() + tol)
        & (ops["end_ns"].to_numpy()[cand] + tol >= rt["end_ns"].to_numpy())
    )


def _enclosing_op(rt: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """The innermost cpu_ops row on the same thread whose range encloses each runtime call."""
    out = np.full(len(rt), -1, dtype=np.int64)
    parent = ops["parent_idx"].to_numpy()
    o_key = ops["pid"].to_numpy(), ops["tid"].to_numpy()
    r_key = rt["pid"].to_numpy(), rt["tid"].to_numpy()
    o_ts = ops["ts_ns"].to_numpy()
    o_end = ops["end_ns"].to_numpy()
    r_ts = rt["ts_ns"].to_numpy()
    r_end = rt["end_ns"].to_numpy()
    tol = _ENCLOSE_TOL_NS
    o_groups = pd.Series(np.arange(len(ops))).groupby(list(o_key), sort=False).indices
    r_groups = pd.Series(np.arange(len(rt))).groupby(list(r_key), sort=False).indices
    for key, r_rows in r_groups.items():
        o_rows = o_groups.get(key)
        if o_rows is None:
            continue
        # ops sorted by start, longest first on ties: the last op starting at or before a
        # call is the innermost candidate; its ancestors include the op enclosing the call
        order = o_rows[np.lexsort((-(o_end[o_rows] - o_ts[o_rows]), o_ts[o_rows]))]
        pos = np.searchsorted(o_ts[order], r_ts[r_rows] + tol, side="right") - 1
        cand = np.where(pos >= 0, order[np.clip(pos, 0, None)], -1)
        for _ in range(256):
            bad = (cand >= 0) & (o_end[np.clip(cand, 0, None)] + tol < r_end[r_rows])
            if not bad.any():
                break
            cand = np.where(bad, parent[np.clip(cand, 0, None)], cand)
        out[r_rows] = cand
    return out


def _launch_index(gpu: pd.DataFrame, rt: pd.DataFrame) -> np.ndarray:
    if not len(gpu) or not len(rt):
        return np.full(len(gpu), -1, dtype=np.int64)
    corr = rt["correlation"].to_numpy()
    valid = corr >= 0
    s = pd.Series(np.arange(len(rt))[valid], index=corr[valid])
    s = s[~s.index.duplicated(keep="first")]
    return s.reindex(gpu["correlation"].to_numpy()).fillna(-1).to_numpy(dtype=np.int64)


def _gpu_steps(gpu: pd.DataFrame, rt: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """GPU work belongs to the step that launched it; unmatched work goes by its own time."""
    by_time = _assign_steps(gpu["ts_ns"].to_numpy(), steps)
    li = gpu["launch_idx"].to_numpy()
    if not len(rt):
        return by_time
    rt_steps = rt["step"].to_numpy()
    launched = np.where(li >= 0, rt_steps[np.clip(li, 0, None)], -1)
    return np.where(launched >= 0, launched, by_time).astype(np.int64)


def _is_comm(names: pd.Series) -> np.ndarray:
    if not len(names):
        return np.zeros(0, dtype=bool)
    cat = names.astype("category")
    lower = cat.cat.categories.str.lower()
    flags = lower.str.startswith(("nccl", "rccl")) | lower.str.contains("nccldevkernel")
    return np.asarray(flags, dtype=bool)[cat.cat.codes.to_numpy()]


def _memcpy_kinds(mem: pd.DataFrame) -> None:
    names = mem["name"].astype("category") if len(mem) else mem["name"]
    kinds: dict[str, tuple[str, str, str]] = {}
    for n in names.cat.categories if len(mem) else []:
        m = _MEMCPY_RE.match(str(n))
        if str(n).startswith("Memset"):
            kinds[n] = ("Memset", "", (m.group(2) or "") if m else "")
        elif m:
            kinds[n] = (m.group(1) or "", m.group(2) or "", m.group(3) or "")
        else:
            kinds[n] = ("", "", "")
    mem["kind"] = [kinds[n][0] for n in names] if len(mem) else pd.Series([], dtype=object)
    mem["src"] = [kinds[n][1] for n in names] if len(mem) else pd.Series([], dtype=object)
    mem["dst"] = [kinds[n][2] for n in names] if len(mem) else pd.Series([], dtype=object)
    if len(mem):
        arg = mem.pop("argkind")
        missing = (mem["kind"] == "") & arg.apply(lambda v: isinstance(v, str))
        mem.loc[missing, "kind"] = arg[missing]
        for c in ("kind", "src", "dst"):
            mem[c] = mem[c].astype("category")
    else:
        mem.pop("argkind")
    mem["bytes"] = pd.to_numeric(mem["bytes"], errors="coerce").fillna(0).astype(np.int64)


def is_user_file(file: str) -> bool:
    """A source file the user wrote (not torch, the standard library or site-packages)."""
    if not file or file.startswith("<"):
        return False
    f = file.replace("\\", "/")
    # torch >= 2.x writes library frames relative to their sys.path entry: "torch/nn/conv.py",
    # "typing.py"; the first component then names a library or standard-library module
    if not f.startswith("/") and not (len(f) > 1 and f[1] == ":"):
        first = f.split("/", 1)[0].removesuffix(".py")
        if first in _LIBRARY_TOPS or first in _STDLIB_IN_STACKS:
            return False
    if f.rsplit("/", 1)[-1] in _LAUNCHERS:
        return False
    return not any(part in f for part in _NON_USER_PARTS)


def parse_frame(name: str) -> tuple[str, int, str] | None:
    """``"train.py(42): step"`` -> ``("train.py", 42, "step")``."""
    m = _FRAME_RE.match(name)
    if not m:
        return None
    return m.group(1), int(m.group(2)), m.group(3)


def _python_frames(py: pd.DataFrame) -> None:
    if not len(py):
        for c, dt in (
            ("file", object),
            ("line", np.int64),
            ("function", object),
            ("is_user", bool),
        ):
            py[c] = pd.Series([], dtype=dt)
        return
    cat = py["name"].astype("category")
    info = []
    for n in cat.cat.categories:
        fr = parse_frame(str(n))
        if fr is None:
            info.append(("", -1, str(n), False))
        else:
            info.append((fr[0], fr[1], fr[2], is_user_file(fr[0])))
    codes = cat.cat.codes.to_numpy()
    table = pd.DataFrame(info, columns=["file", "line", "function", "is_user"])
    for c in table.columns:
        py[c] = table[c].to_numpy()[codes]


def _devices(header: dict[str, Any]) -> tuple[Device, ...]:
    props = header.get("deviceProperties")
    if not props:
        props = header.get("computeProperties")
    out: list[Device] = []
    if isinstance(props, dict):
        props = [props]
    if not isinstance(props, list):
        return ()
    for i, p in enumerate(props):
        if not isinstance(p, dict):
            continue
        major = p.get("computeMajor", p.get("major"))
        minor = p.get("computeMinor", p.get("minor"))
        cc = (int(major), int(minor)) if isinstance(major, int) and isinstance(minor, int) else None
        name = str(p.get("name", "unknown GPU"))
        warp = p.get("warpSize")
        vendor = "amd" if ("AMD" in name or "Radeon" in name or "Instinct" in name or warp == 64) \
            else ("nvidia" if cc else "unknown")  # fmt: skip
        mem = p.get("totalGlobalMem")
        sms = p.get("numSms", p.get("multiProcessorCount"))
        dev_id = p.get("id", i)
        out.append(Device(
            id=int(dev_id) if isinstance(dev_id, int) else i,
            name=name,
            compute_capability=cc,
            total_memory_bytes=int(mem) if isinstance(mem, int | float) else None,
            num_sms=int(sms) if isinstance(sms, int) else None,
            vendor=vendor,
        ))  # fmt: skip
    return tuple(out)


def _platform(
    rt: pd.DataFrame, ker: pd.DataFrame, mem: pd.DataFrame, devs: tuple[Device, ...]
) -> str:
    if not len(ker) and not len(mem):
        return "cpu"
    if any(d.vendor == "amd" for d in devs):
        return "rocm"
    if len(rt) and rt["name"].astype(str).str.startswith("hip").any():
        return "rocm"
    return "cuda"


__all__ = ["build_trace", "is_user_file", "parse_frame", "Event"]
