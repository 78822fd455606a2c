"""torch-advisor: a profiler-driven performance advisor for PyTorch.

The public API a training script may use is :func:`step`; everything else is reached through
the ``advisor`` command. Importing this package never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable

__version__ = "0.1.0"

__all__ = ["__version__", "step"]

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
