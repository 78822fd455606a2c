"""Work that happens once per process, not once per step: what a profiling window that starts
at the top of a script captures before the training loop settles.

Each row of :func:`one_time_events` is one such event with the kind of one-time work it is:

- ``context``: CUDA context and library initialization: the calls that create it
  (``cudaGetDeviceCount``, ``cuInit``, ``cudaDeviceGetStreamPriorityRange``, ``cudaFree(0)``-
  style calls, stream/event/handle creation) when they take long (>= ``LONG_CALL_NS``), and
  any runtime call that is very long (>= ``LONG_FIRST_NS``) before its process launched any GPU
  work, whatever its name: the context is created by whichever call needs it first (a 2 s
  ``cudaStreamIsCapturing`` under the first ``torch.zeros(device="cuda")``), unless the call
  waits on the GPU (a copy or sync in a window opened mid-run waits on earlier work);
- ``module-load``: first-launch module loading: ``cuModuleLoad*``/``cuLibraryLoad*`` calls and
  launch calls (``cudaLaunchKernel``...) that take >= ``LONG_LAUNCH_NS`` (lazy loading);
- ``autotune``: cuDNN autotuning (``cudnnFind*`` calls or ranges);
- ``alloc``: caching-allocator growth (``cudaMalloc``, ``cudaMallocHost``, ``cudaHostAlloc``);
- ``compile``: torch.compile compilation ranges (dynamo's outer ``dynamo`` and
  ``entire_frame_compile`` phases, ``_compile.compile_inner``, AOT autograd, Inductor; not the
  compiled region's execution); :func:`compile_spans` gives them per thread, and the operators run
  inside them (dynamo and AOT autograd tracing the model on fake tensors) are compilation,
  never a step's host work (:func:`in_compile`);
- ``first-call``: a library's host-only set-up inside an op's first call (cuBLAS/cuDNN handles,
  workspaces, heuristics: ~2 ms inside the first ``aten::mm``) with no long runtime call to show
  it: the first call of an op that launches GPU work, whose host time outside runtime calls is
  at least ``FIRST_CALL_NS`` and ``FIRST_CALL_RATIO`` times the median of its later calls (two
  or more) in the same process; the row is that excess;
- ``unrecorded``: time a range spent past the end of the recording (it outlived the window,
  :mod:`advisor.trace.window`) by more than the whole recording, around calls of a
  torch.compile'd region (``Torch-Compiled Region``, ``TorchDynamo``, Inductor's Triton
  kernels): a first call that compiles (Dynamo, Inductor, Triton's JIT) and loads its kernels
  takes seconds, and the profiler's step marker runs on through it while nothing is recorded.

Host-to-device uploads are one-time only where they fall outside the steady steps; that is
decided by :mod:`advisor.derive.steps`, not here.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from advisor.arrays import unique_ints
from advisor.derive.runtime import GPU_WORK_CALL_PARTS, KERNEL_LAUNCH_RE
from advisor.derive.timeline import in_spans, union
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

LONG_CALL_NS = 1_000_000  # a runtime call this long at the start of a process is initialization
LONG_LAUNCH_NS = 1_000_000  # a launch call this long is loading the kernel's module
LONG_FIRST_NS = 100_000_000  # a process's first runtime call this long is creating the context

FIRST_CALL_NS = 1_000_000  # an op's first call this much longer on the host: library set-up
FIRST_CALL_RATIO = 10.0  # ...and this many times its later calls' median

KINDS = ("context", "module-load", "autotune", "alloc", "compile", "first-call", "unrecorded")
LABELS = {
    "context": "CUDA context and library initialization",
    "module-load": "first-launch module loading",
    "autotune": "cuDNN autotuning",
    "alloc": "caching-allocator growth (cudaMalloc)",
    "compile": "torch.compile compilation",
    "first-call": "a first call's host-only library set-up (handles, workspaces)",
    "unrecorded": "time past the end of the recording (not recorded)",
    "upload": "one-off host-to-device uploads (e.g. model.to(device))",
}

_CONTEXT_RE = re.compile(
    r"^(cu|hip)(da)?(Init|DevicePrimaryCtx|CtxCreate|GetDeviceCount|GetDeviceProperties|"
    r"DeviceGetStreamPriorityRange|SetDevice|Free$|StreamCreate|EventCreate|DeviceGetAttribute|"
    r"RuntimeGetVersion|DriverGetVersion)|^(cublas|cudnn|cusparse|cusolver)Create"
)
_WAITS_RE = re.compile(r"Synchronize|Memcpy|Memset|EventQuery|StreamWait|StreamQuery")
_MODULE_RE = re.compile(r"^(cu|hip)(ModuleLoad|LibraryLoad|ModuleGetFunction|LibraryGetKernel)")
_AUTOTUNE_RE = re.compile(r"cudnnFind|miopenFind", re.IGNORECASE)
_ALLOC_RE = re.compile(r"^(cu|hip)(da)?(Malloc|MemAlloc|HostAlloc|MallocHost|MallocAsync)")
# calls of a torch.compile'd region and its Inductor kernels
COMPILED_CALL_RE = re.compile(
    r"^Torch-Compiled Region|^TorchDynamo|CompiledFxGraph|CompiledFunction|^triton_"
)
_COMPILE_RE = re.compile(
    r"^dynamo$|entire_frame_compile|compile_inner|compile_fx|call_user_compiler|"
    r"inductor_compile|_compile\.compile|dynamo_timed|TorchDynamo compile|aot_autograd|"
    r"compile_to_module|async_compile",
    re.IGNORECASE,
)


def _kind_per_name(names: pd.Categorical, rules: list[tuple[str, re.Pattern[str]]]) -> np.ndarray:
    """Per row: the index in KINDS of the first rule its name matches, or -1."""
    cats = [str(c) for c in names.categories]
    per_cat = np.full(len(cats) + 1, -1, dtype=np.int64)
    for i, c in enumerate(cats):
        for kind, rx in rules:
            if rx.search(c):
                per_cat[i] = KINDS.index(kind)
                break
    return per_cat[np.asarray(names.codes)]


def one_time_events(trace: Trace) -> pd.DataFrame:
    """Rows: source (runtime, cpu_ops, annotations), row, ts_ns, end_ns, dur_ns, kind, name."""
    return trace.memo("onetime.events", lambda: _build(trace)).copy(deep=False)


def _build(trace: Trace) -> pd.DataFrame:
    parts = []
    rt = trace.runtime
    if len(rt):
        kind = _kind_per_name(
            rt["name"].array,
            [
                ("module-load", _MODULE_RE),
                ("context", _CONTEXT_RE),
                ("autotune", _AUTOTUNE_RE),
                ("alloc", _ALLOC_RE),
            ],
        )
        dur = rt["dur_ns"].to_numpy()
        ctx_code = KINDS.index("context")
        # stream/event creation and cudaFree are everyday calls: only long ones initialize
        kind = np.where((kind == ctx_code) & (dur < LONG_CALL_NS), -1, kind)
        launch = _kind_per_name(rt["name"].array, [("module-load", KERNEL_LAUNCH_RE)])
        kind = np.where((kind < 0) & (launch >= 0) & (dur >= LONG_LAUNCH_NS), launch, kind)
        # a very long call before its process launched any GPU work creates the context,
        # whatever its name; calls that wait on the GPU (a window opened mid-run) are not
        first = _before_first_launch(rt) & (dur >= LONG_FIRST_NS) & (kind < 0)
        waits = _kind_per_name(rt["name"].array, [("context", _WAITS_RE)]) >= 0
        kind[first & ~waits] = ctx_code
        parts.append(_rows(rt, "runtime", kind))
    for src, df in (("cpu_ops", trace.cpu_ops), ("annotations", trace.annotations)):
        if len(df):
            kind = _kind_per_name(
                df["name"].array, [("compile", _COMPILE_RE), ("autotune", _AUTOTUNE_RE)]
            )
            parts.append(_rows(df, src, kind))
    first = _first_calls(trace)
    if first is not None:
        parts.append(first)
    late = _unrecorded(trace)
    if late is not None:
        parts.append(late)
    out = pd.concat(parts, ignore_index=True) if parts else _rows(rt, "runtime", np.zeros(0))
    return _outermost(out.sort_values("ts_ns", kind="stable").reset_index(drop=True))


def _before_first_launch(rt: pd.DataFrame) -> np.ndarray:
    """Per runtime call: it starts before the first call of its process that queues GPU work
    (a kernel or graph launch, an async copy or memset)."""
    ts, pid = rt["ts_ns"].to_numpy(), rt["pid"].to_numpy()
    queues = name_flags(rt["name"], lambda n: any(p in n for p in GPU_WORK_CALL_PARTS))
    out = np.ones(len(rt), dtype=bool)
    for p in unique_ints(pid):
        own = pid == p
        q = own & queues
        if q.any():
            out[own] = ts[own] < int(ts[q].min())
    return out


def compile_spans(trace: Trace) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per thread id: the disjoint, sorted time ranges of torch.compile compilation (the
    ``compile`` one-time events of cpu_ops and annotations)."""
    return trace.memo("onetime.compile_spans", lambda: _compile_spans(trace))


def _compile_spans(trace: Trace) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    ev = one_time_events(trace)
    ev = ev[(ev["kind"] == "compile").to_numpy()]
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    if not len(ev):
        return out
    tids = np.array(
        [
            int(getattr(trace, str(s))["tid"].iat[int(r)])
            for s, r in zip(*_src_rows(ev), strict=True)
        ]
    )
    ts, end = ev["ts_ns"].to_numpy(), ev["end_ns"].to_numpy()
    for t in unique_ints(tids):
        out[int(t)] = union(ts[tids == t], end[tids == t])
    return out


def _src_rows(ev: pd.DataFrame) -> tuple[list[str], list[int]]:
    return [str(s) for s in ev["source"]], [int(r) for r in ev["row"]]


def in_compile(trace: Trace, tid: np.ndarray, ts_ns: np.ndarray) -> np.ndarray:
    """Whether each moment (thread id, time) falls inside a compile range on that thread."""
    return in_spans(compile_spans(trace), tid, ts_ns)


def _first_calls(trace: Trace) -> pd.DataFrame | None:
    """``first-call`` rows (see the module doc): from the first call's start, its excess."""
    rt, ops = trace.runtime, trace.cpu_ops
    if not len(rt) or not len(ops):
        return None
    op_of = rt["op_idx"].to_numpy()
    launch = name_flags(rt["name"], lambda n: KERNEL_LAUNCH_RE.match(n) is not None)
    rows = unique_ints(op_of[launch & (op_of >= 0)])
    if not len(rows):
        return None
    inside = op_of >= 0
    rt_dur = rt["dur_ns"].to_numpy()
    in_rt = np.bincount(op_of[inside], weights=rt_dur[inside], minlength=len(ops))
    longest = np.zeros(len(ops))
    np.maximum.at(longest, op_of[inside], rt_dur[inside])
    df = pd.DataFrame(
        {
            "row": rows,
            "name": ops["name"].to_numpy()[rows],
            "pid": ops["pid"].to_numpy()[rows],
            "ts": ops["ts_ns"].to_numpy()[rows],
            "host": ops["dur_ns"].to_numpy()[rows] - in_rt[rows],
        }
    ).sort_values("ts", kind="stable")
    out = []
    for _, g in df.groupby(["pid", "name"], sort=False, observed=True):
        if len(g) < 3:
            continue
        first, later = g.iloc[0], g["host"].to_numpy()[1:]
        extra = float(first["host"] - np.median(later))
        if (
            extra >= FIRST_CALL_NS
            and first["host"] >= FIRST_CALL_RATIO * max(float(np.median(later)), 1.0)
            and longest[int(first["row"])] < LONG_CALL_NS
        ):
            out.append((int(first["row"]), int(first["ts"]), int(extra), str(first["name"])))
    if not out:
        return None
    r, ts, dur, name = (list(x) for x in zip(*out, strict=True))
    return pd.DataFrame(
        {
            "source": "cpu_ops",
            "row": r,
            "ts_ns": ts,
            "end_ns": np.add(ts, dur),
            "dur_ns": dur,
            "kind": "first-call",
            "name": name,
        }
    )


def _unrecorded(trace: Trace) -> pd.DataFrame | None:
    """The longest range that ran on past the recording, by more than the recording lasted,
    around compiled-region calls: one row for its unrecorded part (from the window's end)."""
    w = trace.meta.window
    ops = trace.cpu_ops
    if not w.overruns or w.end_ns is None or not len(ops):
        return None
    name, ts, end = w.overruns[0]
    if end - w.end_ns <= w.end_ns:
        return None
    compiled = name_flags(ops["name"], lambda n: COMPILED_CALL_RE.search(n) is not None)
    within = (ops["ts_ns"].to_numpy() >= ts) & (ops["ts_ns"].to_numpy() <= w.end_ns)
    if not (compiled & within).any():
        return None
    return pd.DataFrame(
        {
            "source": ["window"],
            "row": [-1],
            "ts_ns": [w.end_ns],
            "end_ns": [end],
            "dur_ns": [end - w.end_ns],
            "kind": ["unrecorded"],
            "name": [name],
        }
    )


def _rows(df: pd.DataFrame, src: str, kind: np.ndarray) -> pd.DataFrame:
    hit = np.flatnonzero(np.asarray(kind) >= 0)
    return pd.DataFrame(
        {
            "source": src,
            "row": hit,
            "ts_ns": df["ts_ns"].to_numpy()[hit],
            "end_ns": df["end_ns"].to_numpy()[hit],
            "dur_ns": df["dur_ns"].to_numpy()[hit],
            "kind": [KINDS[int(k)] for k in np.asarray(kind)[hit]],
            "name": [str(n) for n in df["name"].to_numpy()[hit]] if len(hit) else [],
        }
    )


def _outermost(ev: pd.DataFrame) -> pd.DataFrame:
    """Drop events inside an earlier, longer one (a compile range holds its own mallocs), so
    the totals count each nanosecond once."""
    if not len(ev):
        return ev
    ends = ev["end_ns"].to_numpy()
    prev_max = np.maximum.accumulate(np.concatenate([[np.iinfo(np.int64).min], ends[:-1]]))
    return ev[ev["end_ns"].to_numpy() > prev_max].reset_index(drop=True)


def total_ns(ev: pd.DataFrame, lo: int, hi: int) -> int:
    """ns of one-time events that start inside [lo, hi)."""
    ts = ev["ts_ns"].to_numpy()
    m = (ts >= lo) & (ts < hi)
    return int(ev["dur_ns"].to_numpy()[m].sum())
