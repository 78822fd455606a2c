"""Module fixes: channels_last conv nets, and eval forwards without autograd.

Both act on the *outermost* module call (a module called while no other module's forward is
running: the model, as the script calls it) through global forward hooks, which run before
the advisor's own observer so run.json records the forward as it ran.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

from advisor.profile.trial.base import Patcher, PatchFix, RunFacts

# enter(module, args) -> (context to exit after the forward or None, new args or None)
Enter = Callable[[Any, tuple[Any, ...]], tuple[Any, Any]]


class OutermostForward:
    """A pair of global forward hooks that calls ``enter`` on each outermost module call and
    exits the context it returns when that call ends (also when it raises)."""

    def __init__(self, patcher: Patcher, fix_id: str, enter: Enter) -> None:
        self.patcher, self.fix_id, self.enter = patcher, fix_id, enter
        self.depth = 0
        self.stack: list[Any] = []

    def install(self) -> None:
        from torch.nn.modules import module as m

        def pre(module: Any, args: Any) -> Any:
            self.depth += 1
            if self.depth != 1:
                return None
            try:
                ctx, new_args = self.enter(module, args)
            except Exception as err:  # noqa: BLE001 (the fix steps aside, the forward runs)
                self.patcher.note(self.fix_id, f"skipped a forward: {type(err).__name__}: {err}")
                ctx, new_args = None, None
            self.stack.append(ctx)
            return new_args

        def post(module: Any, args: Any, output: Any) -> None:
            self.depth = max(0, self.depth - 1)
            if self.depth == 0 and self.stack:
                ctx = self.stack.pop()
                if ctx is not None:
                    ctx.__exit__(None, None, None)

        h_pre = m.register_module_forward_pre_hook(pre)
        h_post = m.register_module_forward_hook(post, always_call=True)
        try:  # run before the advisor's observer (registered earlier), so it sees the fix
            hooks: Any = m._global_forward_pre_hooks  # an OrderedDict
            hooks.move_to_end(h_pre.id, last=False)
        except (AttributeError, KeyError):
            pass
        self.patcher.on_revert(self.fix_id, h_pre.remove)
        self.patcher.on_revert(self.fix_id, h_post.remove)


class ChannelsLast(PatchFix):
    id = "channels-last"
    finding_ids: tuple[str, ...] = ("channels-last",)
    changes = (
        "The first time a model containing Conv2d is called, model.to(memory_format="
        "torch.channels_last); on every outermost call its 4-D tensor arguments are made "
        "channels_last (x.contiguous(memory_format=torch.channels_last))."
    )
    risks = (
        "Layout only, values are unchanged; code that calls .view() on a conv output or "
        "assumes NCHW strides may fail (use .reshape()), and nets without Tensor Core "
        "(16-bit) convolutions can get slower. Optimizer state created before the first "
        "forward keeps its layout."
    )

    def apply(self, patcher: Patcher) -> None:
        import torch

        fid = self.id
        seen: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
        cl = torch.channels_last

        def enter(module: Any, args: Any) -> tuple[Any, Any]:
            has_conv = seen.get(module)
            if has_conv is None:
                has_conv = any(isinstance(x, torch.nn.Conv2d) for x in module.modules())
                seen[module] = has_conv
                if has_conv:
                    module.to(memory_format=cl)
                    patcher.note(fid, f"{type(module).__name__}: parameters to channels_last")
            if not has_conv:
                return None, None
            new = tuple(
                a.contiguous(memory_format=cl)
                if isinstance(a, torch.Tensor) and a.dim() == 4
                else a
                for a in args
            )
            patcher.count(fid, "forwards with channels_last inputs")
            return None, new

        OutermostForward(patcher, fid, enter).install()


class InferenceWithoutNoGrad(PatchFix):
    id = "inference-without-no-grad"
    finding_ids: tuple[str, ...] = ("inference-without-no-grad",)
    changes = (
        "An outermost call of a module in eval() mode with autograd on runs under "
        "torch.inference_mode() when the process has built no optimizer, else under "
        "torch.no_grad(); modules whose parameters an optimizer trains are left alone."
    )
    risks = (
        "Outputs of inference_mode are inference tensors: using them later in autograd "
        "(saved for a backward, updated in place outside inference mode) raises an error, "
        "which try reports as a failed run. A script that needs gradients through an eval "
        "model whose parameters no optimizer holds (gradients w.r.t. inputs, a frozen "
        "teacher inside a loss) loses them."
    )

    def applies_to(self, facts: RunFacts) -> str | None:
        if not facts.eval_with_grad and "inference-without-no-grad" not in facts.findings:
            return "no eval-mode forward with autograd on was seen in the run"
        return None

    def apply(self, patcher: Patcher) -> None:
        import torch

        fid = self.id
        optimizers: weakref.WeakSet[Any] = weakref.WeakSet()
        orig = torch.optim.Optimizer.__dict__["__init__"]

        @functools.wraps(orig)
        def __init__(opt: Any, *a: Any, **kw: Any) -> None:
            orig(opt, *a, **kw)
            optimizers.add(opt)

        patcher.patch(fid, torch.optim.Optimizer, "__init__", __init__)

        def trained(module: Any) -> bool:
            held = {id(p) for o in list(optimizers) for g in o.param_groups for p in g["params"]}
            return any(id(p) in held for p in module.parameters())

        def enter(module: Any, args: Any) -> tuple[Any, Any]:
            if module.training or not torch.is_grad_enabled() or torch.is_inference_mode_enabled():
                return None, None
            if optimizers and trained(module):
                patcher.note(fid, f"{type(module).__name__}: eval() but trained; left alone")
                return None, None
            ctx = torch.no_grad() if optimizers else torch.inference_mode()
            ctx.__enter__()
            patcher.count(
                fid, f"eval forwards under {'no_grad' if optimizers else 'inference_mode'}"
            )
            return ctx, None

        OutermostForward(patcher, fid, enter).install()
