"""The normalized trace: pandas tables with int64 nanosecond times rebased to the trace start.

Every table has ``ts_ns``, ``dur_ns``, ``end_ns`` (int64) and ``step`` (int64, -1 outside
ProfilerStep ranges). Names are categorical. Heuristics read these tables and never the JSON.

Tables (columns beyond the common ones):

- ``kernels``: name, device, stream, correlation, external_id, is_comm (communication kernels:
  :mod:`advisor.trace.commroles`),
  grid, block (tuples or None), launch_idx (row in ``runtime`` of the launching call, -1 if none),
  comm (a collective's ``(name, in elements, out elements, dtype, group size)`` from the
  kernel's ``Collective name``/``In msg nelems``/``Out msg nelems``/``dtype``/``Group size``
  args, or None).
- ``memcpy``: name, kind (HtoD, DtoH, DtoD, HtoH, PtoP, Memset), src, dst (Pageable, Pinned,
  Device, ...), bytes, device, stream, correlation, external_id, launch_idx.
- ``runtime``: name, pid, tid, correlation, external_id, is_driver, op_idx (row in ``cpu_ops``
  of the innermost op around it on its thread, -1 if none).
- ``cpu_ops``: name, pid, tid, external_id, seq (autograd sequence number), fwd_tid,
  input_dims, input_types (Python objects or None), call_stack (legacy ``Call stack`` arg),
  comm (``record_param_comms``: the collective's metadata as on kernels, or None),
  depth (nesting depth on its thread), parent_idx (-1 for top level).
- ``python``: name, pid, tid, python_id, parent_id, file, line, function, is_user, call_file,
  call_line (the caller's file and line at the moment of the call, from the ``call_site`` arg
  that ``advisor profile`` writes for calls made from the user's files; "" and -1 elsewhere).
- ``annotations``: name, pid, tid, on_gpu (gpu_user_annotation), external_id.
- ``syncs``: ``cuda_sync`` events: name, sync_kind, device, stream, correlation.
- ``memory``: ``[memory]`` instants: bytes, total_allocated, total_reserved, device_type,
  device_id (dur_ns = 0); ``device_type`` is c10's (``GPU_DEVICE_TYPES``: CUDA, or HIP on ROCm).
- ``steps``: step (the N of ProfilerStep#N), ts_ns, dur_ns, end_ns, synthetic (bool: no markers
  were found and the whole trace is one step).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np
import pandas as pd

# c10::DeviceType of GPU memory in ``[memory]`` events: CUDA (1), and HIP (6), which ROCm builds
# of PyTorch write in some versions instead of reporting HIP memory as CUDA
GPU_DEVICE_TYPES = (1, 6)


_T = TypeVar("_T")  # what a memo holds


@dataclass(frozen=True)
class Device:
    id: int
    name: str
    compute_capability: tuple[int, int] | None
    total_memory_bytes: int | None
    num_sms: int | None
    vendor: str  # "nvidia", "amd", "unknown"
    # how the device is known: "deviceProperties", or the evidence it was inferred from
    # (advisor.trace.identity), or "--device" (the user named it)
    source: str = "deviceProperties"
    arch: str | None = None  # "sm_90", "gfx942" when known

    @property
    def cc_str(self) -> str | None:
        cc = self.compute_capability
        return f"{cc[0]}.{cc[1]}" if cc else None


@dataclass(frozen=True)
class Window:
    """The recording window and the events that outlived it (:mod:`advisor.trace.window`)."""

    end_ns: int | None = None  # where the recording ends (rebased); None when unknown
    last_ns: int = 0  # the end of the last event not cut at it: where the recorded work ends
    source: str = ""  # what says so: "profiler span", "Record Window End", "last activity"
    clipped: int = 0  # events that ran past the end: cut there
    dropped: int = 0  # events that start after the end: left out
    latest_ns: int = 0  # the latest end one of them had
    # the longest ranges cut (annotations and ops, not Python frames): (name, ts_ns, end_ns as
    # the trace wrote it), longest first
    overruns: tuple[tuple[str, int, int], ...] = ()


@dataclass(frozen=True)
class TraceMeta:
    path: str
    origin_us: float  # original timestamp (us) of ts_ns == 0, to point users back into the file
    devices: tuple[Device, ...]
    distributed: dict[str, Any] | None
    rank: int | None
    world_size: int | None
    schema_version: Any
    base_time_ns: int | None
    format: str  # "kineto" (current categories) or "legacy" (2020-21 Operator/Runtime/Kernel)
    # no ProfilerStep markers: one step that is not an iteration (the whole trace as loaded;
    # after advisor.derive.steps, the recording without its set-up, or none of the two when a
    # unit of work repeats)
    synthetic_steps: bool
    event_count: int
    skipped_events: int  # events dropped for missing/wrong-typed fields or negative durations
    unknown_categories: dict[str, int] = field(default_factory=dict)
    profiler_ranges: int = 0  # CUPTI range-profiler events (no kernel timeline)
    raw_bytes: int = 0
    platform: str = "cuda"  # "cuda", "rocm", "cpu", "other"
    window: Window = field(default_factory=Window)
    ranks_in_file: int = 0  # >= 2: one of the ranks of a file that held them all (ranksplit)


@dataclass(frozen=True)
class Trace:
    meta: TraceMeta
    kernels: pd.DataFrame
    memcpy: pd.DataFrame
    runtime: pd.DataFrame
    cpu_ops: pd.DataFrame
    python: pd.DataFrame
    annotations: pd.DataFrame
    syncs: pd.DataFrame
    memory: pd.DataFrame
    steps: pd.DataFrame

    # ---- convenience views (cheap; no re-walk of JSON) ----
    @property
    def has_gpu(self) -> bool:
        """True when the trace holds any GPU activity (kernels, copies or memsets)."""
        return len(self.kernels) > 0 or len(self.memcpy) > 0

    @property
    def has_shapes(self) -> bool:
        return bool(self.cpu_ops["input_dims"].notna().any()) if len(self.cpu_ops) else False

    @property
    def has_stack(self) -> bool:
        if len(self.python):
            return True
        return bool(self.cpu_ops["call_stack"].notna().any()) if len(self.cpu_ops) else False

    @property
    def path(self) -> Path:
        return Path(self.meta.path)

    def gpu_activity(self) -> pd.DataFrame:
        """Kernels, copies and memsets in one frame: ts_ns, end_ns, device, stream, kind, step.

        Built once per trace (many detectors read it); each call returns a shallow copy, so a
        caller that adds or sets columns never changes what the next caller sees."""
        act: pd.DataFrame = self.memo("model.gpu_activity", self._build_gpu_activity)
        return act.copy(deep=False)

    def memo(self, key: str, build: Callable[[], _T]) -> _T:
        """``build()`` once per trace, kept with it (outside the frozen fields) under ``key``:
        derived tables that several readers share. The one cache of derived data: modules
        that derive facts from a trace keep them here, under keys named after their module;
        they live as long as the trace (callers drop the trace before writing outputs)."""
        attr = "_memo_" + key
        if attr not in self.__dict__:
            object.__setattr__(self, attr, build())
        return cast(_T, self.__dict__[attr])

    def _build_gpu_activity(self) -> pd.DataFrame:
        cols = ["ts_ns", "end_ns", "device", "stream", "step", "launch_idx"]
        # kind: a categorical (one byte a row, not one string object a row)
        kinds = pd.CategoricalDtype(["comm", "kernel", "memcpy", "memset"])
        k_codes = np.where(self.kernels["is_comm"].to_numpy(dtype=bool), 0, 1)
        m_codes = np.where(self.memcpy["kind"].astype(str).to_numpy() == "Memset", 3, 2)
        k = self.kernels[cols].assign(kind=pd.Categorical.from_codes(k_codes, dtype=kinds))
        m = self.memcpy[cols].assign(kind=pd.Categorical.from_codes(m_codes, dtype=kinds))
        parts = [p for p in (k, m) if len(p)]
        if not parts:
            return k.iloc[0:0]
        return pd.concat(parts, ignore_index=True).sort_values("ts_ns", kind="stable")

    def step_ms(self) -> pd.Series:
        """Duration of each step in milliseconds, indexed by step number."""
        s = self.steps
        return pd.Series((s["dur_ns"] / 1e6).to_numpy(), index=s["step"].to_numpy(), dtype=float)

    def median_step_ms(self) -> float:
        v = self.step_ms()
        return float(v.median()) if len(v) else 0.0

    def mean_step_ms(self) -> float:
        """The mean step: what every per-step figure of a finding is a share of (a cost found
        in some steps only is its mean over all of them)."""
        v = self.step_ms()
        return float(v.mean()) if len(v) else 0.0

    def to_trace_us(self, ts_ns: int | float) -> float:
        """A rebased time back in the file's own microsecond clock (to find it in Perfetto)."""
        return round(self.meta.origin_us + float(ts_ns) / 1000.0, 3)

    def device(self, device_id: int | None = None) -> Device | None:
        """The deviceProperties entry of ``device_id`` (callers pass
        :func:`advisor.derive.timeline.main_device`); the first listed device when the id is None or
        not listed."""
        devs = self.meta.devices
        if not devs:
            return None
        for d in devs:
            if d.id == device_id:
                return d
        return devs[0]
