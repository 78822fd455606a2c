"""Optimizer fixes: ``zero_grad(set_to_none=True)`` and multi-tensor (foreach) optimizers."""

from __future__ import annotations

import functools
from typing import Any

from advisor.profile.trial.base import Patcher, PatchFix, RunFacts


class ZeroGradNotNone(PatchFix):
    id = "zero-grad-not-none"
    finding_ids: tuple[str, ...] = ("zero-grad-not-none",)
    changes = (
        "Optimizer.zero_grad() and Module.zero_grad() always run with set_to_none=True: "
        "gradients are released instead of filled with zeros; the next backward writes them."
    )
    risks = (
        "Code that reads or updates p.grad between zero_grad() and backward() (manual "
        "accumulation with p.grad.add_, gradient logging) finds None instead of zeros; "
        "optimizers skip parameters whose grad is None, which for zeros differs only with "
        "weight decay or momentum on parameters that received no gradient."
    )

    def applies_to(self, facts: RunFacts) -> str | None:
        if facts.zero_grad and all(z.set_to_none is not False for z in facts.zero_grad):
            return "every zero_grad() call already used set_to_none=True"
        if not facts.zero_grad and "zero-grad-not-none" not in facts.findings:
            return "the script called no zero_grad() before the window"
        return None

    def apply(self, patcher: Patcher) -> None:
        import torch

        for owner in (torch.optim.Optimizer, torch.nn.Module):
            orig = owner.__dict__["zero_grad"]
            patcher.patch(self.id, owner, "zero_grad", self._wrap(patcher, orig, owner.__name__))

    def _wrap(self, patcher: Patcher, orig: Any, owner: str) -> Any:
        fid = self.id

        @functools.wraps(orig)
        def zero_grad(obj: Any, *args: Any, **kwargs: Any) -> Any:
            stn = kwargs.pop("set_to_none", args[0] if args else True)
            if not stn:
                patcher.count(fid, f"{owner}.zero_grad calls switched to set_to_none=True")
            return orig(obj, *args[1:], set_to_none=True, **kwargs)

        return zero_grad


class SingleTensorOptimizer(PatchFix):
    id = "single-tensor-optimizer"
    finding_ids: tuple[str, ...] = ("single-tensor-optimizer",)
    changes = (
        "torch.optim optimizers that accept foreach are constructed with foreach=True (unless "
        "fused=True or differentiable=True was asked): one multi-tensor kernel per operation "
        "instead of one per parameter."
    )
    risks = (
        "foreach keeps intermediate copies of all parameters at once (more peak memory during "
        "step()); results equal the per-parameter loop up to floating-point summation order. "
        "fused=True (faster still on a GPU) is a code change try does not make."
    )

    def applies_to(self, facts: RunFacts) -> str | None:
        if not facts.optimizers:
            return "no optimizer stepped in the run"
        if all(o.foreach or o.fused for o in facts.optimizers):
            return "every optimizer already runs with foreach or fused"
        return None

    def apply(self, patcher: Patcher) -> None:
        import torch

        orig = torch.optim.Optimizer.__dict__["__init__"]
        fid = self.id

        @functools.wraps(orig)
        def __init__(opt: Any, params: Any, defaults: dict[str, Any], *a: Any, **kw: Any) -> None:
            try:
                if (
                    "foreach" in defaults
                    and not defaults.get("foreach")
                    and not defaults.get("fused")
                    and not defaults.get("differentiable")
                ):
                    defaults = dict(defaults, foreach=True)
                    patcher.count(fid, "optimizers switched to foreach=True")
                    patcher.note(fid, f"{type(opt).__name__}: foreach=True")
            except Exception:  # noqa: BLE001 (an odd defaults object is left alone)
                pass
            orig(opt, params, defaults, *a, **kw)

        patcher.patch(fid, torch.optim.Optimizer, "__init__", __init__)
