"""The patch installer that runs inside the script's process under ``advisor try``.

``advisor try`` starts ``advisor profile`` with the environment variable ``ADVISOR_TRY`` set to
a JSON object ``{"fixes": [ids], "seed": int, "loss_steps": int}``; the runner calls
:func:`install_from_env` before the script's first line (after its own observers, so run.json
records what the script ran with) and :meth:`TryRuntime.finish` when the script has stopped.
The variable is removed from the environment at once, so the script's own child processes
never see it. Both runs (before and after) are seeded the same way and record the first
``loss_steps`` losses (the scalar a ``.backward()`` was called on) so their numerics compare.
"""

from __future__ import annotations

import functools
import json
import math
import random
from typing import Any

from advisor import settings
from advisor.jsontext import compact
from advisor.profile.trial.base import Patcher
from advisor.runcapture import Try

OBSERVE = "_observe"  # the patcher key of the loss observer (not a fix)


class TryRuntime:
    def __init__(self, fix_ids: list[str], seed: int | None, loss_steps: int) -> None:
        self.fix_ids = fix_ids
        self.seed = seed
        self.loss_steps = loss_steps
        self.losses: list[float] = []
        self.outputs: list[float] = []  # sum(|x|) of the first outermost forward outputs
        self.patcher = Patcher()
        self.applied: list[str] = []

    def install(self) -> None:
        from advisor.profile.trial.registry import FIXES

        if self.seed is not None:
            _seed(self.seed)
        self._observe_loss()
        self._observe_outputs()
        for fid in self.fix_ids:
            fix = FIXES.get(fid)
            if fix is None:
                self.patcher.errors[fid] = "unknown fix"
                continue
            try:
                fix.apply(self.patcher)
                self.applied.append(fid)
            except Exception as err:  # noqa: BLE001 (reported; the script runs without it)
                self.patcher.errors[fid] = f"apply: {type(err).__name__}: {err}"
                fix.revert(self.patcher)

    def _observe_loss(self) -> None:
        import torch

        orig = torch.Tensor.backward
        losses, limit = self.losses, self.loss_steps

        @functools.wraps(orig)
        def backward(t: Any, *args: Any, **kwargs: Any) -> Any:
            if len(losses) < limit:
                try:
                    if t.numel() == 1 and t.is_floating_point():
                        v = float(t.detach().float())
                        losses.append(v if math.isfinite(v) else float("nan"))
                except Exception:  # noqa: BLE001 (observing never breaks the script)
                    pass
            return orig(t, *args, **kwargs)

        self.patcher.patch(OBSERVE, torch.Tensor, "backward", backward)

    def _observe_outputs(self) -> None:
        """For loops without backward (inference): a fingerprint of the first outputs of the
        outermost module calls. The hooks stay (as no-ops) until the run ends, in both runs."""
        import torch
        from torch.nn.modules import module as m

        depth = [0]
        outputs, limit = self.outputs, self.loss_steps

        def pre(mod: Any, args: Any) -> None:
            depth[0] += 1

        def post(mod: Any, args: Any, out: Any) -> None:
            depth[0] = max(0, depth[0] - 1)
            if depth[0] or len(outputs) >= limit:
                return
            if isinstance(out, (tuple, list)):
                out = next((x for x in out if isinstance(x, torch.Tensor)), None)
            if isinstance(out, torch.Tensor) and out.is_floating_point():
                try:
                    outputs.append(float(out.detach().float().abs().sum()))
                except Exception:  # noqa: BLE001
                    pass

        for h in (
            m.register_module_forward_pre_hook(pre),
            m.register_module_forward_hook(post, always_call=True),
        ):
            self.patcher.on_revert(OBSERVE, h.remove)

    def finish(self) -> Try:
        """Undo every patch; returns the ``try`` block of run.json."""
        self.patcher.revert()
        p = self.patcher
        return Try(
            fixes=tuple(self.fix_ids),
            applied=tuple(self.applied),
            seed=self.seed,
            losses=tuple(None if math.isnan(v) else v for v in self.losses),
            outputs=tuple(v if math.isfinite(v) else None for v in self.outputs),
            notes={k: tuple(v) for k, v in p.notes.items()},
            counts={k: dict(v) for k, v in p.counts.items()},
            errors=dict(p.errors),
        )


def _seed(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass


def install_from_env() -> TryRuntime | None:
    """Start the runtime when ``ADVISOR_TRY`` is set (and remove it from the environment)."""
    spec = settings.pop_try_spec()
    if not spec:
        return None
    try:
        data = json.loads(spec)
        fixes = [str(f) for f in data.get("fixes") or ()]
        seed = data.get("seed")
        rt = TryRuntime(
            fixes, int(seed) if seed is not None else None, int(data.get("loss_steps", 3))
        )
    except (ValueError, TypeError, AttributeError) as err:
        print(f"advisor: {settings.TRY_VAR} ignored: {err}", flush=True)
        return None
    rt.install()
    return rt


def env_value(fix_ids: list[str], seed: int | None, loss_steps: int) -> str:
    return compact({"fixes": fix_ids, "seed": seed, "loss_steps": loss_steps}).decode()
