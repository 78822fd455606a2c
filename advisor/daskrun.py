"""Per-rank analysis as Dask tasks: a LocalCluster of worker processes by default, or a running
``dask.distributed`` cluster (``--scheduler ADDRESS``) whose workers see the same files.

Each task is one trace: the worker reads it from the path (the trace itself never travels),
analyses it and sends back its :class:`~advisor.digest.Digest` (kilobytes). Memory is bounded
three ways: one task per worker at a time (``threads_per_worker=1``), a ``memory_limit`` per
worker (the nanny restarts a worker that goes past it, and the trace is reported as lost), and
at most ``IN_FLIGHT_PER_WORKER`` tasks per worker submitted ahead, so the scheduler and this
process never hold more than a few results that were not yet merged.

Workers on a cluster of your own need torch-advisor installed (the same version) and the trace
paths visible (a shared filesystem); paths are sent as given, so pass absolute ones.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

IN_FLIGHT_PER_WORKER = 2
CONNECT_TIMEOUT_S = 30


def _quiet() -> None:
    """Dask logs every worker start/stop at INFO and memory warnings at WARNING: keep the
    terminal for the advisor's own lines."""
    for name in ("distributed", "distributed.nanny", "distributed.worker", "distributed.scheduler",
                 "distributed.core", "distributed.worker_memory"):  # fmt: skip
        logging.getLogger(name).setLevel(logging.ERROR)


def local_cluster(workers: int, memory_limit: int) -> Any:
    """A LocalCluster of ``workers`` single-threaded worker processes, no dashboard."""
    from distributed import LocalCluster

    from advisor.workers import neutral_main

    with neutral_main():  # spawned workers must not re-run the caller's script
        return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                            memory_limit=memory_limit, dashboard_address=None,
                            silence_logs=logging.ERROR, scheduler_port=0,
                            host="127.0.0.1")  # fmt: skip


def connect(scheduler: str | None, workers: int, memory_limit: int) -> tuple[Any, Any]:
    """(client, cluster we started or None)."""
    from distributed import Client

    from advisor.errors import AdvisorError

    _quiet()
    if scheduler:
        try:
            return Client(scheduler, timeout=CONNECT_TIMEOUT_S, set_as_default=False), None
        except (OSError, TimeoutError) as err:
            raise AdvisorError(f"--scheduler {scheduler}: cannot connect ({err})") from None
    cluster = local_cluster(workers, memory_limit)
    try:
        return Client(cluster, set_as_default=False), cluster
    except BaseException:
        cluster.close()
        raise


def run_dask(fn: Callable[[Any], Any], items: Sequence[Any], workers: int,
             on_done: Callable[[int, Any, BaseException | None], None],
             scheduler: str | None = None, memory_limit: int = 0) -> None:  # fmt: skip
    """Call ``fn(item)`` for every item on a Dask cluster; ``on_done(index, result, error)`` runs
    here as each finishes (a worker killed for memory gives a ``KilledWorker`` error)."""
    from distributed import as_completed

    client, cluster = connect(scheduler, max(1, workers), memory_limit)
    try:
        n_workers = max(1, len(client.scheduler_info().get("workers", {})) or workers)
        ahead = n_workers * IN_FLIGHT_PER_WORKER
        pending = iter(enumerate(items))
        index: dict[str, int] = {}

        def submit(ac: Any | None) -> Any | None:
            nxt = next(pending, None)
            if nxt is None:
                return None
            i, item = nxt
            # pure=False: the same path twice is two tasks (the file may have changed)
            fut = client.submit(fn, item, pure=False, key=f"advisor-digest-{os.getpid()}-{i}")
            index[fut.key] = i
            if ac is not None:
                ac.add(fut)
            return fut

        first = [f for f in (submit(None) for _ in range(ahead)) if f is not None]
        ac = as_completed(first)
        for fut in ac:
            i = index.pop(fut.key)
            try:
                result, err = fut.result(), None
            except Exception as e:  # noqa: BLE001 (a lost rank, not a lost run)
                result, err = None, e
            fut.release()
            on_done(i, result, err)
            submit(ac)
    finally:
        try:
            client.close()
        finally:
            if cluster is not None:
                cluster.close()
