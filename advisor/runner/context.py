"""Capture what only the live run can see (the ``dataloaders``, ``optimizers``, ``forward`` and
``modules`` blocks of run.json) with hooks that cost nothing measurable.

- ``DataLoader.__iter__`` (once per epoch) records each loader's settings; ``__init__`` of
  DataLoader, Optimizer and the convolution modules remembers the user's line that created them.
- One global forward pre-hook sees every module call *before* the profiled window: module
  instances, eval mode with grad enabled, autocast dtypes, conv-with-bias followed by BatchNorm,
  channels_last inputs, DataParallel and compiled modules. It is removed when the window's
  warm-up starts (kept as a no-op when torch.compile is in use, so compiled graphs do not
  recompile), so the window and every later step run without it.
- ``torch.compile`` and ``zero_grad`` are wrapped to note their use; all patches are undone by
  :meth:`ContextRecorder.uninstall`.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

from advisor.runner.facts import user_site

_MAX_ROWS = 32
_MAX_MODULES = 20_000


class ContextRecorder:
    def __init__(self) -> None:
        import torch

        self._torch = torch
        self._sites: weakref.WeakKeyDictionary[Any, dict[str, Any] | None] = (
            weakref.WeakKeyDictionary()
        )
        self._patches: list[tuple[Any, str, Any]] = []
        self._hook: Any = None
        self._fwd_on = False
        self._keys: set[tuple[Any, ...]] = set()
        self._mods: dict[int, Any] = {}  # strong refs until capture ends (then a snapshot)
        self._snapshot: dict[str, Any] | None = None
        self._last: Any = None
        self._pairs: dict[tuple[int, int], tuple[Any, Any]] = {}
        self._eval_grad: dict[type, tuple[Any, dict[str, Any] | None]] = {}
        self._autocast: set[tuple[str, str]] = set()
        self.dataloaders: list[dict[str, Any]] = []
        self._dl_ids: set[int] = set()
        self.optimizers: list[dict[str, Any]] = []
        self._opt_ids: set[int] = set()
        self.zero_grad: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.compiled_sites: list[dict[str, Any] | None] = []
        self.channels_last = False
        self.data_parallel: list[dict[str, Any] | None] = []
        self.ddp = False
        self.compiled_modules = False
        nn = torch.nn
        self._conv_types = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
        self._bn_types = {nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm}
        self._is_compiling = getattr(torch.compiler, "is_compiling", lambda: False)
        self._ac_probes = self._autocast_probes()

    # ------------------------------------------------------------------ install / remove
    def _patch(self, owner: Any, name: str, wrapper: Any) -> None:
        self._patches.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, wrapper)

    def _try(self, fn: Any, *args: Any) -> None:
        """Install one observer; one that does not fit this torch version is left out."""
        try:
            fn(*args)
        except (AttributeError, KeyError, TypeError):
            pass

    def _remember_site(self, cls: Any) -> None:
        orig = cls.__init__
        sites = self._sites

        @functools.wraps(orig)
        def __init__(obj: Any, *args: Any, **kwargs: Any) -> None:
            orig(obj, *args, **kwargs)
            try:
                if obj not in sites:
                    sites[obj] = user_site()
            except TypeError:  # not weak-referenceable
                pass

        self._patch(cls, "__init__", __init__)

    def install(self) -> None:
        torch = self._torch
        from torch.utils.data import DataLoader

        for cls in (DataLoader, torch.optim.Optimizer, torch.nn.modules.conv._ConvNd):
            self._try(self._remember_site, cls)
        self._try(self._observe_dataloaders, DataLoader)
        for owner in (torch.optim.Optimizer, torch.nn.Module):
            self._try(self._wrap_zero_grad, owner)
        self._try(self._wrap_compile, torch)
        self._hook = torch.nn.modules.module.register_module_forward_pre_hook(self._pre_hook)
        self._fwd_on = True

    def _observe_dataloaders(self, DataLoader: Any) -> None:  # noqa: N803
        orig_iter = DataLoader.__iter__

        @functools.wraps(orig_iter)
        def __iter__(dl: Any) -> Any:
            if id(dl) not in self._dl_ids:
                self._on_dataloader(dl)
            return orig_iter(dl)

        self._patch(DataLoader, "__iter__", __iter__)

    def _wrap_compile(self, torch: Any) -> None:
        orig_compile = torch.compile

        @functools.wraps(orig_compile)
        def compile_(*args: Any, **kwargs: Any) -> Any:
            if len(self.compiled_sites) < _MAX_ROWS:
                self.compiled_sites.append(user_site())
            return orig_compile(*args, **kwargs)

        self._patch(torch, "compile", compile_)

    def _wrap_zero_grad(self, owner: Any) -> None:
        orig = owner.__dict__["zero_grad"]
        kind = owner.__name__

        @functools.wraps(orig)
        def zero_grad(obj: Any, *args: Any, **kwargs: Any) -> Any:
            if not self._fwd_on:
                return orig(obj, *args, **kwargs)
            try:
                stn = kwargs.get("set_to_none", args[0] if args else True)
                site = user_site()
                key = (kind, bool(stn), site and site["file"], site and site["line"])
                if key not in self.zero_grad and len(self.zero_grad) < _MAX_ROWS:
                    self.zero_grad[key] = {"owner": kind, "set_to_none": bool(stn), **(site or {})}
            except Exception:  # noqa: BLE001 (capture never breaks the script)
                pass
            return orig(obj, *args, **kwargs)

        self._patch(owner, "zero_grad", zero_grad)

    def end_forward_capture(self) -> None:
        """Stop observing module calls (before the profiled window); keep the facts seen so far
        and let go of the modules."""
        self._fwd_on = False
        self._last = None
        if self._snapshot is None and self._hook is not None:
            try:
                self._snapshot = {"forward": self.forward_facts(), "modules": self.module_facts()}
            except Exception as err:  # noqa: BLE001 (facts are best effort)
                self._snapshot = {"forward": {}, "modules": {"error": f"{type(err).__name__}"}}
            self._mods.clear()
            self._pairs.clear()
            self._eval_grad.clear()
        if self._hook is not None and not (self.compiled_sites or self.compiled_modules):
            self._hook.remove()
            self._hook = None

    def uninstall(self) -> None:
        self.end_forward_capture()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        while self._patches:
            owner, name, orig = self._patches.pop()
            setattr(owner, name, orig)

    # ------------------------------------------------------------------ observers
    def _on_dataloader(self, dl: Any) -> None:
        self._dl_ids.add(id(dl))
        if len(self.dataloaders) >= _MAX_ROWS:
            return
        try:
            try:
                n: int | None = len(dl.dataset)
            except Exception:  # noqa: BLE001 (IterableDataset without __len__)
                n = None
            nw = int(dl.num_workers)
            site = self._sites.get(dl) or user_site(3) or {}
            self.dataloaders.append({
                "num_workers": nw,
                "pin_memory": bool(dl.pin_memory),
                "batch_size": dl.batch_size,
                "persistent_workers": bool(dl.persistent_workers),
                "prefetch_factor": dl.prefetch_factor if nw > 0 else None,
                "drop_last": bool(dl.drop_last),
                "dataset_len": n,
                "dataset_class": type(dl.dataset).__name__,
                "file": site.get("file"),
                "line": site.get("line"),
            })  # fmt: skip
        except Exception:  # noqa: BLE001
            pass

    def on_optimizer(self, opt: Any) -> None:
        """Called from the step hook with each optimizer that steps."""
        if id(opt) in self._opt_ids:
            return
        self._opt_ids.add(id(opt))
        if len(self.optimizers) >= _MAX_ROWS:
            return
        try:
            params = [p for g in opt.param_groups for p in g["params"]]
            dtypes: dict[str, int] = {}
            for p in params:
                k = str(p.dtype).removeprefix("torch.")
                dtypes[k] = dtypes.get(k, 0) + int(p.numel())
            site = self._sites.get(opt) or {}
            self.optimizers.append({
                "class": type(opt).__name__,
                "module": type(opt).__module__,
                "foreach": opt.defaults.get("foreach"),
                "fused": opt.defaults.get("fused"),
                "param_tensors": len(params),
                "param_elements": sum(dtypes.values()),
                "param_dtypes": dtypes,
                "file": site.get("file"),
                "line": site.get("line"),
            })  # fmt: skip
        except Exception:  # noqa: BLE001
            pass

    def _pre_hook(self, mod: Any, args: Any) -> None:
        if self._is_compiling() or not self._fwd_on:
            return None
        try:
            self._observe(mod, args)
        except Exception:  # noqa: BLE001 (capture never breaks the script)
            self._fwd_on = False
        return None

    def _autocast_probes(self) -> list[tuple[str, Any, Any]]:
        torch = self._torch
        try:
            torch.is_autocast_enabled("cpu")
            return [
                (dev, functools.partial(torch.is_autocast_enabled, dev),
                 functools.partial(torch.get_autocast_dtype, dev))
                for dev in ("cuda", "cpu")
            ]  # fmt: skip
        except TypeError:  # torch < 2.4
            return [
                ("cuda", torch.is_autocast_enabled, torch.get_autocast_gpu_dtype),
                ("cpu", torch.is_autocast_cpu_enabled, torch.get_autocast_cpu_dtype),
            ]

    def _autocast_key(self) -> tuple[tuple[str, str], ...]:
        out: tuple[tuple[str, str], ...] = ()
        for dev, enabled, dtype in self._ac_probes:
            if enabled():
                out += ((dev, str(dtype()).removeprefix("torch.")),)
        return out

    def _observe(self, mod: Any, args: Any) -> None:
        torch = self._torch
        prev, self._last = self._last, mod
        if type(mod) in self._bn_types and isinstance(prev, self._conv_types):
            if getattr(prev, "bias", None) is not None and len(self._pairs) < _MAX_ROWS:
                self._pairs.setdefault((id(prev), id(mod)), (prev, mod))
        grad = torch.is_grad_enabled()
        ac = self._autocast_key()
        key = (id(mod), mod.training, grad, ac)
        if key in self._keys:
            return
        self._keys.add(key)
        self._autocast.update(ac)
        if id(mod) not in self._mods:
            self._first_seen(mod, args)
        if not mod.training and grad and type(mod) not in self._eval_grad:
            if len(self._eval_grad) < _MAX_ROWS:
                self._eval_grad[type(mod)] = (mod, user_site(4))

    def _first_seen(self, mod: Any, args: Any) -> None:
        torch = self._torch
        if len(self._mods) < _MAX_MODULES:
            self._mods[id(mod)] = mod
        if isinstance(mod, torch.nn.DataParallel) and len(self.data_parallel) < _MAX_ROWS:
            self.data_parallel.append(user_site(5))
        if isinstance(mod, torch.nn.parallel.DistributedDataParallel):
            self.ddp = True
        if getattr(mod, "_compiled_call_impl", None) is not None or type(mod).__name__ == (
            "OptimizedModule"
        ):
            self.compiled_modules = True
        if isinstance(mod, self._conv_types) and not self.channels_last:
            cl = torch.channels_last if mod.weight.dim() == 4 else torch.channels_last_3d
            x = args[0] if args else None
            for t in (mod.weight, x):
                if isinstance(t, torch.Tensor) and t.dim() == mod.weight.dim():
                    if t.is_contiguous(memory_format=cl) and not t.is_contiguous():
                        self.channels_last = True

    # ------------------------------------------------------------------ results
    def _roots(self) -> list[Any]:
        mods = list(self._mods.values())
        inner: set[int] = set()
        for m in mods:
            for c in m.modules():
                if c is not m:
                    inner.add(id(c))
        return [m for m in mods if id(m) not in inner]

    def module_facts(self) -> dict[str, Any]:
        roots = self._roots()
        names: dict[int, str] = {}
        dtypes: dict[str, int] = {}
        seen_params: set[int] = set()
        for root in roots:
            for name, m in root.named_modules():
                names.setdefault(
                    id(m), f"{type(root).__name__}.{name}" if name else type(root).__name__
                )
            for p in root.parameters():
                if id(p) not in seen_params:
                    seen_params.add(id(p))
                    k = str(p.dtype).removeprefix("torch.")
                    dtypes[k] = dtypes.get(k, 0) + int(p.numel())
        pairs = []
        for conv, bn in self._pairs.values():
            site = self._sites.get(conv) or {}
            pairs.append({
                "conv": names.get(id(conv), type(conv).__name__),
                "bn": names.get(id(bn), type(bn).__name__),
                "file": site.get("file"),
                "line": site.get("line"),
            })  # fmt: skip
        return {
            "conv_bias_before_bn": pairs,
            "param_dtypes": dict(sorted(dtypes.items())),
            "channels_last": self.channels_last,
            "data_parallel": bool(self.data_parallel),
            "data_parallel_sites": [s for s in self.data_parallel if s],
            "distributed_data_parallel": self.ddp,
            "compiled": bool(self.compiled_sites) or self.compiled_modules,
            "compile_sites": [s for s in self.compiled_sites if s],
            "modules_seen": len(self._mods),
            "roots": sorted({type(r).__name__ for r in roots}),
        }

    def forward_facts(self) -> dict[str, Any]:
        # only modules called at the top (a frozen BatchNorm inside a training model is not
        # "inference with grad")
        roots = {id(m) for m in self._roots()}
        rows = []
        for cls, (m, site) in self._eval_grad.items():
            if id(m) in roots:
                rows.append({"module": cls.__name__, **(site or {})})
        autocast = sorted(self._autocast)
        return {
            "autocast": [{"device_type": d, "dtype": t} for d, t in autocast],
            "autocast_dtypes": sorted({t for _, t in autocast}),
            "eval_with_grad": rows,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataloaders": list(self.dataloaders),
            "optimizers": list(self.optimizers),
            "zero_grad": list(self.zero_grad.values()),
            **(self._snapshot or {"forward": self.forward_facts(), "modules": self.module_facts()}),
        }
