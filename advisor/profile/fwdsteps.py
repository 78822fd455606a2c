"""Top-level module calls: the steps of a loop without an optimizer, and the start of an
evaluation phase.

A call is top-level when no other module's ``forward`` is running on the main thread (a global
forward pre-hook and an always-called forward hook keep the nesting depth). Each top-level
call is passed to ``on_call(module)`` before the module runs; the callback may raise into the
script (to stop it, as the optimizer step hook does). Calls from other threads and inside a
torch.compile trace are ignored. The hooks cost two Python calls per module call, so they are
installed only while the session needs them (see :mod:`advisor.profile.session`). Once
torch.compile is in use (dynamo imported) they are never unregistered, only made inert:
compiled graphs guard on the number of global module hooks, and removing ours would recompile
every compiled module (a recompilation the script itself never has).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any


class ForwardSteps:
    def __init__(self, on_call: Callable[[Any], None]) -> None:
        import torch

        self._torch = torch
        self._on_call = on_call
        self._main = threading.main_thread().ident
        self._is_compiling = getattr(torch.compiler, "is_compiling", lambda: False)
        self.depth = 0
        self._handles: list[Any] = []
        self._active = False

    @property
    def installed(self) -> bool:
        return bool(self._handles) and self._active

    def install(self) -> None:
        self.depth = 0
        self._active = True
        if self._handles:
            return
        mm = self._torch.nn.modules.module
        self._handles = [
            mm.register_module_forward_pre_hook(self._pre),
            mm.register_module_forward_hook(self._post, always_call=True),
        ]

    def remove(self) -> None:
        self._active = False
        if "torch._dynamo" in sys.modules:
            return  # inert, not unregistered: see the module doc
        while self._handles:
            self._handles.pop().remove()

    def _pre(self, mod: Any, args: Any) -> None:
        # is_compiling first: dynamo folds it to True and drops the hook from the graph (a
        # thread-id call first would be a graph break in every compiled module)
        if self._is_compiling() or not self._active or threading.get_ident() != self._main:
            return None
        top = self.depth == 0
        if top:
            self._on_call(mod)  # may raise into the script: the depth is not raised then
        self.depth += 1
        return None

    def _post(self, mod: Any, args: Any, out: Any) -> None:
        if self._is_compiling() or not self._active or threading.get_ident() != self._main:
            return None
        if self.depth > 0:
            self.depth -= 1
        return None


def has_parameters(mod: Any) -> bool:
    """A module with at least one parameter (a model, not a loss function)."""
    try:
        return next(iter(mod.parameters()), None) is not None
    except Exception:  # noqa: BLE001 (an odd module never breaks the script)
        return False


def in_eval(torch: Any, mod: Any) -> bool:
    """The call is evaluation: the module is in eval mode, or autograd is off."""
    return (
        not getattr(mod, "training", True)
        or not torch.is_grad_enabled()
        or torch.is_inference_mode_enabled()
    )
