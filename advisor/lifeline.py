"""Child processes that end with the process they work for.

A worker (a trace analysed in a process pool, a decoding child, ``advisor try``'s run of the
script) must never work on for nobody: killed parents (SIGKILL, the OOM killer) run no clean-up,
and a child left running holds the caller's pipes (a pipeline reading from the command hangs).
On Linux the kernel delivers a signal to a child when its parent dies
(``PR_SET_PDEATHSIG``); elsewhere :func:`die_with` does nothing and the callers' other guards
(a closed pipe, a poll of the parent) apply.
"""

from __future__ import annotations

import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with(parent: int, sig: int = signal.SIGKILL) -> bool:
    """In a child: have the kernel send it ``sig`` when its parent dies (even by SIGKILL). If the
    parent ``parent`` (its pid) died before the request took effect, the signal is sent now.
    False where the platform has no such request."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig))
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), sig)
    return True
