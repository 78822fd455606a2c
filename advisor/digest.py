"""One analysed trace's figures, as multi-rank analysis, the cross-rank checks and ``advisor
diff`` read them: :class:`Digest` and its :class:`Collectives`.

A worker process loads one trace, runs the detectors and returns a Digest
(:func:`advisor.analysis.digest.digest_trace` builds it): the trace's Report, per-step times,
the mean step breakdown, per-name kernel and op totals and the collectives' timing. Never the
tables, so a 128-rank job never holds 128 traces in memory. The records live here, below the
layers that build and read them (the cross-rank checks of ``heuristics/`` and
:mod:`advisor.derive.lag` take digests).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from advisor.report import Report

# the parts of a rank's time before a collective (:mod:`advisor.derive.arrival`), in the order of
# the columns of Preceding's arrays
PARTS = ("compute", "copy", "loader", "idle")


@dataclass(frozen=True)
class Preceding:
    """What a rank did before it reached each collective (:mod:`advisor.derive.arrival`): per
    collective (rows) and part (columns, :data:`PARTS`), the time that part took from the
    trace's start to the collective's start, to its end, and to the start of its step (ns), so
    the time between any two of these is a difference of rows; and the longest computation
    kernel between the previous collective (or the step's start) and its start."""

    at_start_ns: np.ndarray  # int64 [collective, part]
    at_end_ns: np.ndarray
    at_step_ns: np.ndarray
    step_abs_ns: np.ndarray  # int64, the start of its step, own clock
    kernel: list[str]  # ("" none)
    kernel_ns: np.ndarray  # its time in that stretch


@dataclass(frozen=True)
class Skeleton:
    """A rank's step graph reduced to its collectives (:mod:`advisor.replay.skeleton`), which the
    job replay (:mod:`advisor.replay.job`) joins across ranks. For each row of the Collectives,
    then each step boundary (the steady steps' starts, then the last one's end): the row of the
    collective whose end decides that time through the graph (-1: none), the time after that
    end (with none: the measured time itself, own clock), how much earlier it may move before
    another edge decides it (ns), and the row of the collective that other edge follows (-1:
    none; that bound moves as that collective's end does)."""

    coll_root: np.ndarray
    coll_off_ns: np.ndarray
    coll_slack_ns: np.ndarray
    coll_alt_root: np.ndarray
    bound_root: np.ndarray
    bound_off_ns: np.ndarray
    bound_slack_ns: np.ndarray
    bound_alt_root: np.ndarray


@dataclass(frozen=True)
class KernelSeq:
    """The steady steps' kernels on the main GPU, communication aside, in start order (what
    ``advisor diff`` pairs across runs, :mod:`advisor.multirank.explain`): per kernel the index
    of its name in ``names``, of its launching op in ``ops`` (the innermost CPU op around the
    launch; "" none), its step, stream and duration."""

    names: list[str]
    ops: list[str]
    step: np.ndarray  # int64
    name_idx: np.ndarray  # int64
    op_idx: np.ndarray  # int64
    stream: np.ndarray  # int64
    dur_ns: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.name_idx)


@dataclass(frozen=True)
class CallRow:
    """Runtime calls of one name and kind per steady step (:mod:`advisor.derive.callstats`):
    ``kind`` is ``sync``, ``launch``, ``graph-launch``, ``alloc`` or ``copy``; ``count`` calls
    and ``host_ms`` of host time in them, per step."""

    kind: str
    name: str
    count: float
    host_ms: float


@dataclass(frozen=True)
class CopyRow:
    """The GPU copies of one direction and pair of memories per steady step
    (:mod:`advisor.derive.callstats`): ``kind`` HtoD, DtoH, DtoD...; ``src``/``dst`` Pageable,
    Pinned, Device...; per step ``count``, ``bytes``, ``gpu_ms``, ``host_ms`` (the host time in
    the calls that queued them: a synchronous or pageable copy holds its call for the transfer)
    and ``overlap_pct``: the share of their GPU time with a kernel running on the same device."""

    kind: str
    src: str
    dst: str
    count: float
    bytes: float
    gpu_ms: float
    host_ms: float
    overlap_pct: float


@dataclass(frozen=True)
class RuntimeCalls:
    """What the steady steps asked of the runtime, per step: the calls (syncs, launches, graph
    launches, allocator calls, copy calls) and the copies; ``first_work_ms``: the median time
    from a step's start to its first call that queues GPU work (None: no such call)."""

    calls: tuple[CallRow, ...] = ()
    copies: tuple[CopyRow, ...] = ()
    first_work_ms: float | None = None


@dataclass(frozen=True)
class OpShapes:
    """One of the ops that launch most of a run's GPU work (:mod:`advisor.derive.workload`):
    per input signature (tensor shapes and dtypes, as ``4x128x1024 float``, ``;`` between the
    inputs) its calls per step, the most frequent first."""

    name: str
    gpu_ms: float  # the GPU time of the kernels it launches, per step
    signatures: tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class Workload:
    """What one step computes, as far as the trace says (:mod:`advisor.derive.workload`): the
    input shapes of the ops launching most GPU work, and the samples per step when the run's
    context gives the DataLoader's batch size (None: unknown)."""

    ops: tuple[OpShapes, ...] = ()
    samples_per_step: float | None = None
    samples_how: str | None = None


@dataclass(frozen=True)
class OneTime:
    """One-time work inside the steady steps (:mod:`advisor.derive.onetime`): per step (in the
    order of ``Digest.step_ms``) the ms it held the step with the main GPU idle, and the ms per
    kind over all the steps."""

    per_step_ms: np.ndarray  # float64
    by_kind_ms: Mapping[str, float]


@dataclass(frozen=True)
class Collectives:
    """One row per collective (communication kernel, or gloo range on CPU runs)."""

    step: np.ndarray  # int64
    name: list[str]  # collective name (AllReduce, all_reduce, ...)
    stream: np.ndarray  # int64 (-1 on CPU)
    start_abs_ns: np.ndarray  # int64, the file's own clock in ns
    dur_ns: np.ndarray  # int64
    ts_us: np.ndarray  # float64, the file's own timestamp (to find it in Perfetto)
    exposed_ns: np.ndarray | None = None  # int64, the part no computation kernel covers (GPU)
    transfer_ns: np.ndarray | None = None  # int64, one-rank transfer estimate (derive.peerwait)
    before: Preceding | None = None  # what the rank did before each (GPU traces)

    def __len__(self) -> int:
        return len(self.step)


NO_COLLECTIVES = Collectives(
    np.zeros(0, np.int64),
    [],
    np.zeros(0, np.int64),
    np.zeros(0, np.int64),
    np.zeros(0, np.int64),
    np.zeros(0),
)


@dataclass(frozen=True)
class Digest:
    path: str
    rank: int | None
    world_size: int | None
    report: Report  # this trace alone (no findings for a trace that could not be read)
    step_ids: np.ndarray  # int64
    step_ms: np.ndarray  # float64
    comm_pct: float | None  # share of step time with communication running
    comm_overlap_pct: float | None  # HTA's comm/comp overlap
    exposed_comm_ms_per_step: float | None
    # the step breakdown's mean per step, ms (advisor.derive.breakdown.CATEGORIES)
    categories_ms: Mapping[str, float]
    kernels: Mapping[str, tuple[int, float]]  # name -> (count, total ms)
    ops: Mapping[str, tuple[int, float]]
    collectives: Collectives
    device: str | None = None
    error: str | None = None
    free_compute_ms: float | None = None  # computation per step no communication overlaps
    # what the steps lose in the replay with every collective hidden (None: not replayed)
    comm_hidden_replay_ms: float | None = None
    skeleton: Skeleton | None = None  # the step graph reduced to the collectives (job replay)
    kernel_seq: KernelSeq | None = None  # the kernels in order (advisor diff only)
    # what advisor diff compares beyond the kernels (None outside advisor diff)
    runtime_calls: RuntimeCalls | None = None
    workload: Workload | None = None
    one_time: OneTime | None = None

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else Path(self.path).name

    @property
    def rank_id(self) -> int:
        """The rank, for a digest of a known rank (the cross-rank checks get only those)."""
        if self.rank is None:
            raise ValueError(f"{self.path}: the rank of this trace is unknown")
        return self.rank

    @property
    def gpu_busy_pct(self) -> float | None:
        """The trace's one "GPU busy" figure (``run.gpu_busy_pct``)."""
        return self.report.run.gpu_busy_pct

    @property
    def steps(self) -> int:
        return len(self.step_ids)

    @property
    def step_ms_median(self) -> float:
        return float(np.median(self.step_ms)) if len(self.step_ms) else 0.0
