"""The first module multiprocessing's fork server imports (its preload, set by
:func:`advisor.multirank.workers.context`): the fork server dies with the advisor that started
it.

A fork server ends on its own when the pipe from the process that started it closes, but
multiprocessing hands every worker a copy of that pipe's other end, so while one worker lives
(idle between tasks, waiting on a queue whose other end died with the advisor) the fork server
lives too, and the worker, whose parent is the fork server, is never signalled: a killed
``advisor analyze FOLDER`` would leave both running, holding the caller's pipes. With the
kernel's death signal on the fork server (:func:`advisor.lifeline.die_with_starter`), the
advisor's death kills the fork server, whose death kills its workers.

The fork server also names itself to the workers it forks (``ADVISOR_FORKSERVER``), so a worker
forked just before the fork server died, which finds another parent when it asks for its death
signal, ends at once (:func:`advisor.multirank.workers.die_with_parent`).

A worker forked while the advisor drops its pool (Ctrl-C, SIGTERM) can find the pool's
semaphores already removed as it reads its orders: multiprocessing then prints that worker's
traceback (``SemLock._rebuild``: FileNotFoundError) on the user's terminal, after "advisor:
interrupted". Such a worker has no pool to serve, so the fork server's children end quietly in
that one case (:func:`quiet_orphans`); any other failure keeps its traceback.

Imported anywhere else this does nothing (no starter pid in the environment). A fork server
that starts after its advisor has died (no longer its parent) is quieted, not signalled: it ends
when its pipe from the advisor closes.
"""

from __future__ import annotations

import os
import sys
from types import TracebackType

from advisor import settings
from advisor.lifeline import die_with_starter


def pool_gone(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> bool:
    """Whether a new worker failed because its pool's semaphores no longer exist: the
    FileNotFoundError of rebuilding a semaphore (``multiprocessing.synchronize``) from the
    orders it was sent."""
    if not issubclass(kind, FileNotFoundError):
        return False
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "__setstate__" and code.co_filename.endswith("synchronize.py"):
            return True
        tb = tb.tb_next
    return False


def quiet_orphans() -> None:
    """In the fork server: its children report a failure through ``sys.excepthook``; stay quiet
    for a worker whose pool is gone (:func:`pool_gone`), print every other one as before."""
    shown = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        if not pool_gone(kind, value, tb):
            shown(kind, value, tb)

    sys.excepthook = hook


if settings.starter_given():  # the advisor's fork server, even one that started as it died
    quiet_orphans()
if die_with_starter():
    # its workers ask for the death signal against this pid, and one forked as it died (whose
    # parent is already another process) so learns at once that it has died
    settings.set_forkserver(os.getpid())
