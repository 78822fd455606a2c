"""DataLoader workers at the end of an ``advisor profile`` run (``advisor/profile/loaders.py``):
the iterators still alive when the script is over are shut down by the advisor while their
queues still reach the workers, which then leave by themselves. Checked by the workers' exit
codes (0: left; negative: killed after torch's timeout), never by time. The end-to-end case (a
Hugging Face Trainer stopped after its evaluation window, 2 workers) is
``tests/test_frameworks_profile.py``."""

from __future__ import annotations

import gc
from typing import Any

import pytest

torch = pytest.importorskip("torch")


def _iterator_in_a_cycle(workers: int) -> tuple[dict[str, Any], list[Any]]:
    from torch.utils.data import DataLoader, TensorDataset

    dl = DataLoader(TensorDataset(torch.arange(64.0)), batch_size=4, num_workers=workers)
    it = iter(dl)
    next(it)
    holder: dict[str, Any] = {"it": it}
    holder["self"] = holder  # a reference cycle, as a framework's trainer object has
    return holder, list(it._workers)


def test_workers_shut_down_by_the_advisor_leave_by_themselves() -> None:
    from advisor.profile.loaders import LoaderWorkers

    holder, workers = _iterator_in_a_cycle(2)
    lw = LoaderWorkers()
    lw.watch(holder["it"])
    assert lw.close() == 1
    del holder
    gc.collect()
    assert [w.exitcode for w in workers] == [0, 0]
    assert lw.close() == 0  # nothing left to shut down
