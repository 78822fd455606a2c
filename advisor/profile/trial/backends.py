"""Backend-flag fixes: cuDNN autotuning, TF32 matmuls, and (only when asked) autocast.

Flags are set before the script's first line and *held*: a script that sets them back (as
``torch.backends.cudnn.benchmark = False``) keeps the fixed value, and the report notes it.
Reverting restores the setters and the values from before the run.
"""

from __future__ import annotations

import functools
from typing import Any

from advisor.profile.trial.base import Patcher, PatchFix, RunFacts


class _Held:
    """A data descriptor replacing a ``ContextProp`` of ``torch.backends.cudnn``: reads go to
    the original, writes store ``value`` (noting a script's attempt to set another)."""

    def __init__(self, orig: Any, value: Any, on_override: Any) -> None:
        self.orig, self.value, self.on_override = orig, value, on_override

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self.orig.__get__(obj, objtype)

    def __set__(self, obj: Any, val: Any) -> None:
        if val != self.value:
            self.on_override(val)
        self.orig.__set__(obj, self.value)


def _hold_cudnn(patcher: Patcher, fix_id: str, name: str, value: Any) -> None:
    import torch

    mod = torch.backends.cudnn
    cls: Any = type(mod)
    before = getattr(mod, name)
    held = _Held(
        cls.__dict__[name],
        value,
        lambda v: patcher.note(fix_id, f"the script set cudnn.{name}={v!r}; kept {value!r}"),
    )
    patcher.patch(fix_id, cls, name, held)
    setattr(mod, name, value)
    patcher.on_revert(fix_id, lambda: held.orig.__set__(mod, before))
    patcher.note(fix_id, f"torch.backends.cudnn.{name} = {value!r} (was {before!r})")
    patcher.count(fix_id, "backend flags set")


class CudnnBenchmark(PatchFix):
    id = "cudnn-benchmark"
    finding_ids: tuple[str, ...] = ("cudnn-benchmark",)
    changes = (
        "torch.backends.cudnn.benchmark = True before the script starts, held when the script "
        "sets it to False: cuDNN times the candidate algorithms of each new convolution shape "
        "once and keeps the fastest."
    )
    risks = (
        "The first call of each shape is slower (autotuning), so shapes that change every step "
        "get slower, not faster; algorithm choice can differ between runs, so results are not "
        "bit-for-bit reproducible (torch.backends.cudnn.deterministic is left as it is)."
    )

    def applies_to(self, facts: RunFacts) -> str | None:
        if not facts.cuda:
            return "cuDNN runs only on CUDA devices (this run used the CPU)"
        return None

    def apply(self, patcher: Patcher) -> None:
        _hold_cudnn(patcher, self.id, "benchmark", True)


class Tf32Matmul(PatchFix):
    id = "fp32-matmul"
    finding_ids: tuple[str, ...] = ("fp32-matmul",)
    numerics_changing = True
    changes = (
        'torch.set_float32_matmul_precision("high") (TF32 for FP32 matmuls) and '
        "torch.backends.cudnn.allow_tf32 = True before the script starts, held when the "
        'script asks for "highest" or turns allow_tf32 off.'
    )
    risks = (
        "TF32 keeps 10 bits of mantissa in the matmul inputs: results differ from FP32 around "
        "the 4th significant digit. Most training is insensitive to it; code that checks exact "
        "values or needs full FP32 (some solvers, ill-conditioned problems) is not. Not in "
        "--fix all-safe for that reason."
    )

    def applies_to(self, facts: RunFacts) -> str | None:
        if not facts.cuda:
            return "TF32 exists only on NVIDIA GPUs (this run used the CPU)"
        if facts.compute_capability is not None and facts.compute_capability < 8.0:
            return (
                f"TF32 needs compute capability 8.0 or newer (this GPU: {facts.compute_capability})"
            )
        return None

    def apply(self, patcher: Patcher) -> None:
        import torch

        fid = self.id
        before = torch.get_float32_matmul_precision()
        orig_set = torch.set_float32_matmul_precision

        @functools.wraps(orig_set)
        def set_precision(precision: str) -> None:
            if precision == "highest":
                patcher.note(
                    fid, 'the script asked for float32_matmul_precision("highest"); kept "high"'
                )
                precision = "high"
            orig_set(precision)

        patcher.patch(fid, torch, "set_float32_matmul_precision", set_precision)
        orig_set("high")
        patcher.on_revert(fid, lambda: orig_set(before))
        patcher.note(fid, f'float32_matmul_precision "high" (was "{before}")')
        cublas = type(torch.backends.cuda.matmul)
        orig_setattr = cublas.__dict__["__setattr__"]

        def __setattr__(obj: Any, name: str, value: Any) -> Any:
            if name == "allow_tf32" and not value:
                patcher.note(fid, "the script set cuda.matmul.allow_tf32=False; kept True")
                value = True
            elif name == "fp32_precision" and value == "ieee":
                patcher.note(fid, 'the script set cuda.matmul.fp32_precision="ieee"; kept "tf32"')
                value = "tf32"
            return orig_setattr(obj, name, value)

        patcher.patch(fid, cublas, "__setattr__", __setattr__)
        _hold_cudnn(patcher, fid, "allow_tf32", True)


class Autocast(PatchFix):
    id = "amp"
    finding_ids: tuple[str, ...] = ("fp32-matmul",)
    numerics_changing = True
    changes = (
        "Each top-level module call (the outermost forward) runs under torch.autocast in "
        "bfloat16 (on the module's device type: cuda or cpu); the loss and backward stay "
        "outside, as with a hand-written autocast block around the forward."
    )
    risks = (
        "Changes numerics: matmuls and convolutions compute in bfloat16 (8 bits of mantissa). "
        "fp16 would need a GradScaler (a code change), so a GPU without bfloat16 support is "
        "not applicable. Only with an explicit --fix amp, never in all-safe."
    )

    def applies_to(self, facts: RunFacts) -> str | None:
        if facts.cuda and facts.compute_capability is not None and facts.compute_capability < 8.0:
            return (
                "bfloat16 autocast needs compute capability 8.0 or newer; fp16 needs a "
                "GradScaler, a code change"
            )
        return None

    def apply(self, patcher: Patcher) -> None:
        import torch

        from advisor.profile.trial.modules import OutermostForward

        fid = self.id

        def enter(module: Any, args: Any) -> Any:
            dev = _device_type(module, args)
            ctx = torch.autocast(dev, dtype=torch.bfloat16)
            ctx.__enter__()
            patcher.count(fid, f"forwards under autocast({dev}, bfloat16)")
            return ctx, None

        OutermostForward(patcher, fid, enter).install()


def _device_type(module: Any, args: Any) -> str:
    import torch

    for p in module.parameters():
        return "cuda" if p.device.type == "cuda" else "cpu"
    for a in args:
        if isinstance(a, torch.Tensor):
            return "cuda" if a.device.type == "cuda" else "cpu"
    return "cpu"
