"""run.json as a record: the facts of a live run that ``advisor profile`` records and the
detectors read (``ctx.run.backends.cudnn_benchmark``), typed (docs/run-json.md says what each
key means).

Only the sections the analysis reads are declared here; the file holds more (versions, timings,
the profiler's settings...), and a key this record does not declare is ignored. run.json is read
leniently (:func:`read`, ``record.load(..., lenient=True)``), as docs/run-json.md promises: a
value of another type reads as absent (its default, ``None`` or empty), a row that is not an
object is left out, and a missing section reads as an empty one, so a detector reads
``ctx.run.backends.cudnn_benchmark`` without asking whether ``backends`` was recorded. A
damaged run.json only loses the live-run facts, never the analysis.

**Adding a fact** is one line in the record of its section, ``name: type = default`` (every
field has a default: a run.json of an earlier version lacks it). A key that is a Python
builtin or keyword (``class``, ``type``) is declared with ``renamed("class", None)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from advisor import record
from advisor.record import renamed


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
    total_memory_bytes: int | None = None  # on a CPU run: host memory


@dataclass(frozen=True)
class Host:
    """``host``: the machine."""

    cpu_count: int | None = None  # CPUs this process may use


@dataclass(frozen=True)
class Memory:
    """``memory``: the CUDA caching allocator's peaks over the profiled window."""

    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None


@dataclass(frozen=True)
class Backends:
    """``backends``: the backend flags as set when the window was captured."""

    cudnn_benchmark: bool | None = None
    cudnn_deterministic: bool | None = None
    cudnn_allow_tf32: bool | None = None
    matmul_allow_tf32: bool | None = None
    float32_matmul_precision: str | None = None  # "highest", "high", "medium"
    detect_anomaly: bool | None = None
    cuda_launch_blocking: bool | None = None


@dataclass(frozen=True)
class EvalWithGrad:
    """A top-level module called in ``eval()`` mode with autograd on (``forward``)."""

    module: str | None = None
    file: str | None = None
    line: int | None = None
    function: str | None = None
    count: int | None = None


@dataclass(frozen=True)
class Forward:
    """``forward``: the forward passes seen before the window."""

    autocast_dtypes: tuple[str, ...] = ()
    eval_with_grad: tuple[EvalWithGrad, ...] = ()


@dataclass(frozen=True)
class ConvBn:
    """A convolution with bias whose next module call is a BatchNorm (``modules``)."""

    conv: str | None = None
    bn: str | None = None
    file: str | None = None  # where the convolution was made
    line: int | None = None


@dataclass(frozen=True)
class Modules:
    """``modules``: how the models were set up."""

    conv_bias_before_bn: tuple[ConvBn, ...] = ()
    channels_last: bool | None = None
    data_parallel: bool | None = None
    data_parallel_sites: tuple[Site, ...] = ()
    distributed_data_parallel: bool | None = None
    fully_sharded_data_parallel: bool | None = None


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
    file: str | None = None
    line: int | None = None


@dataclass(frozen=True)
class ZeroGrad:
    """``zero_grad`` calls at one call site (``zero_grad``)."""

    owner: str | None = None  # "Optimizer", "Module"
    set_to_none: bool | None = None
    file: str | None = None
    line: int | None = None
    function: str | None = None


@dataclass(frozen=True)
class EmptyCache:
    """``torch.cuda.empty_cache()`` calls at one call site (``allocator.empty_cache``)."""

    calls: int | None = None
    file: str | None = None
    line: int | None = None
    function: str | None = None


@dataclass(frozen=True)
class Allocator:
    """``allocator``: the caching allocator's settings and the calls that empty it."""

    empty_cache: tuple[EmptyCache, ...] = ()
    alloc_conf: str | None = None  # PYTORCH_CUDA_ALLOC_CONF (or its HIP/generic name)
    caching_disabled: bool | None = None  # PYTORCH_NO_CUDA_MEMORY_CACHING


@dataclass(frozen=True)
class GraphBreak:
    """A graph break dynamo logged, at the innermost frame of the user's files."""

    file: str | None = None
    line: int | None = None
    function: str | None = None
    kind: str | None = renamed("type", None)  # its class ("Data-dependent branching")
    reason: str | None = None
    count: int | None = None


@dataclass(frozen=True)
class CompiledFrame:
    """One compilation (``compile.frames``)."""

    compile_id: str | None = None  # "frame/attempt"
    function: str | None = None
    file: str | None = None
    line: int | None = None
    resume: bool | None = None  # the code after a graph break


@dataclass(frozen=True)
class Recompile:
    """A recompilation: the guard that failed (``compile.recompiles``)."""

    compile_id: str | None = None
    function: str | None = None
    file: str | None = None
    line: int | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Compile:
    """``compile``: what ``torch.compile`` did."""

    graph_breaks: tuple[GraphBreak, ...] = ()
    frames: tuple[CompiledFrame, ...] = ()
    recompiles: tuple[Recompile, ...] = ()


@dataclass(frozen=True)
class RunInfo:
    """run.json: what only the live run could see (docs/run-json.md)."""

    phase: str | None = None  # what the trace holds: "train" or "eval"
    device: Device = field(default_factory=Device)
    host: Host = field(default_factory=Host)
    # a CPU count at the top level, read where a file has one there (advisor profile writes
    # ``host.cpu_count``; dataloader-stall reads this one first)
    cpu_count: int | None = None
    memory: Memory = field(default_factory=Memory)
    backends: Backends = field(default_factory=Backends)
    forward: Forward = field(default_factory=Forward)
    modules: Modules = field(default_factory=Modules)
    dataloaders: tuple[DataLoader, ...] = ()
    optimizers: tuple[Optimizer, ...] = ()
    zero_grad: tuple[ZeroGrad, ...] = ()
    allocator: Allocator = field(default_factory=Allocator)
    compile: Compile = field(default_factory=Compile)


def read(data: Mapping[str, object] | None) -> RunInfo | None:
    """The record of a run.json object (as ``json.loads`` gives it), or None without one."""
    if data is None:
        return None
    return record.load(RunInfo, data, "run.json", lenient=True)
