"""run.json's DataLoader rows name the loader the user built: a loader a library rebuilds over the
same dataset (accelerate's ``prepare``) is named at the user's ``DataLoader(...)`` line with the
batch size of its batch sampler; a loader first iterated with autograd off (Lightning's sanity
check, before training starts) is the evaluation loader."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

torch = pytest.importorskip("torch")


def _prepare(dl: Any) -> Any:
    """What accelerate's ``prepare`` does to a loader: a new one over the same dataset, with a
    batch sampler (its ``batch_size`` is None)."""
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

    sampler = BatchSampler(SequentialSampler(dl.dataset), batch_size=dl.batch_size, drop_last=False)
    return DataLoader(dl.dataset, batch_sampler=sampler)


def test_rebuilt_and_sanity_checked_loaders_are_named_as_the_user_built_them() -> None:
    from torch.utils.data import DataLoader, TensorDataset

    from advisor.profile.context import ContextRecorder

    rec = ContextRecorder()
    rec.install()
    try:
        train_ds, val_ds = TensorDataset(torch.zeros(64, 2)), TensorDataset(torch.zeros(16, 2))
        line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        train = DataLoader(train_ds, batch_size=32, shuffle=True)
        val = DataLoader(val_ds, batch_size=8)
        with torch.no_grad():  # a sanity check of the validation loader, before training
            next(iter(val))
        next(iter(_prepare(train)))
        rows = {r.phase: r for r in rec.setup().dataloaders}
    finally:
        rec.uninstall()
    assert rows["train"].line == line and rows["train"].batch_size == 32
    assert rows["eval"].line == line + 1 and rows["eval"].batch_size == 8
