"""Facts read once from the live process: versions, device, memory, backend flags, user frames.

Everything here is called outside the profiled steps and never raises: a fact that cannot be
read is recorded as ``None``.
"""

from __future__ import annotations

import os
import platform
import sys
import sysconfig
import warnings
from collections.abc import Callable
from typing import Any

import advisor
from advisor import settings
from advisor.runcapture import Versions
from advisor.runinfo import Backends, Device, Host, Memory, Site

_SKIP_PREFIXES: tuple[str, ...] = ()


def _skip_prefixes() -> tuple[str, ...]:
    global _SKIP_PREFIXES
    if not _SKIP_PREFIXES:
        import torch

        dirs = {
            os.path.dirname(os.path.abspath(torch.__file__)),
            os.path.dirname(os.path.abspath(advisor.__file__)),
        }
        for key in ("stdlib", "platstdlib"):
            p = sysconfig.get_paths().get(key)
            if p:
                dirs.add(os.path.abspath(p))
        _SKIP_PREFIXES = tuple(d + os.sep for d in dirs)
    return _SKIP_PREFIXES


def is_user_file(filename: str) -> bool:
    """True for the user's own source files (not torch, not the advisor, not the stdlib)."""
    if not filename or filename.startswith("<"):
        return False
    return not os.path.abspath(filename).startswith(_skip_prefixes())


def user_site(depth: int = 2) -> Site | None:
    """The innermost user frame calling into us (file, line, function), or None."""
    try:
        f = sys._getframe(depth)
    except ValueError:
        return None
    while f is not None:
        code = f.f_code
        if is_user_file(code.co_filename):
            return Site(file=code.co_filename, line=f.f_lineno, function=code.co_name)
        f = f.f_back  # type: ignore[assignment]
    return None


def _safe(fn: Callable[[], Any]) -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn()
    except Exception:  # noqa: BLE001 (a fact we cannot read is None)
        return None


def versions() -> Versions:
    import torch

    cudnn = _safe(
        lambda: torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    )
    return Versions(
        torch=str(torch.__version__),
        cuda=getattr(torch.version, "cuda", None),
        hip=getattr(torch.version, "hip", None),
        cudnn=cudnn,
        python=platform.python_version(),
        platform=platform.platform(terse=True),
    )


def cuda_in_use() -> bool:
    """Whether the script has initialized CUDA. Never initializes it (``is_available()`` would,
    freezing CUDA_VISIBLE_DEVICES before the script could set it)."""
    import torch

    return bool(_safe(torch.cuda.is_initialized))


def device_facts() -> Device:
    """The device the script used: the current CUDA device when CUDA was used, else the CPU."""
    import torch

    if cuda_in_use():
        idx = _safe(torch.cuda.current_device) or 0
        props = _safe(lambda: torch.cuda.get_device_properties(idx))
        if props is not None:
            return Device(
                type="cuda",
                index=idx,
                count=_safe(torch.cuda.device_count),
                name=props.name,
                compute_capability=f"{props.major}.{props.minor}",
                total_memory_bytes=int(props.total_memory),
                multi_processor_count=getattr(props, "multi_processor_count", None),
            )
    mem = _safe(lambda: os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    name = _safe(_cpu_model) or platform.processor() or platform.machine() or "cpu"
    return Device(
        type="cpu",
        index=None,
        count=os.cpu_count(),
        name=name,
        compute_capability=None,
        total_memory_bytes=mem,
        multi_processor_count=None,
        cuda_available=bool(_safe(torch.cuda.is_available)),
    )


def host_facts() -> Host:
    """The machine the script ran on: CPUs it may use (what num_workers should be sized to)."""
    usable = _safe(lambda: len(os.sched_getaffinity(0)))
    return Host(
        cpu_count=usable or os.cpu_count(),
        cpu_count_total=os.cpu_count(),
        cpu_model=_safe(_cpu_model),
        memory_bytes=_safe(lambda: os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")),
    )


def _cpu_model() -> str | None:
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip() or None
    return None


def reset_peak_memory() -> None:
    import torch

    if cuda_in_use():
        _safe(torch.cuda.reset_peak_memory_stats)


def peak_memory() -> Memory:
    import torch

    if not cuda_in_use():
        return Memory()
    return Memory(
        peak_allocated_bytes=_safe(torch.cuda.max_memory_allocated),
        peak_reserved_bytes=_safe(torch.cuda.max_memory_reserved),
    )


def backend_facts() -> Backends:
    """cuDNN / matmul precision and determinism flags as the script left them."""
    import torch

    b = torch.backends
    return Backends(
        cudnn_benchmark=_safe(lambda: bool(b.cudnn.benchmark)),
        cudnn_allow_tf32=_safe(lambda: bool(b.cudnn.allow_tf32)),
        cudnn_deterministic=_safe(lambda: bool(b.cudnn.deterministic)),
        matmul_allow_tf32=_safe(lambda: bool(b.cuda.matmul.allow_tf32)),
        matmul_allow_fp16_reduced_precision_reduction=_safe(
            lambda: bool(b.cuda.matmul.allow_fp16_reduced_precision_reduction)
        ),
        float32_matmul_precision=_safe(torch.get_float32_matmul_precision),
        deterministic=_safe(lambda: bool(torch.are_deterministic_algorithms_enabled())),
        # debug modes that make every operator cost more host time (host-overhead)
        detect_anomaly=_safe(lambda: bool(torch.is_anomaly_enabled())),
        cuda_launch_blocking=settings.cuda_launch_blocking(),
        # the fp32_precision API of torch >= 2.9 (None where absent)
        matmul_fp32_precision=_safe(lambda: str(b.cuda.matmul.fp32_precision)),
        cudnn_conv_fp32_precision=_safe(lambda: str(b.cudnn.conv.fp32_precision)),  # type: ignore[attr-defined]
    )
