"""Turn the decoded columns into the normalized tables of :mod:`advisor.trace.model`.

Columns arrive as numpy arrays (see :mod:`advisor.trace.columns`); this module rebases times,
builds categorical names, finds the steps and derives the links (:mod:`advisor.trace.links`),
all vectorized.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from advisor.trace.columns import Columns
from advisor.trace.commroles import Behaviour, blocks_of, is_comm
from advisor.trace.gpus import arch_of, spec_for
from advisor.trace.identity import identify
from advisor.trace.links import (
    assign_steps,
    call_sites,
    external_launches,
    flow_launches,
    gpu_steps,
    is_user_file,
    launch_index,
    memcpy_kinds,
    nest_ops,
    op_index,
    parse_frame,
    python_frames,
)
from advisor.trace.model import Device, Trace, TraceMeta
from advisor.trace.ranksplit import ranks_by_pid, split_ranks
from advisor.trace.window import clip

_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
_I64 = np.int64
_F64 = np.float64
_O = object
# every table's columns after ts/dur, with their dtype when the table is empty
SCHEMA: dict[str, list[tuple[str, Any]]] = {
    "cpu_ops": [
        ("name", _O),
        ("pid", _I64),
        ("tid", _I64),
        ("external_id", _I64),
        ("seq", _I64),
        ("fwd_tid", _I64),
        ("input_dims", _O),
        ("input_types", _O),
        ("call_stack", _O),
        ("comm", _O),
    ],
    "annotations": [
        ("name", _O),
        ("pid", _I64),
        ("tid", _I64),
        ("on_gpu", bool),
        ("external_id", _I64),
    ],
    "python": [
        ("name", _O),
        ("pid", _I64),
        ("tid", _I64),
        ("python_id", _I64),
        ("parent_id", _I64),
        ("call_site", _O),
    ],
    "runtime": [
        ("name", _O),
        ("pid", _I64),
        ("tid", _I64),
        ("correlation", _I64),
        ("external_id", _I64),
        ("is_driver", bool),
    ],
    "kernels": [
        ("name", _O),
        ("device", _I64),
        ("stream", _I64),
        ("correlation", _I64),
        ("external_id", _I64),
        ("grid", _O),
        ("block", _O),
        ("comm", _O),
    ],
    "memcpy": [
        ("name", _O),
        ("device", _I64),
        ("stream", _I64),
        ("correlation", _I64),
        ("external_id", _I64),
        ("bytes", _F64),
        ("argkind", _O),
    ],
    "syncs": [
        ("name", _O),
        ("sync_kind", _O),
        ("device", _I64),
        ("stream", _I64),
        ("correlation", _I64),
    ],
    "memory": [
        ("bytes", _F64),
        ("total_allocated", _F64),
        ("total_reserved", _F64),
        ("device_type", _I64),
        ("device_id", _I64),
    ],
}


@dataclass
class Decoded:
    """What the decoder read: the columns and the file's header keys."""

    columns: Columns
    header: dict[str, Any]
    raw_bytes: int


def build_traces(dec: Decoded, path: str) -> list[Trace]:
    """The traces in ``dec``: one, or one per rank when the file holds several ranks
    (:mod:`advisor.trace.ranksplit`), in rank order, each with its rank set."""
    pid_rank = ranks_by_pid(dec.columns)
    if not pid_rank:
        return [build_trace(dec, path)]
    parts = split_ranks(dec.columns, pid_rank)
    out = []
    for r, cols in sorted(parts.items()):
        t = build_trace(Decoded(cols, dec.header, dec.raw_bytes), path)
        meta = replace(t.meta, rank=r, world_size=len(parts), ranks_in_file=len(parts))
        out.append(replace(t, meta=meta))
    return out


def build_trace(dec: Decoded, path: str) -> Trace:
    """Build a :class:`Trace` from decoded columns (see the module doc of ``model``)."""
    col = dec.columns
    origin = col.tmin if col.tmin != np.inf else 0.0
    names = col.name_list()
    t = {name: _frame(col.concat(name), name, origin, names) for name in SCHEMA}
    window = clip(t, col.span_end, col.window_end, origin)
    cpu_ops, ann, python, runtime = t["cpu_ops"], t["annotations"], t["python"], t["runtime"]
    kernels, memcpy, syncs, memory = t["kernels"], t["memcpy"], t["syncs"], t["memory"]
    steps, synthetic = _steps(ann, cpu_ops, window.last_ns)
    for df in (cpu_ops, ann, python, runtime, syncs, memory):
        df["step"] = assign_steps(df["ts_ns"].to_numpy(), steps)
    depth, parent = nest_ops(
        cpu_ops["tid"].to_numpy(), cpu_ops["ts_ns"].to_numpy(), cpu_ops["end_ns"].to_numpy()
    )
    cpu_ops["depth"] = depth
    cpu_ops["parent_idx"] = parent
    runtime["op_idx"] = op_index(runtime, cpu_ops, depth)
    kernels["launch_idx"], memcpy["launch_idx"] = _launches(runtime, kernels, memcpy, col, origin)
    rt_steps = runtime["step"].to_numpy()
    for df in (kernels, memcpy):
        df["step"] = gpu_steps(df["ts_ns"].to_numpy(), df["launch_idx"].to_numpy(), rt_steps, steps)
    argkind = memcpy.pop("argkind").to_numpy()
    for k, v in memcpy_kinds(memcpy["name"].array, argkind).items():
        memcpy[k] = v
    memcpy["bytes"] = _whole(memcpy["bytes"].to_numpy(), 0)
    for k, v in python_frames(python["name"].array).items():
        python[k] = v
    for k, v in call_sites(python.pop("call_site").to_numpy(dtype=object)).items():
        python[k] = v

    header = dec.header
    devices = identify(
        _devices(header),
        (str(c) for c in kernels["name"].array.categories),
        kernels["device"].to_numpy(),
    )
    kernels["is_comm"] = is_comm(
        kernels["name"].array,
        kernels["device"].to_numpy(),
        kernels["stream"].to_numpy(),
        _behaviour(kernels, devices),
    )
    dist = header.get("distributedInfo")
    dist = dist if isinstance(dist, dict) else None
    rank = dist.get("rank") if dist else None
    world = dist.get("world_size") if dist else None
    base = header.get("baseTimeNanoseconds")
    meta = TraceMeta(
        path=path,
        origin_us=float(origin),
        devices=devices,
        distributed=dist,
        rank=_count(rank, 0),
        world_size=_count(world, 1),
        schema_version=header.get("schemaVersion"),
        base_time_ns=base if isinstance(base, int) and not isinstance(base, bool) else None,
        format="legacy" if col.legacy else "kineto",
        synthetic_steps=synthetic,
        event_count=col.events,
        skipped_events=col.skipped,
        unknown_categories=dict(col.unknown),
        profiler_ranges=col.ranges,
        raw_bytes=dec.raw_bytes,
        platform=_platform(runtime, kernels, memcpy, devices),
        window=window,
    )
    return Trace(meta, kernels, memcpy, runtime, cpu_ops, python, ann, syncs, memory, steps)


def _behaviour(kernels: pd.DataFrame, devices: tuple[Device, ...]) -> Behaviour:
    """What the communication-by-behaviour rule reads (:mod:`advisor.trace.commroles`)."""
    units = {}
    for d in devices:
        spec = spec_for(d)
        units[d.id] = d.num_sms or (spec.units if spec is not None else 0)
    return Behaviour(
        kernels["ts_ns"].to_numpy(),
        kernels["end_ns"].to_numpy(),
        blocks_of(kernels["grid"].to_numpy()),
        units,
    )


MAX_RANKS = 1 << 31  # a rank or world size at or beyond this is no real job's


def _count(value: Any, low: int) -> int | None:
    """A rank (``low`` 0) or a world size (``low`` 1) from distributedInfo: an int in
    [low, MAX_RANKS), else None (unknown; derive.quality says so)."""
    if isinstance(value, int) and not isinstance(value, bool) and low <= value < MAX_RANKS:
        return value
    return None


def _launches(
    rt: pd.DataFrame, ker: pd.DataFrame, mem: pd.DataFrame, col: Columns, origin: float
) -> tuple[np.ndarray, np.ndarray]:
    """The runtime row that launched each kernel and copy: by correlation id, else through a
    flow event joining the two, else by the External id both carry (see :mod:`.links`)."""
    rt_corr = rt["correlation"].to_numpy()
    parts = [launch_index(df["correlation"].to_numpy(), rt_corr) for df in (ker, mem)]
    li = np.concatenate(parts)
    if (li < 0).any() and len(rt):
        gpu = (ker, mem)
        ts = np.concatenate([df["ts_ns"].to_numpy() for df in gpu])
        corr = np.concatenate([df["correlation"].to_numpy() for df in gpu])
        flows = col.concat("flows")
        if len(flows.get("ts", ())):
            flows["ts"] = _ns(flows["ts"], origin)
            by_flow = flow_launches(
                flows,
                rt,
                ts,
                np.concatenate([df["end_ns"].to_numpy() for df in gpu]),
                np.concatenate([df["device"].to_numpy() for df in gpu]),
            )
            li = np.where(li < 0, _agree(by_flow, corr, rt_corr), li)
        if (li < 0).any():
            taken = np.zeros(len(rt), dtype=bool)
            taken[li[li >= 0]] = True
            ext = np.concatenate([df["external_id"].to_numpy() for df in gpu])
            copy = np.arange(len(li)) >= len(ker)
            by_ext = external_launches(np.where(li < 0, ext, -1), ts, copy, rt, taken)
            li = np.where(li < 0, _agree(by_ext, corr, rt_corr), li)
    return li[: len(ker)], li[len(ker) :]


def _agree(found: np.ndarray, corr: np.ndarray, rt_corr: np.ndarray) -> np.ndarray:
    """``found`` where the correlation ids do not disagree: a flow or External id never pairs
    GPU work with a call whose correlation id is another (the launching call was not
    recorded, and a flow's start lies inside a later call)."""
    rc = rt_corr[np.clip(found, 0, None)]
    ok = (found >= 0) & ((corr < 0) | (rc < 0) | (rc == corr))
    return np.where(ok, found, -1)


def _frame(
    cols: dict[str, np.ndarray], table: str, origin: float, names: np.ndarray
) -> pd.DataFrame:
    """One table: ts_ns, dur_ns, end_ns, then its columns (categorical name)."""
    n = len(cols["ts"]) if "ts" in cols else 0
    ts_ns = _ns(cols.pop("ts") if n else np.zeros(0), origin)
    dur_ns = _ns(cols.pop("dur"), 0.0) if "dur" in cols else np.zeros(n, dtype=np.int64)
    data: dict[str, Any] = {"ts_ns": ts_ns, "dur_ns": dur_ns, "end_ns": ts_ns + dur_ns}
    for name, dt in SCHEMA[table]:
        v = cols.get(name)
        if name == "name":
            data[name] = _categorical(v if v is not None else np.zeros(0, np.int64), names)
        elif v is None:
            data[name] = np.empty(0, dtype=dt)
        elif dt is _O:
            data[name] = pd.Series(v, copy=False)  # str dtype when all text, else object
        else:
            data[name] = v
    df = pd.DataFrame(data, copy=False)
    if table == "memory":
        for c in ("bytes", "total_allocated", "total_reserved"):
            df[c] = _whole(df[c].to_numpy(), None)
    return df


def _ns(us: np.ndarray, origin: float) -> np.ndarray:
    """Microseconds (float) -> int64 nanoseconds after ``origin``, in place on the input."""
    us -= origin
    us *= 1000.0
    np.rint(us, out=us)
    return us.astype(np.int64)


def _categorical(ids: np.ndarray, names: np.ndarray) -> pd.Categorical:
    """Name ids -> categorical with this table's names only, sorted (as astype("category"))."""
    present = np.zeros(len(names), dtype=bool)
    present[ids] = True
    used = np.flatnonzero(present)
    labels = names[used]
    order = np.argsort(labels, kind="stable")
    remap = np.full(len(names), -1, dtype=np.int64)
    remap[used[order]] = np.arange(len(used))
    cats = pd.Index(labels[order]) if len(used) else pd.Index([], dtype="str")
    return pd.Categorical.from_codes(remap[ids], categories=cats, validate=False)


def _whole(v: np.ndarray, fill: float | None) -> np.ndarray:
    """Float column -> int64 when every value is a whole number (NaN -> ``fill`` if given)."""
    if fill is not None:
        v = np.where(np.isnan(v), fill, v)
    with np.errstate(invalid="ignore"):
        whole = bool(np.all((np.abs(v) < 2**62) & (v == np.floor(v))))
    return v.astype(np.int64) if whole else v


def _steps(ann: pd.DataFrame, ops: pd.DataFrame, last_ns: int) -> tuple[pd.DataFrame, bool]:
    rows = []
    for df in (ann, ops):
        if not len(df):
            continue
        cat = df["name"].array
        labels = [str(c) for c in cat.categories]
        nums = [_step_number(lab) for lab in labels]
        is_step = np.array([x is not None for x in nums] + [False], dtype=bool)
        mask = is_step[cat.codes]
        if "on_gpu" in df:
            mask &= ~df["on_gpu"].to_numpy(dtype=bool)
        for code, ts, dur in zip(
            cat.codes[mask],
            df["ts_ns"].to_numpy()[mask],
            df["dur_ns"].to_numpy()[mask],
            strict=True,
        ):
            rows.append((nums[code], int(ts), int(dur)))
    if rows:
        st = pd.DataFrame(rows, columns=["step", "ts_ns", "dur_ns"])
        st = st.sort_values(["step", "dur_ns"]).drop_duplicates("step", keep="last")
        st = st.sort_values("ts_ns").reset_index(drop=True)
        synthetic = False
    else:
        st = pd.DataFrame({"step": [0], "ts_ns": [0], "dur_ns": [max(0, last_ns)]})
        synthetic = True
    st = st.astype({"step": np.int64, "ts_ns": np.int64, "dur_ns": np.int64})
    st["end_ns"] = st["ts_ns"] + st["dur_ns"]
    st["synthetic"] = synthetic
    return st[["step", "ts_ns", "dur_ns", "end_ns", "synthetic"]], synthetic


def _step_number(label: str) -> int | None:
    m = _STEP_RE.match(label)
    if not m or len(m.group(1)) > 15:
        return None
    return int(m.group(1))


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
        vendor = (
            "amd"
            if ("AMD" in name or "Radeon" in name or "Instinct" in name or warp == 64)
            else ("nvidia" if cc else "unknown")
        )
        mem = p.get("totalGlobalMem")
        sms = p.get("numSms", p.get("multiProcessorCount"))
        dev_id = p.get("id", i)
        out.append(
            Device(
                id=int(dev_id) if isinstance(dev_id, int) else i,
                name=name,
                compute_capability=cc,
                total_memory_bytes=int(mem)
                if isinstance(mem, int | float) and 0 <= mem < 2**62
                else None,
                num_sms=int(sms) if isinstance(sms, int) else None,
                vendor=vendor,
                arch=arch_of(vendor, cc),
            )
        )
    return tuple(out)


def _platform(
    rt: pd.DataFrame, ker: pd.DataFrame, mem: pd.DataFrame, devs: tuple[Device, ...]
) -> str:
    if not len(ker) and not len(mem):
        return "cpu"
    if any(d.vendor == "amd" for d in devs):
        return "rocm"
    if any(str(c).startswith("hip") for c in rt["name"].array.categories):
        return "rocm"
    return "cuda"


__all__ = ["Decoded", "build_trace", "build_traces", "is_user_file", "parse_frame"]
