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

Imported anywhere else this does nothing (no starter pid in the environment, or not this
process's parent).
"""

from __future__ import annotations

import os

from advisor import settings
from advisor.lifeline import die_with_starter

if die_with_starter():
    # its workers ask for the death signal against this pid, and one forked as it died (whose
    # parent is already another process) so learns at once that it has died
    settings.set_forkserver(os.getpid())
