"""The global forward pre-hook of ``advisor profile``: what the module calls before the window
show (the ``forward`` and ``modules`` blocks of run.json).

Per call it costs a tuple and a set lookup: the full look (DataParallel, compiled, channels_last
inputs, the user's call site) happens once per module instance and state. Inside a torch.compile
trace it returns at once, so compiled graphs never contain it.
"""

from __future__ import annotations

import functools
from typing import Any

from advisor.profile.facts import user_site
from advisor.runinfo import Autocast, ConvBn, EvalWithGrad, Forward, Modules, Site

MAX_ROWS = 32
_FSDP_CLASSES = frozenset({"FullyShardedDataParallel", "FSDPModule"})
_MAX_MODULES = 20_000


class ModuleObserver:
    def __init__(self) -> None:
        import torch

        self._torch = torch
        self.on = True
        self._keys: set[tuple[Any, ...]] = set()
        self._mods: dict[int, Any] = {}  # strong refs until the snapshot (see release())
        self._last: Any = None
        self._pairs: dict[tuple[int, int], tuple[Any, Any]] = {}
        self._eval_grad: dict[type, tuple[Any, Site | None]] = {}
        self._autocast: set[tuple[str, str]] = set()
        self.channels_last = False
        self.data_parallel: list[Site | None] = []
        self.ddp = False
        self.fsdp = False
        self.compiled_modules = False
        nn = torch.nn
        self._conv_types = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
        self._bn_types = {nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm}
        self._is_compiling = getattr(torch.compiler, "is_compiling", lambda: False)
        self._ac_probes = self._autocast_probes()

    def release(self) -> None:
        """Stop observing and let go of the modules (after :meth:`facts`)."""
        self.on = False
        self._last = None
        self._keys.clear()
        self._mods.clear()
        self._pairs.clear()
        self._eval_grad.clear()

    def pre_hook(self, mod: Any, args: Any) -> None:
        if self._is_compiling() or not self.on:
            return None
        try:
            self._observe(mod, args)
        except Exception:  # noqa: BLE001 (capture never breaks the script)
            self.on = False
        return None

    def _autocast_probes(self) -> list[tuple[str, Any, Any]]:
        torch = self._torch
        try:
            torch.is_autocast_enabled("cpu")
            return [
                (
                    dev,
                    functools.partial(torch.is_autocast_enabled, dev),
                    functools.partial(torch.get_autocast_dtype, dev),
                )
                for dev in ("cuda", "cpu")
            ]
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
            if getattr(prev, "bias", None) is not None and len(self._pairs) < MAX_ROWS:
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
            if len(self._eval_grad) < MAX_ROWS:
                self._eval_grad[type(mod)] = (mod, user_site(4))

    def _first_seen(self, mod: Any, args: Any) -> None:
        torch = self._torch
        if len(self._mods) < _MAX_MODULES:
            self._mods[id(mod)] = mod
        if isinstance(mod, torch.nn.DataParallel) and len(self.data_parallel) < MAX_ROWS:
            self.data_parallel.append(user_site(5))
        if isinstance(mod, torch.nn.parallel.DistributedDataParallel):
            self.ddp = True
        if any(c.__name__ in _FSDP_CLASSES for c in type(mod).__mro__):
            self.fsdp = True  # FSDP1 wrappers and FSDP2 (fully_shard) modules
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

    def module_facts(self, sites: Any, compile_sites: list[Site | None]) -> Modules:
        """The ``modules`` block; ``sites`` maps modules to the line that created them."""
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
            site = sites.get(conv) or Site()
            pairs.append(
                ConvBn(
                    conv=names.get(id(conv), type(conv).__name__),
                    bn=names.get(id(bn), type(bn).__name__),
                    file=site.file,
                    line=site.line,
                )
            )
        return Modules(
            conv_bias_before_bn=tuple(pairs),
            param_dtypes=dict(sorted(dtypes.items())),
            channels_last=self.channels_last,
            data_parallel=bool(self.data_parallel),
            data_parallel_sites=tuple(s for s in self.data_parallel if s),
            distributed_data_parallel=self.ddp,
            fully_sharded_data_parallel=self.fsdp,
            compiled=bool(compile_sites) or self.compiled_modules,
            compile_sites=tuple(s for s in compile_sites if s),
            modules_seen=len(self._mods),
            roots=tuple(sorted({type(r).__name__ for r in roots})),
        )

    def forward_facts(self) -> Forward:
        # only modules called at the top (a frozen BatchNorm inside a training model is not
        # "inference with grad")
        roots = {id(m) for m in self._roots()}
        rows = []
        for cls, (m, site) in self._eval_grad.items():
            if id(m) in roots:
                s = site or Site()
                rows.append(
                    EvalWithGrad(module=cls.__name__, file=s.file, line=s.line, function=s.function)
                )
        autocast = sorted(self._autocast)
        return Forward(
            autocast=tuple(Autocast(device_type=d, dtype=t) for d, t in autocast),
            autocast_dtypes=tuple(sorted({t for _, t in autocast})),
            eval_with_grad=tuple(rows),
        )
