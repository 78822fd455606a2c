"""Per-rank analysis as Dask tasks: a LocalCluster of worker processes by default, or a running
``dask.distributed`` cluster (``--scheduler ADDRESS``) whose workers see the same files.

Each task is one trace: the worker reads it from the path (the trace itself never travels),
analyses it and sends back its :class:`~advisor.analysis.digest.Digest` (kilobytes). Memory is bounded
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
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any

from advisor import settings
from advisor.lifeline import held_sigint

IN_FLIGHT_PER_WORKER = 2


def _quiet() -> None:
    """Dask logs every worker start/stop at INFO and memory warnings at WARNING: keep the
    terminal for the advisor's own lines."""
    for name in (
        "distributed",
        "distributed.nanny",
        "distributed.worker",
        "distributed.scheduler",
        "distributed.core",
        "distributed.worker_memory",
    ):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def local_cluster(workers: int, memory_limit: int) -> Any:
    """A LocalCluster of ``workers`` single-threaded worker processes, no dashboard."""
    # Ctrl-C reaches the whole process group, but it is this process's to handle (it closes
    # the cluster); a worker would only print a KeyboardInterrupt traceback. The workers are
    # forked from the advisor's fork server, which ignores SIGINT (advisor.multirank.workers.context);
    # ``dask_setup`` covers workers started otherwise (spawn, where there is no fork server).
    import dask
    from distributed import LocalCluster

    from advisor.multirank.workers import context, neutral_main

    method = "forkserver" if context().get_start_method() == "forkserver" else "spawn"
    config = {
        "distributed.worker.multiprocessing-method": method,
        # Dask's sampling profiler (every 10 ms, for a dashboard this cluster does not run)
        # keeps its samples in each worker: over 1,000 traces a worker grew from 110 to 240 MB
        # with it, and stays at 110 MB without (benchmarks/many_ranks.py, docs/performance.md)
        "distributed.worker.profile.enabled": False,
    }
    with neutral_main(), dask.config.set(config):
        # (neutral_main: spawned workers must not re-run the caller's script)
        with held_sigint() as pressed:  # a half-built cluster cannot be closed cleanly
            cluster = LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                memory_limit=memory_limit,
                dashboard_address=None,
                silence_logs=logging.CRITICAL,
                scheduler_port=0,
                host="127.0.0.1",
                preload=[__name__],
                preload_nanny=[__name__],
            )
    if pressed:
        cluster.close()
        raise KeyboardInterrupt
    return cluster


def dask_setup(worker: Any) -> None:
    """Run by each worker and nanny of our LocalCluster as it starts (the preloads above):
    ignore Ctrl-C (see :func:`local_cluster`), and die with its parent process (the nanny, the
    fork server, the advisor), so a killed advisor leaves no Dask process running."""
    from advisor.multirank.workers import die_with_parent

    die_with_parent()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def connect(scheduler: str | None, workers: int, memory_limit: int) -> tuple[Any, Any]:
    """(client, cluster we started or None)."""
    from distributed import Client

    from advisor.errors import AdvisorError

    _quiet()
    if scheduler:
        timeout = settings.scheduler_timeout_s()
        _reachable(scheduler, timeout)
        try:
            return Client(scheduler, timeout=timeout, set_as_default=False), None
        except (OSError, TimeoutError, ValueError) as err:
            raise AdvisorError(f"--scheduler {scheduler}: cannot connect ({err})") from None
    cluster = local_cluster(workers, memory_limit)
    try:
        return Client(cluster, set_as_default=False), cluster
    except BaseException:
        cluster.close()
        raise


def _reachable(scheduler: str, timeout_s: float) -> None:
    """A TCP scheduler address answers within ``timeout_s`` (one plain connect: a refused or
    unreachable address is said at once, not after dask's retries); other schemes are left to
    dask."""
    import socket

    from distributed.comm.addressing import parse_address, parse_host_port

    from advisor.errors import AdvisorError

    try:
        scheme, loc = parse_address(scheduler)
        if scheme not in ("tcp", "tls"):
            return
        host, port = parse_host_port(loc)
    except (ValueError, TypeError) as err:
        raise AdvisorError(f"--scheduler {scheduler}: not an address ({err})") from None
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except ConnectionRefusedError:
        raise AdvisorError(
            f"--scheduler {scheduler}: cannot connect: connection refused (is a scheduler "
            "running there?)"
        ) from None
    except TimeoutError:
        raise AdvisorError(
            f"--scheduler {scheduler}: cannot connect: no answer within {timeout_s:g} s "
            "(ADVISOR_SCHEDULER_TIMEOUT sets the wait)"
        ) from None
    except OSError as err:
        raise AdvisorError(
            f"--scheduler {scheduler}: cannot connect ({err.strerror or err})"
        ) from None


def run_dask(
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    workers: int,
    on_done: Callable[[int, Any, BaseException | None], None],
    scheduler: str | None = None,
    memory_limit: int = 0,
) -> None:
    """Call ``fn(item)`` for every item on a Dask cluster; ``on_done(index, result, error)`` runs
    here as each finishes (a worker killed for memory gives a ``KilledWorker`` error)."""
    try:
        from distributed import as_completed
    except ImportError:  # an optional extra: the caller asked for Dask by name
        from advisor.errors import AdvisorError

        raise AdvisorError(
            "--scheduler needs Dask, which is not installed: pip install 'torch-advisor[dask]'"
        ) from None

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
        ac = as_completed(first, loop=client.loop)
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
