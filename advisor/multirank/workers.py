"""Run one function over many traces in worker processes of this machine.

The pool is restarted for every batch of ``workers * TASKS_PER_WORKER`` tasks: a worker process
never runs more than a few traces, so whatever an analysis leaves behind (allocator arenas,
caches) is returned to the system between batches. This replaces
``ProcessPoolExecutor(max_tasks_per_child=...)``, which deadlocks on CPython 3.11 once a
worker is replaced while tasks are queued (python/cpython gh-115634: a folder of 17 or more
traces hung forever at 0% CPU).

A killed parent (SIGTERM, SIGKILL) takes its workers with it: each worker asks the kernel for
SIGKILL when its parent dies (:func:`die_with_parent`).

Ctrl-C: workers ignore SIGINT (the terminal sends it to the whole process group; see
:func:`context`), so only this
process sees it; it then kills the workers, drops the queued tasks and re-raises at once, and
the command ends with "interrupted" (exit 130) instead of waiting for the running traces.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import signal
import sys
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from advisor import settings
from advisor.lifeline import die_with, helpers_die_with_me

TASKS_PER_WORKER = 8  # traces a worker process analyses before the pool is restarted


def context() -> Any:
    """forkserver (spawn where there is none). From the main thread the fork server is started
    here, with SIGINT ignored, so every worker forked from it ignores Ctrl-C from its first
    instruction (a fork server restores the handlers it started with in each child), and dying
    with this process (:mod:`advisor.multirank.serverlife`, its first preloaded module)."""
    methods = mp.get_all_start_methods()
    if "forkserver" not in methods:
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(
        ["advisor.multirank.serverlife", "advisor.analysis.digest", "advisor.analysis.pipeline"]
    )
    if threading.current_thread() is threading.main_thread():
        from multiprocessing import forkserver

        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            with helpers_die_with_me():
                forkserver.ensure_running()  # a no-op once it runs
        finally:
            signal.signal(signal.SIGINT, old)
    return ctx


@contextmanager
def neutral_main() -> Iterator[None]:
    """Hide ``__main__`` while workers start: forkserver/spawn children re-import the parent's
    main module, which could be the user's training script (``advisor profile``) or any caller
    without a ``__name__ == "__main__"`` guard. The workers need nothing from it."""
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def ignore_sigint(owner: int | None = None) -> None:
    """Worker initializer: Ctrl-C is the parent's to handle; the worker dies with its parent
    (:func:`die_with_parent`) and ends at once when ``owner`` (the advisor's pid) is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()
    if owner is not None:
        try:
            os.kill(owner, 0)
        except ProcessLookupError:  # the advisor died before this worker started
            os._exit(1)
        except OSError:
            pass


def die_with_parent() -> None:
    """In a worker process: end with the process that started it. The parent is the fork server
    (which the kernel kills when the advisor dies, SIGKILL included: its pipe from the advisor
    would not close while a worker holds the copy multiprocessing hands every worker) or, under
    spawn, the advisor itself; so a killed ``advisor analyze FOLDER`` leaves no worker running,
    holding the caller's pipes, even one idle between tasks. A worker of the advisor's fork
    server asks against the fork server's pid (``ADVISOR_FORKSERVER``), so one forked just as
    the fork server died, whose parent is already another process, ends at once."""
    server = settings.forkserver_pid()
    die_with(server if server is not None else os.getppid())


def _abandon(pool: cf.ProcessPoolExecutor) -> None:
    """Stop a pool now: kill its workers (their traces are lost anyway) and drop queued tasks."""
    # private attributes, read before shutdown() clears them: there is no public way to stop
    # running tasks; getattr keeps this working (as a plain shutdown) if they ever change
    procs = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    for p in procs:
        try:
            p.kill()
        except (OSError, ValueError, AttributeError):
            pass
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        try:
            p.join(timeout=5)
        except (OSError, ValueError, AssertionError, AttributeError):
            pass
    if manager is not None:  # it notices the dead workers and closes the queues: let it finish
        manager.join(timeout=5)


def run_batched(
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    workers: int,
    on_done: Callable[[int, Any, BaseException | None], None],
) -> None:
    """Call ``fn(item)`` for every item in up to ``workers`` processes; ``on_done(index, result,
    error)`` runs in this process as each finishes (``error``: the exception, or a
    :class:`concurrent.futures.process.BrokenProcessPool` when the worker died)."""
    batch = max(1, workers) * TASKS_PER_WORKER
    ctx = context()
    with neutral_main():
        for first in range(0, len(items), batch):
            chunk = items[first : first + batch]
            pool = cf.ProcessPoolExecutor(
                max_workers=min(workers, len(chunk)),
                mp_context=ctx,
                initializer=ignore_sigint,
                initargs=(os.getpid(),),
            )
            try:
                futs = {pool.submit(fn, item): first + i for i, item in enumerate(chunk)}
                for fut in cf.as_completed(futs):
                    try:
                        result, err = fut.result(), None
                    except Exception as e:  # noqa: BLE001 (one lost trace, not the run)
                        result, err = None, e
                    on_done(futs[fut], result, err)
            except BaseException:  # Ctrl-C, SIGTERM turned into an exception, a bug: stop now
                _abandon(pool)
                raise
            pool.shutdown(wait=True)
