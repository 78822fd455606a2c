"""DataLoader fixes: worker processes for a starved step, pinned batches copied without blocking.

``dataloader-stall`` overrides the DataLoader's constructor arguments; ``pageable-memcpy`` and
``blocking-copy`` pin the batches and make the host-to-device copies of *those batches* (only
tensors a DataLoader yielded, only when pinned) ``non_blocking=True``.
"""

from __future__ import annotations

import functools
import inspect
import os
import weakref
from typing import Any

from advisor import settings
from advisor.profile.trial.base import Patcher, PatchFix, RunFacts

_PINNED_KEY = "_pinned_copies_installed"


def usable_cpus() -> int:
    """CPUs this process may use, shared by the ranks of this node under torchrun."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, n // settings.local_world_size())


def worker_count(current: int = 0) -> int:
    """The num_workers the fix sets: the count dataloader-stall recommends for this machine
    (:func:`advisor.derive.dataloader.recommended_workers`), so try measures the report's advice."""
    from advisor.derive.dataloader import recommended_workers  # pandas: not at `advisor --help`

    return recommended_workers(usable_cpus(), current)


def _where(obj: Any) -> str:
    ds = getattr(obj, "dataset", None)
    return type(ds).__name__ if ds is not None else type(obj).__name__


def _patch_loader_init(patcher: Patcher, fix_id: str, edit: Any) -> None:
    """Wrap ``DataLoader.__init__`` so ``edit(bound_arguments, loader)`` may change its
    arguments before the original constructor sees them."""
    from torch.utils.data import DataLoader

    orig = DataLoader.__dict__["__init__"]
    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            ba = sig.bind(self, *args, **kwargs)
            ba.apply_defaults()
            edit(ba.arguments, self)
            args, kwargs = ba.args[1:], ba.kwargs
        except Exception as err:  # noqa: BLE001 (an odd call is left as the script wrote it)
            patcher.note(fix_id, f"left a DataLoader unchanged: {type(err).__name__}: {err}")
        orig(self, *args, **kwargs)

    patcher.patch(fix_id, DataLoader, "__init__", __init__)


class DataLoaderStall(PatchFix):
    id = "dataloader-stall"
    finding_ids: tuple[str, ...] = ("dataloader-stall",)
    changes = (
        "DataLoader(...) arguments at construction: num_workers raised to the count "
        "dataloader-stall recommends (4, bounded by the usable CPUs less one; twice the "
        "current count for a loader with workers) when lower, persistent_workers=True, prefetch_factor=4 when not set, pin_memory=True "
        "when CUDA is available. An IterableDataset keeps its num_workers."
    )
    risks = (
        "Workers run __getitem__ in other processes: a dataset that is not fork-safe (open "
        "files or connections made before the fork), or that relies on state of the main "
        "process, may fail or behave differently; random augmentations draw from per-worker "
        "seeds, so batches can differ from the single-process run; each worker holds a copy "
        "of the dataset object and prefetched batches (memory)."
    )

    def applies_to(self, facts: RunFacts) -> str | None:
        if not facts.dataloaders:
            return "the script iterated no DataLoader"
        if usable_cpus() < 2:
            return "one usable CPU: worker processes would only compete with the main process"
        return None

    def apply(self, patcher: Patcher) -> None:
        import torch
        from torch.utils.data import IterableDataset

        pin = torch.cuda.is_available()

        def edit(a: dict[str, Any], loader: Any) -> None:
            name = type(a.get("dataset")).__name__
            before = int(a.get("num_workers") or 0)
            target = worker_count(before)
            if isinstance(a.get("dataset"), IterableDataset):
                patcher.note(
                    self.id,
                    f"{name}: an IterableDataset keeps num_workers={before} "
                    "(workers would each yield the whole stream)",
                )
                return
            if before < target:
                a["num_workers"] = target
            if int(a["num_workers"]) > 0:
                a["persistent_workers"] = True
                if a.get("prefetch_factor") is None:
                    a["prefetch_factor"] = 4
            if pin and not a.get("pin_memory"):
                a["pin_memory"] = True
            patcher.count(self.id, "dataloaders")
            patcher.note(
                self.id,
                f"{name}: num_workers {before} -> {a['num_workers']}, "
                f"persistent_workers={a['persistent_workers']}, prefetch_factor="
                f"{a['prefetch_factor']}, pin_memory={bool(a['pin_memory'])}",
            )

        _patch_loader_init(patcher, self.id, edit)


class PinnedCopies(PatchFix):
    """One patch, two findings: pageable-memcpy and blocking-copy share it."""

    finding_ids: tuple[str, ...] = ()
    changes = (
        "DataLoader(pin_memory=True) at construction; Tensor.to(cuda) / Tensor.cuda() of a "
        "tensor that a DataLoader yielded (and that is pinned) get non_blocking=True."
    )
    risks = (
        "Pinned (page-locked) host memory is taken from the OS for every batch in flight; a "
        "non_blocking copy returns before the data has arrived: code that changes the source "
        "batch on the host right after the copy would race (DataLoader batches are fresh "
        "tensors, so ordinary loops are safe). Copies of other tensors are not touched."
    )

    def __init__(self, fix_id: str) -> None:
        self.id = fix_id
        self.finding_ids = (fix_id,)

    def applies_to(self, facts: RunFacts) -> str | None:
        if not facts.cuda:
            return (
                "pinned memory and non_blocking copies need a CUDA device (this run used the CPU)"
            )
        if not facts.dataloaders:
            return "the script iterated no DataLoader: its copies are not from DataLoader batches"
        return None

    def apply(self, patcher: Patcher) -> None:
        import torch

        if not torch.cuda.is_available():
            patcher.note(self.id, "no CUDA device in this process: nothing to pin")
            return
        if getattr(patcher, _PINNED_KEY, None):
            patcher.note(self.id, f"shares the patch installed for {getattr(patcher, _PINNED_KEY)}")
            return
        setattr(patcher, _PINNED_KEY, self.id)
        patcher.on_revert(self.id, lambda: setattr(patcher, _PINNED_KEY, None))
        fid = self.id

        def edit(a: dict[str, Any], loader: Any) -> None:
            if not a.get("pin_memory"):
                a["pin_memory"] = True
                patcher.count(fid, "dataloaders pinned")

        _patch_loader_init(patcher, fid, edit)
        batches: weakref.WeakSet[Any] = weakref.WeakSet()
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        orig_next = _BaseDataLoaderIter.__dict__["__next__"]

        @functools.wraps(orig_next)
        def __next__(it: Any) -> Any:
            batch = orig_next(it)
            _remember(batch, batches, 0)
            return batch

        patcher.patch(fid, _BaseDataLoaderIter, "__next__", __next__)
        for name in ("to", "cuda"):
            self._wrap_copy(patcher, torch.Tensor, name, batches)

    def _wrap_copy(self, patcher: Patcher, cls: Any, name: str, batches: Any) -> None:
        orig = getattr(cls, name)
        fid = self.id

        @functools.wraps(orig)
        def copy(t: Any, *args: Any, **kwargs: Any) -> Any:
            if "non_blocking" not in kwargs and t in batches and _to_cuda(name, args, kwargs):
                if t.is_pinned():
                    kwargs["non_blocking"] = True
                    patcher.count(fid, "batch copies made non_blocking")
            return orig(t, *args, **kwargs)

        patcher.patch(fid, cls, name, copy)


def _remember(obj: Any, batches: Any, depth: int) -> None:
    import torch

    if isinstance(obj, torch.Tensor):
        batches.add(obj)
    elif depth < 3 and isinstance(obj, (list, tuple)):
        for x in obj:
            _remember(x, batches, depth + 1)
    elif depth < 3 and isinstance(obj, dict):
        for x in obj.values():
            _remember(x, batches, depth + 1)


def _to_cuda(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a ``to``/``cuda`` call targets a CUDA device (``non_blocking`` not positional)."""
    if name == "cuda":
        return len(args) < 2
    dev = kwargs.get("device", args[0] if args else None)
    if isinstance(dev, int) and not isinstance(dev, bool):
        return len(args) < 3
    text = str(dev) if dev is not None else ""
    return text.startswith("cuda") and len(args) < 3
