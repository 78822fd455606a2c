"""torch-advisor: a profiler-driven performance advisor for PyTorch.

The public API: :func:`step` (marks a step for ``advisor profile``), :func:`analyze` (a trace
to a :class:`Report`, for notebooks; docs/api.md), :func:`on_trace_ready` and :func:`capture`
(for code that runs torch.profiler itself or cannot be launched through ``advisor profile``).
They are imported on first use: importing this package never imports torch, pandas or typer.

Public besides these: the command line, findings.json (schema 1) and, for detectors and
plugins, :mod:`advisor.detect` (docs/plugins.md). Every other module is private.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__version__ = "0.1.0"

__all__ = ["Report", "__version__", "analyze", "capture", "on_trace_ready", "step"]

_LAZY = {
    "analyze": "advisor.api",
    "Report": "advisor.api",
    "on_trace_ready": "advisor.profile.hooks",
    "capture": "advisor.profile.hooks",
}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'advisor' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value


# Set by ``advisor profile`` while it runs a script; ``None`` everywhere else.
_step_hook: Callable[[], None] | None = None


def step() -> None:
    """Mark the end of one step (iteration) for ``advisor profile``.

    Training loops need no call: the advisor hooks ``optimizer.step()``. Loops without an
    optimizer (inference, evaluation) call ``advisor.step()`` once per iteration. Outside
    ``advisor profile`` this is a no-op costing one attribute read.
    """
    hook = _step_hook
    if hook is not None:
        hook()
