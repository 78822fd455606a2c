"""DataLoader worker processes at the end of a run: shut down while they can still be reached.

A ``DataLoader`` with ``num_workers > 0`` iterates through a ``_MultiProcessingDataLoaderIter``
whose ``__del__`` tells each worker to stop (a ``None`` on its index queue) and waits up to 5 s
per worker for it. When the advisor stops the script after its window, the iterator of an
unfinished epoch is still alive; inside a framework (Hugging Face Trainer, Lightning) it sits in
reference cycles, so only the garbage collector frees it (the advisor collects when the
script is over). Seen under a Trainer stopped after its evaluation window: by the time the
iterator's ``__del__`` runs inside the collection, its index queues' feeder threads have already
ended (their ``multiprocessing`` finalizers ran first), so the stop never reaches the workers,
and each one costs its full 5 s timeout before it is killed (10 s with 2 workers, per loader).
A plain loop frees its iterator by reference count, with the queues intact, and never shows it.

:class:`LoaderWorkers` remembers every multiprocessing iterator the script creates (through the
``DataLoader.__iter__`` observer of :mod:`advisor.profile.context`) and, once the script is
over, shuts the live ones down itself, queues intact: the workers leave at once, as they do at
the end of an epoch. Nothing else changes: the script can no longer use them.
"""

from __future__ import annotations

import weakref
from typing import Any


class LoaderWorkers:
    def __init__(self) -> None:
        self._iters: weakref.WeakSet[Any] = weakref.WeakSet()

    def watch(self, it: Any) -> None:
        """Remember ``it`` when it runs worker processes."""
        try:
            if hasattr(it, "_shutdown_workers") and getattr(it, "_workers", None):
                self._iters.add(it)
        except TypeError:  # not weak-referenceable
            pass

    def close(self) -> int:
        """The script is over: shut down the workers of the iterators still alive; returns
        how many iterators were shut down."""
        n = 0
        for it in list(self._iters):
            try:
                if getattr(it, "_shutdown", True) is False:
                    it._shutdown_workers()
                    n += 1
            except Exception:  # noqa: BLE001 (torch's own clean-up runs later all the same)
                pass
        self._iters = weakref.WeakSet()
        return n
