"""Processes as the tests see them through /proc (Linux): which still run, which belong to a
process group, which have a file of a folder open. One home for what the kill, Ctrl-C and
death-signal tests read as evidence, instead of timing."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper, or a pid gone, does not)."""
    try:
        state = Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def group(pgid: int) -> list[int]:
    """The processes of group ``pgid`` that still run (zombies do not count)."""
    alive = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                alive.append(int(d.name))
    return alive


def reading(pgid: int, folder: Path) -> set[int]:
    """The processes of group ``pgid`` (its leader, the command itself, left out) with a file of
    ``folder`` open: workers inside a task, past their set-up."""
    out = set()
    for pid in group(pgid):
        if pid == pgid:
            continue
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd).startswith(str(folder)):
                    out.add(pid)
                    break
            except OSError:
                continue
    return out


def wait_for(cond: Callable[[], object], limit_s: float, step_s: float = 0.2) -> bool:
    """Poll ``cond()`` until it holds or ``limit_s`` (a hang guard) has passed; its last value."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step_s)
    return bool(cond())
