"""Capture what only the live run can see (the ``dataloaders``, ``optimizers``, ``forward`` and
``modules`` blocks of run.json) with hooks that cost nothing measurable.

- ``DataLoader.__iter__`` (once per epoch) records each loader's settings; ``__init__`` of
  DataLoader, Optimizer and the convolution modules remembers the user's line that created them.
- One global forward pre-hook (:mod:`advisor.profile.modules`) sees every module call *before*
  the profiled window: module instances, eval mode with grad enabled, autocast dtypes,
  conv-with-bias followed by BatchNorm, channels_last inputs, DataParallel and compiled modules.
  It is removed when the window's warm-up starts (kept as a no-op when torch.compile is in use,
  so compiled graphs do not recompile), so the window and every later step run without it.
- ``torch.compile``, ``zero_grad`` and ``torch.cuda.empty_cache`` are wrapped to note their use
  (empty_cache calls are counted per call site for the whole run); the first ``torch.compile``
  starts :mod:`advisor.profile.compilefacts` (graph breaks, recompiles); all patches are undone by
  :meth:`ContextRecorder.uninstall`. The allocator's environment settings are read at the end.
"""

from __future__ import annotations

import functools
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from advisor import settings
from advisor.profile.compilefacts import CompileRecorder
from advisor.profile.facts import user_site
from advisor.profile.loaders import LoaderWorkers
from advisor.profile.modules import MAX_ROWS as _MAX_ROWS
from advisor.profile.modules import ModuleObserver
from advisor.runcapture import Forks, Try
from advisor.runinfo import (
    Allocator,
    Compile,
    DataLoader,
    EmptyCache,
    Forward,
    Modules,
    Optimizer,
    Site,
    ZeroGrad,
)


@dataclass(frozen=True)
class SetUp:
    """What the run's hooks saw of the script's set-up (run.json's ``dataloaders``,
    ``optimizers``, ``zero_grad``, ``allocator``, ``forward``, ``modules``, ``compile``; and
    ``try`` and ``forks`` where there are any). Empty when it could not be read."""

    dataloaders: tuple[DataLoader, ...] = ()
    optimizers: tuple[Optimizer, ...] = ()
    zero_grad: tuple[ZeroGrad, ...] = ()
    allocator: Allocator = field(default_factory=Allocator)
    forward: Forward = field(default_factory=Forward)
    modules: Modules = field(default_factory=Modules)
    compile: Compile = field(default_factory=Compile)
    trial: Try | None = None
    forks: Forks | None = None


class ContextRecorder:
    def __init__(self) -> None:
        import torch

        self._torch = torch
        self._sites: weakref.WeakKeyDictionary[Any, Site | None] = weakref.WeakKeyDictionary()
        self._patches: list[tuple[Any, str, Any]] = []
        self._hook: Any = None
        self._fwd_on = False
        self._snapshot: tuple[Forward, Modules] | None = None
        self._warning_filter: Any = None
        self.modules = ModuleObserver()
        self.dataloaders: list[DataLoader] = []
        self.loader_workers = LoaderWorkers()
        # id(dataset) -> the site of the first DataLoader built over it: a loader a library
        # rebuilds from the user's (accelerate's prepare) is named at the user's DataLoader(...)
        self._dataset_sites: dict[int, Site | None] = {}
        self._dl_ids: set[int] = set()
        self.optimizers: list[Optimizer] = []
        self._opt_ids: set[int] = set()
        self.zero_grad: dict[tuple[Any, ...], ZeroGrad] = {}
        self.compiled_sites: list[Site | None] = []
        self.compile = CompileRecorder()
        # calls of torch.cuda.empty_cache() per call site: [calls, site]
        self.empty_cache: dict[tuple[Any, ...], tuple[list[int], Site | None]] = {}
        self.optimizer_made = False  # an optimizer was created: its steps are the steps
        # the phase the run is in (train | eval), set by the session: a DataLoader's row says
        # which phase first iterated it, so each phase's findings name its own loader
        self.phase_now: Callable[[], str] = lambda: "train"
        # each new pass over a DataLoader (its iterator), told to the session: the epochs
        self.on_iter: Callable[[Any, Any], None] = lambda loader, iterator: None

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

        is_optimizer = cls is self._torch.optim.Optimizer

        is_loader = cls.__name__ == "DataLoader"

        @functools.wraps(orig)
        def __init__(obj: Any, *args: Any, **kwargs: Any) -> None:
            orig(obj, *args, **kwargs)
            if is_optimizer:
                self.optimizer_made = True
            try:
                if obj not in sites:
                    sites[obj] = user_site()
                    if is_loader:  # the first loader over a dataset: where the user built it
                        self._dataset_sites.setdefault(id(obj.dataset), sites[obj])
            except (TypeError, AttributeError):  # not weak-referenceable
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
        self._try(self._wrap_empty_cache, torch.cuda)
        self._hook = torch.nn.modules.module.register_module_forward_pre_hook(self.modules.pre_hook)
        self._fwd_on = True
        # torch warns that global hooks fire once more for torch.compile(module): that is our
        # hook, not the user's, so the warning is ours to silence
        warnings.filterwarnings(
            "ignore",
            message=r"Using `torch\.compile\(module\)` when there "
            "are global hooks",
            category=UserWarning,
        )
        self._warning_filter = warnings.filters[0]

    def _observe_dataloaders(self, DataLoader: Any) -> None:  # noqa: N803
        orig_iter = DataLoader.__iter__

        @functools.wraps(orig_iter)
        def __iter__(dl: Any) -> Any:
            if id(dl) not in self._dl_ids:
                self._on_dataloader(dl)
            it = orig_iter(dl)
            self.loader_workers.watch(it)  # shut down at the end of the run (profile.loaders)
            self.on_iter(dl, it)
            return it

        self._patch(DataLoader, "__iter__", __iter__)

    def _wrap_compile(self, torch: Any) -> None:
        orig_compile = torch.compile

        @functools.wraps(orig_compile)
        def compile_(*args: Any, **kwargs: Any) -> Any:
            if len(self.compiled_sites) < _MAX_ROWS:
                self.compiled_sites.append(user_site())
            out = orig_compile(*args, **kwargs)
            self.compile.install()  # dynamo is imported by now
            return out

        self._patch(torch, "compile", compile_)

    def _wrap_empty_cache(self, cuda: Any) -> None:
        orig = cuda.__dict__["empty_cache"]

        @functools.wraps(orig)
        def empty_cache(*args: Any, **kwargs: Any) -> Any:
            try:
                site = user_site()
                key = (site.file, site.line) if site else (None, None)
                row = self.empty_cache.get(key)
                if row is None and len(self.empty_cache) < _MAX_ROWS:
                    row = self.empty_cache[key] = ([0], site)
                if row is not None:
                    row[0][0] += 1
            except Exception:  # noqa: BLE001 (capture never breaks the script)
                pass
            return orig(*args, **kwargs)

        self._patch(cuda, "empty_cache", empty_cache)

    def _wrap_zero_grad(self, owner: Any) -> None:
        orig = owner.__dict__["zero_grad"]
        kind = owner.__name__

        @functools.wraps(orig)
        def zero_grad(obj: Any, *args: Any, **kwargs: Any) -> Any:
            if not self._fwd_on:
                return orig(obj, *args, **kwargs)
            try:
                stn = kwargs.get("set_to_none", args[0] if args else True)
                site = user_site() or Site()
                key = (kind, bool(stn), site.file, site.line)
                if key not in self.zero_grad and len(self.zero_grad) < _MAX_ROWS:
                    self.zero_grad[key] = ZeroGrad(
                        owner=kind,
                        set_to_none=bool(stn),
                        file=site.file,
                        line=site.line,
                        function=site.function,
                    )
            except Exception:  # noqa: BLE001 (capture never breaks the script)
                pass
            return orig(obj, *args, **kwargs)

        self._patch(owner, "zero_grad", zero_grad)

    def end_forward_capture(self) -> None:
        """Stop observing module calls (before the profiled window); keep the facts seen so far
        and let go of the modules."""
        self._fwd_on = False
        if self._snapshot is None and self._hook is not None:
            self._snapshot = self._module_facts()
            self.modules.release()
        if self._hook is not None and not (self.compiled_sites or self.modules.compiled_modules):
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
        self.compile.uninstall()
        if self._warning_filter in warnings.filters:
            warnings.filters.remove(self._warning_filter)  # type: ignore[attr-defined]
            getattr(warnings, "_filters_mutated", lambda: None)()

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
            site = (
                self._dataset_sites.get(id(dl.dataset))
                or self._sites.get(dl)
                or user_site(3)
                or Site()
            )
            batch = dl.batch_size
            if batch is None:  # a batch sampler (accelerate's prepared loaders): its size
                batch = getattr(getattr(dl, "batch_sampler", None), "batch_size", None)
            self.dataloaders.append(
                DataLoader(
                    num_workers=nw,
                    pin_memory=bool(dl.pin_memory),
                    batch_size=batch if isinstance(batch, int) else None,
                    persistent_workers=bool(dl.persistent_workers),
                    prefetch_factor=dl.prefetch_factor if nw > 0 else None,
                    drop_last=bool(dl.drop_last),
                    dataset_len=n,
                    dataset_class=type(dl.dataset).__name__,
                    phase=self._loader_phase(),
                    file=site.file,
                    line=site.line,
                )
            )
        except Exception:  # noqa: BLE001
            pass

    def _loader_phase(self) -> str:
        """The phase a loader is first iterated in: the session's, or evaluation when autograd
        is off (a validation loop, Lightning's sanity check before training starts)."""
        phase = self.phase_now()
        if phase == "train" and not self._torch.is_grad_enabled():
            return "eval"
        return phase

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
            site = self._sites.get(opt) or Site()
            self.optimizers.append(
                Optimizer(
                    cls=type(opt).__name__,
                    module=type(opt).__module__,
                    foreach=opt.defaults.get("foreach"),
                    fused=opt.defaults.get("fused"),
                    param_tensors=len(params),
                    param_groups=len(opt.param_groups),
                    param_elements=sum(dtypes.values()),
                    param_dtypes=dtypes,
                    file=site.file,
                    line=site.line,
                )
            )
        except Exception:  # noqa: BLE001
            pass

    def _module_facts(self) -> tuple[Forward, Modules]:
        try:
            return (
                self.modules.forward_facts(),
                self.modules.module_facts(self._sites, self.compiled_sites),
            )
        except Exception as err:  # noqa: BLE001 (facts are best effort)
            return Forward(), Modules(error=f"{type(err).__name__}: {err}")

    def setup(self) -> SetUp:
        """What the hooks saw, as run.json records it."""
        forward, modules = self._snapshot or self._module_facts()
        env = settings.allocator_env()
        empty_cache = tuple(
            EmptyCache(
                calls=calls[0],
                file=site.file if site else None,
                line=site.line if site else None,
                function=site.function if site else None,
            )
            for calls, site in self.empty_cache.values()
        )
        return SetUp(
            dataloaders=tuple(self.dataloaders),
            optimizers=tuple(self.optimizers),
            zero_grad=tuple(self.zero_grad.values()),
            allocator=Allocator(
                empty_cache=empty_cache,
                alloc_conf=env["alloc_conf"],
                caching_disabled=env["caching_disabled"],
                no_memory_caching_env=env["no_memory_caching_env"],
            ),
            forward=forward,
            modules=modules,
            compile=self.compile.facts(),
        )
