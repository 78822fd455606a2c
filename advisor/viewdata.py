"""The report's view data: findings.json's ``views`` block, as records.

Computed once on the analysis side (:mod:`advisor.analysis.views`, and for several ranks
:func:`advisor.multirank.merge.merge`) so that the renderers only select and format, and
``advisor report`` re-renders without the trace. What each part holds:
:mod:`advisor.analysis.views` (per trace) and :mod:`advisor.analysis.toptables` (the tables).
A new view is a field here (one line) and its computation there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from advisor.record import Unset, flat, omit_empty, omit_none, omit_unset


@dataclass(frozen=True)
class DeviceView:
    """The main GPU: name, compute capability, memory (bytes; None when unknown)."""

    name: str | None = None
    compute_capability: str | None = None
    total_memory_bytes: int | None = None
    peak_memory_bytes: int | None = None
    count: int = 0
    # where the name came from: run.json, --device, deviceProperties, inferred (kernel names)
    source: str | None = None


@dataclass(frozen=True)
class TraceInfo:
    """The trace file, its clock at rebased 0 and the captured steps' window (file clock, us)."""

    file: str
    origin_us: float
    window_us: tuple[float, float]
    recorded_at: str | None = None


@dataclass(frozen=True)
class StepRow:
    """Where one step's wall time went, in ms (:func:`advisor.derive.breakdown.step_breakdown`)."""

    step: int
    ts_us: float = 0.0
    total_ms: float = 0.0
    compute_ms: float = 0.0
    communication_ms: float = 0.0
    memcpy_ms: float = 0.0
    dataloader_ms: float = 0.0
    idle_ms: float = 0.0
    host_only_ms: float = 0.0


@dataclass(frozen=True)
class Utilization:
    """GPU busy and compute % of the main device over the window, in equal buckets."""

    start_us: float
    end_us: float
    bucket_ms: float
    busy_pct: tuple[float, ...]
    compute_pct: tuple[float, ...]


@dataclass(frozen=True)
class KernelRow:
    """A row of the top kernels table."""

    name: str
    count: int = 0
    total_ms: float = 0.0
    mean_us: float = 0.0
    share_pct: float = 0.0
    op: str | None = None
    source: str | None = None
    # the share of the device's limit its kernels reach (time-weighted), compute or memory
    # bound, and the lead cause below the target (heuristics/_efficiency.py); None where not
    # modelled, and in a multi-rank merge (a rank's own figures)
    limit_pct: float | None = None
    bound: str | None = None
    cause: str | None = None


@dataclass(frozen=True)
class KindTime:
    """GPU time of one kind of kernel (GEMM (family), attention, Triton..., other)."""

    kind: str
    ms: float


@dataclass(frozen=True)
class CompiledRegion:
    """A torch.compile region or graph (or the eager rest) and its GPU time."""

    region: str
    calls: int | None  # None: the eager rest
    gpu_ms: float
    share_pct: float
    kernels: int
    by_kind: tuple[KindTime, ...] = ()


@dataclass(frozen=True)
class CompiledGemm:
    """A GEMM kernel inside a region: its family, tile and share of the device's limit."""

    region: str
    kernel: str
    family: str | None
    tile: str | None
    count: int
    ms: float
    limit_pct: float | None


@dataclass(frozen=True)
class CompiledView:
    """GPU time per torch.compile region and graph (advisor/analysis/compiled.py)."""

    regions: tuple[CompiledRegion, ...] = ()
    compiled_pct: float = 0.0
    gemms: tuple[CompiledGemm, ...] = ()


@dataclass(frozen=True)
class CollectiveRow:
    """One kind of collective over one group size: its calls, bytes, time (waiting for peers
    kept apart) and effective bandwidth against the link's peak
    (:mod:`advisor.derive.commbw`); None where the trace does not tell."""

    collective: str  # all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, ...
    ranks: int | None
    calls: int
    dtype: str | None
    bytes_per_call: float | None  # median over the calls
    time_ms: float | None  # kernel time over the calls (None: no kernel ran)
    wait_ms: float | None  # of it, waiting for the other ranks
    algbw_gbs: float | None  # bytes / transfer time
    busbw_gbs: float | None  # x the algorithm's factor: comparable with the link's peak
    link: str | None
    link_gbs: float | None  # the link's peak per direction
    link_pct: float | None
    note: str | None = omit_none()


@dataclass(frozen=True)
class OpRow:
    """A row of the top operators table (``self_ms``/``gpu_ms`` unset in a merged table where
    no rank had them; ``op`` is only written, as null, by the merged table)."""

    name: str
    count: int = 0
    total_ms: float = 0.0
    mean_us: float = 0.0
    share_pct: float = 0.0
    self_ms: float | Unset = omit_unset()
    gpu_ms: float | None | Unset = omit_unset()
    op: str | None | Unset = omit_unset()
    source: str | None = None


@dataclass(frozen=True)
class DetectorDoc:
    """A detector's title, and its docstring when it found something (always for several ranks)."""

    title: str
    doc: str | None = omit_none()


@dataclass(frozen=True)
class Snippet:
    """A few lines of the user's code around ``line`` (``start``: the first one's number)."""

    start: int
    line: int
    lines: tuple[str, ...]


@dataclass(frozen=True)
class TraceViews:
    """The views of one trace (a merged multi-rank report has none; keys in ``views``)."""

    version: int
    device: DeviceView
    trace: TraceInfo
    steps: tuple[StepRow, ...]
    steps_total: int
    utilization: Utilization | None = None


@dataclass(frozen=True)
class Views:
    """findings.json's ``views`` block."""

    detectors: Mapping[str, DetectorDoc] = field(default_factory=dict)
    kernels: tuple[KernelRow, ...] = ()
    ops: tuple[OpRow, ...] = ()
    compiled: CompiledView | None = omit_none()  # absent without a compiled region
    # each collective's effective bandwidth (absent without collectives)
    collectives: tuple[CollectiveRow, ...] = omit_empty()
    one_trace: TraceViews | None = flat()
    # "file:line" -> code around it (None with --no-source); files not read (outside the roots)
    sources: Mapping[str, Snippet] | None = omit_none()
    sources_withheld: tuple[str, ...] = omit_empty()


NO_VIEWS = Views()
