"""run.json as a record: the facts of a live run that ``advisor profile`` records (it builds
this record and writes ``record.dump`` of it) and the analysis reads
(``ctx.live.backends.cudnn_benchmark``), typed (docs/run-json.md says what each key means; how
the run went and what was captured: :mod:`advisor.runcapture`).

Each field is declared as ``advisor profile`` writes it, so that the file it writes is the
record's JSON: a key the file holds only sometimes is ``omit_none()`` (left out while None), a
section's keys written only when the section was recorded are ``written_with(anchor)``. A few
keys only other tools' files hold (``cpu_count`` at the top level, ``peak_memory_bytes``,
``date``) are read where present and never written.

run.json is read leniently (:func:`read`, ``record.load(..., lenient=True)``), as
docs/run-json.md promises: a key this record does not declare is ignored, a value of another
type reads as absent (its default, ``None`` or empty), a row that is not an object is left out,
and a missing section reads as an empty one, so a detector reads
``ctx.live.backends.cudnn_benchmark`` without asking whether ``backends`` was recorded. A
damaged run.json only loses the live-run facts, never the analysis.

**Adding a fact** is one line in the record of its section, ``name: type = default`` (every
field has a default: a run.json of an earlier version lacks it), plus the line of
``advisor/profile/`` that sets it. A key that is a Python builtin or keyword (``class``,
``type``) is declared with ``renamed("class", None)``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from advisor import record
from advisor.record import omit_none, renamed, written_with
from advisor.runcapture import (
    CaptureLimit,
    Distributed,
    Eval,
    Forks,
    MissingPhase,
    Profile,
    Try,
    Versions,
)


@dataclass(frozen=True)
class Site:
    """Where ``advisor profile`` saw something made or called: the user's file and line."""

    file: str | None = None
    line: int | None = None
    function: str | None = None


@dataclass(frozen=True)
class Device:
    """``device``: the device the script used."""

    type: str | None = None  # "cuda", "cpu"
    index: int | None = None
    count: int | None = None
    name: str | None = None
    compute_capability: str | None = None  # "8.0"
    total_memory_bytes: int | None = None  # on a CPU run: host memory
    multi_processor_count: int | None = None
    cuda_available: bool | None = omit_none()  # a CPU run: whether CUDA was there


@dataclass(frozen=True)
class Host:
    """``host``: the machine."""

    cpu_count: int | None = None  # CPUs this process may use
    cpu_count_total: int | None = None
    cpu_model: str | None = None
    memory_bytes: int | None = None


@dataclass(frozen=True)
class Memory:
    """``memory``: the CUDA caching allocator's peaks over the profiled window."""

    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None


@dataclass(frozen=True)
class Backends:
    """``backends``: the backend flags as set when the window was captured (all of them, or
    none: ``cuda_launch_blocking`` is always read)."""

    cudnn_benchmark: bool | None = written_with("cuda_launch_blocking")
    cudnn_deterministic: bool | None = written_with("cuda_launch_blocking")
    cudnn_allow_tf32: bool | None = written_with("cuda_launch_blocking")
    matmul_allow_tf32: bool | None = written_with("cuda_launch_blocking")
    matmul_allow_fp16_reduced_precision_reduction: bool | None = written_with(
        "cuda_launch_blocking"
    )
    float32_matmul_precision: str | None = written_with("cuda_launch_blocking")  # "highest"...
    deterministic: bool | None = written_with("cuda_launch_blocking")
    detect_anomaly: bool | None = written_with("cuda_launch_blocking")
    cuda_launch_blocking: bool | None = omit_none()
    matmul_fp32_precision: str | None = written_with("cuda_launch_blocking")  # torch >= 2.9
    cudnn_conv_fp32_precision: str | None = written_with("cuda_launch_blocking")


@dataclass(frozen=True)
class EvalWithGrad:
    """A top-level module called in ``eval()`` mode with autograd on (``forward``)."""

    module: str | None = None
    file: str | None = omit_none()  # where it was called (the user's frame, when there is one)
    line: int | None = omit_none()
    function: str | None = omit_none()
    count: int | None = omit_none()


@dataclass(frozen=True)
class Autocast:
    """An autocast region a forward pass ran in (``forward.autocast``)."""

    device_type: str | None = None
    dtype: str | None = None


@dataclass(frozen=True)
class Forward:
    """``forward``: the forward passes seen before the window (all of it, or nothing when the
    facts could not be read)."""

    autocast: tuple[Autocast, ...] | None = omit_none()
    autocast_dtypes: tuple[str, ...] = written_with("autocast", default=())
    eval_with_grad: tuple[EvalWithGrad, ...] = written_with("autocast", default=())


@dataclass(frozen=True)
class ConvBn:
    """A convolution with bias whose next module call is a BatchNorm (``modules``)."""

    conv: str | None = None
    bn: str | None = None
    file: str | None = None  # where the convolution was made
    line: int | None = None


@dataclass(frozen=True)
class Modules:
    """``modules``: how the models were set up (all of it, or only ``error`` when the facts
    could not be read)."""

    conv_bias_before_bn: tuple[ConvBn, ...] = written_with("modules_seen", default=())
    param_dtypes: Mapping[str, int] | None = written_with("modules_seen")
    channels_last: bool | None = written_with("modules_seen")
    data_parallel: bool | None = written_with("modules_seen")
    data_parallel_sites: tuple[Site, ...] = written_with("modules_seen", default=())
    distributed_data_parallel: bool | None = written_with("modules_seen")
    fully_sharded_data_parallel: bool | None = written_with("modules_seen")
    compiled: bool | None = written_with("modules_seen")
    compile_sites: tuple[Site, ...] = written_with("modules_seen", default=())
    modules_seen: int | None = omit_none()
    roots: tuple[str, ...] = written_with("modules_seen", default=())
    error: str | None = omit_none()


@dataclass(frozen=True)
class DataLoader:
    """A DataLoader the script iterated (``dataloaders``)."""

    num_workers: int | None = None
    pin_memory: bool | None = None
    batch_size: int | None = None
    persistent_workers: bool | None = None
    prefetch_factor: int | None = None
    drop_last: bool | None = None
    dataset_len: int | None = None
    dataset_class: str | None = None
    file: str | None = None
    line: int | None = None
    phase: str | None = None  # "train", "eval": the phase that first iterated it


@dataclass(frozen=True)
class Optimizer:
    """An optimizer that stepped (``optimizers``)."""

    cls: str | None = renamed("class", None)
    module: str | None = None
    foreach: bool | None = None  # as passed: None is torch's default
    fused: bool | None = None
    param_tensors: int | None = None
    param_groups: int | None = None
    param_elements: int | None = None
    param_dtypes: Mapping[str, int] = field(default_factory=dict)  # elements per dtype
    file: str | None = None
    line: int | None = None


@dataclass(frozen=True)
class ZeroGrad:
    """``zero_grad`` calls at one call site (``zero_grad``)."""

    owner: str | None = None  # "Optimizer", "Module"
    set_to_none: bool | None = None
    file: str | None = omit_none()  # the user's frame, when there is one
    line: int | None = omit_none()
    function: str | None = omit_none()


@dataclass(frozen=True)
class EmptyCache:
    """``torch.cuda.empty_cache()`` calls at one call site (``allocator.empty_cache``)."""

    calls: int | None = None
    file: str | None = omit_none()  # the user's frame, when there is one
    line: int | None = omit_none()
    function: str | None = omit_none()


@dataclass(frozen=True)
class Allocator:
    """``allocator``: the caching allocator's settings and the calls that empty it (all of
    it, or nothing when the run's set-up facts could not be read)."""

    empty_cache: tuple[EmptyCache, ...] = written_with("caching_disabled", default=())
    # PYTORCH_CUDA_ALLOC_CONF (or its HIP/generic name)
    alloc_conf: str | None = written_with("caching_disabled")
    caching_disabled: bool | None = omit_none()  # PYTORCH_NO_CUDA_MEMORY_CACHING
    no_memory_caching_env: str | None = written_with("caching_disabled")  # its raw value


@dataclass(frozen=True)
class GraphBreak:
    """A graph break dynamo logged, at the innermost frame of the user's files."""

    file: str | None = None
    line: int | None = None
    function: str | None = None
    kind: str | None = renamed("type", None)  # its class ("Data-dependent branching")
    reason: str | None = None
    count: int | None = None
    compile_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class CompiledFrame:
    """One compilation (``compile.frames``)."""

    compile_id: str | None = None  # "frame/attempt"
    function: str | None = None
    file: str | None = None
    line: int | None = None
    resume: bool | None = None  # the code after a graph break
    graph_ops: int | None = None
    compile_s: float | None = None
    graph_breaks: int | None = None
    fail_type: str | None = None
    fail_reason: str | None = None


@dataclass(frozen=True)
class Recompile:
    """A recompilation: the guard that failed (``compile.recompiles``)."""

    compile_id: str | None = None
    function: str | None = None
    file: str | None = None
    line: int | None = None
    reason: str | None = None
    compile_s: float | None = None


@dataclass(frozen=True)
class CompileCounters:
    """``compile.counters``: dynamo's own counts."""

    graph_break: int | None = None
    unimplemented: int | None = None
    frames: Mapping[str, int] = field(default_factory=dict)
    stats: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Compile:
    """``compile``: what ``torch.compile`` did (nothing when dynamo was never imported; its
    graph breaks, and its compilations or the ``error`` that kept them from being read)."""

    graph_breaks: tuple[GraphBreak, ...] = written_with("counters", "error", default=())
    frames: tuple[CompiledFrame, ...] = written_with("counters", default=())
    recompiles: tuple[Recompile, ...] = written_with("counters", default=())
    counters: CompileCounters | None = omit_none()
    error: str | None = omit_none()


@dataclass(frozen=True)
class RunInfo:
    """run.json: what only the live run could see (docs/run-json.md), as ``advisor profile``
    writes it and the analysis reads it."""

    schema_version: int | None = None
    advisor_version: str | None = None
    script: str | None = None  # as typed (``train.py``, ``-m pkg.module``)
    script_path: str | None = None
    module: str | None = None
    argv: tuple[str, ...] | None = None  # the script's arguments
    cwd: str | None = None
    pid: int | None = None
    started_at: str | None = None  # ISO 8601 UTC
    ended_at: str | None = None
    duration_s: float | None = None
    exit_code: int | None = None
    ended_early: bool | None = None
    end_reason: str | None = None
    error: str | None = None
    no_steps: bool | None = None
    steps_seen: int | None = None
    step_source: str | None = None  # optimizer | advisor.step | forward
    trace: str | None = None
    trace_scope: str | None = None
    window_steps: tuple[int, ...] | None = None  # [first, last]
    stopped_after_window: bool | None = None
    max_seconds_hit: bool | None = None
    foreign_profiler: bool | None = None
    foreign_profiler_step: int | None = None
    export_error: str | None = None
    call_sites: int | None = None
    call_sites_error: str | None = None
    step_module: str | None = None
    phase: str | None = None  # what the trace holds: "train" or "eval"
    eval: Eval | None = None
    # None: a run.json from before phases were listed (its ``eval.missing`` says it)
    missing_phases: tuple[MissingPhase, ...] | None = None
    capture_limits: tuple[CaptureLimit, ...] = ()
    profile: Profile | None = None
    torch: str | None = None
    cuda: str | None = None
    versions: Versions | None = None
    device: Device = field(default_factory=Device)
    host: Host = field(default_factory=Host)
    memory: Memory = field(default_factory=Memory)
    backends: Backends = field(default_factory=Backends)
    dataloaders: tuple[DataLoader, ...] = ()
    optimizers: tuple[Optimizer, ...] = ()
    zero_grad: tuple[ZeroGrad, ...] = ()
    allocator: Allocator = field(default_factory=Allocator)
    forward: Forward = field(default_factory=Forward)
    modules: Modules = field(default_factory=Modules)
    compile: Compile = field(default_factory=Compile)
    notes: tuple[str, ...] = ()
    timings_s: Mapping[str, float] = field(default_factory=dict)
    distributed: Distributed | None = omit_none()  # torchrun ranks only
    trial: Try | None = renamed("try", None, omit="none")  # advisor try only
    forks: Forks | None = omit_none()  # a script that forked only
    # what other tools' files hold where advisor profile's do not (read, never written): a CPU
    # count at the top level (dataloader-stall reads it before ``host.cpu_count``), a peak
    # memory, a start time
    cpu_count: int | None = omit_none()
    peak_memory_bytes: float | None = omit_none()
    date: str | None = omit_none()
    start_time: str | None = omit_none()


def read(data: Mapping[str, object] | None) -> RunInfo | None:
    """The record of a run.json object (as ``json.loads`` gives it), or None without one."""
    if data is None:
        return None
    return record.load(RunInfo, data, "run.json", lenient=True)


def read_file(path: Path) -> RunInfo | None:
    """The run.json at ``path`` (leniently), or None when there is none or it is no JSON
    object: a damaged run.json only loses the live-run facts, never the analysis."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return read(data) if isinstance(data, dict) else None


def dump(run: RunInfo) -> dict[str, object]:
    """run.json's object (``advisor profile`` writes it with sorted keys)."""
    out = record.dump(run)
    assert isinstance(out, dict)
    return out
