"""Independent pieces of work shared between this process and one forked helper: two cores.

After a trace is loaded, ``advisor analyze`` runs every built-in detector one after the other in
one process, about half of its time, while the machine's other core idles. :func:`run_shared`
runs a list of independent jobs on both cores and returns their results in the list's order,
as if they had run one after the other here.

- **The queue is a pipe.** The jobs' numbers are written into a pipe before the fork, one byte
  each, and the pipe's write end is closed. Each process takes the next number by reading one
  byte (a pipe hands each byte to one reader) and runs that job; an empty pipe reads as its end.
  Which process runs which job follows their speed, never what a job returns: the jobs must be
  pure functions of what both processes hold (the detectors are: the findings of every shared
  trace are the same, byte for byte, run either way; ``tests/test_sharing.py``).
- **The helper is a fork** (:mod:`advisor.analysis.childrun`'s isolation: a process group of
  its own, death with this process, stdout onto stderr): it holds everything this process held,
  copy-on-write, so nothing is serialized on the way in. What it derives while it works (a
  trace's memos) stays in it: a table both processes need is built by each.
- **Results come back pickled**, one frame a job as each ends, and are read here between this
  process's own jobs. Only this package's own code runs in the helper, so its results are read
  as they are (a plugin's detectors run under :mod:`advisor.analysis.childrun`'s checks).
- **A helper that fails costs time, never a result**: if it cannot be started, ends without
  reporting a job, or reports nothing for longer than :func:`stall_limit_s` allows once this
  process is done with its share, it is killed and this process runs whatever it had not
  reported.

:func:`available` says whether to share: the platform can fork, this process may run on two or
more CPUs, and ``ADVISOR_NO_FORK`` is not set.
"""

from __future__ import annotations

import gc
import os
import pickle
import select
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from advisor import settings
from advisor.analysis import childrun
from advisor.lifeline import fork

T = TypeVar("T")

MAX_JOBS = 255  # one byte per job number in the queue
STALL_MIN_S = 30.0  # a helper silent this long (at least) is stuck: see stall_limit_s
STALL_PER_SLOWEST = 3.0  # ... or this many times the slowest job seen, when that is longer
_DONE = b"D"  # a frame: one job's (number, seconds, result), pickled


def available() -> bool:
    """Whether :func:`run_shared` may use a helper here."""
    return childrun.available() and _cpus() >= 2 and not settings.no_fork()


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def stall_limit_s(slowest_s: float) -> float:
    """How long a helper may report nothing, once this process has run its share, before it is
    taken as stuck: at least STALL_MIN_S, or STALL_PER_SLOWEST times the slowest job seen (a big
    trace takes every job longer)."""
    return max(STALL_MIN_S, STALL_PER_SLOWEST * slowest_s)


def run_shared(
    jobs: Sequence[Callable[[], T]],
    share: bool = True,
    before_fork: Callable[[], object] | None = None,
) -> list[T]:
    """``[job() for job in jobs]``, the jobs shared with a forked helper when ``share`` (and
    :func:`available`); results in the jobs' order. A job must not raise (wrap what may) and
    must return something picklable. ``before_fork``: run first when a helper is to be forked
    (what both processes will read, built once)."""
    if not share or len(jobs) < 2 or len(jobs) > MAX_JOBS or not available():
        return [job() for job in jobs]
    if before_fork is not None:
        before_fork()
    done: dict[int, T] = {}
    slowest = [0.0]

    def run(i: int) -> None:
        t0 = time.perf_counter()
        done[i] = jobs[i]()
        slowest[0] = max(slowest[0], time.perf_counter() - t0)

    helper = _Helper.start(jobs)
    if helper is None:
        return [job() for job in jobs]
    try:
        while (i := helper.claim()) is not None:
            run(i)
            helper.read(done, slowest, wait_s=0.0)
        helper.finish(done, slowest)
    finally:
        helper.close()
    for i in range(len(jobs)):  # what the helper took and did not report
        if i not in done:
            run(i)
    return [done[i] for i in range(len(jobs))]


class _Helper:
    """The forked helper, seen from this process: the queue's read end, the results' pipe."""

    def __init__(self, pid: int, queue: int, results: int) -> None:
        self.pid, self.queue, self.results = pid, queue, results
        self.buf = bytearray()
        self.ended = False

    @classmethod
    def start(cls, jobs: Sequence[Callable[[], object]]) -> _Helper | None:
        q_r, q_w = os.pipe()
        os.write(q_w, bytes(range(len(jobs))))  # the whole queue: under a pipe's buffer
        os.close(q_w)
        r, w = os.pipe()
        parent = os.getpid()
        gc.freeze()  # the helper's collections skip what exists now: fewer pages copied
        try:
            pid = fork()
        except OSError:
            for fd in (q_r, r, w):
                os.close(fd)
            return None
        finally:
            if os.getpid() == parent:
                gc.unfreeze()
        if pid == 0:
            os.close(r)
            _helper_main(jobs, q_r, w, parent)
        os.close(w)
        return cls(pid, q_r, r)

    def claim(self) -> int | None:
        """The next job's number from the queue, None when it is empty."""
        b = os.read(self.queue, 1)
        return b[0] if b else None

    def read(self, done: dict[int, Any], slowest: list[float], wait_s: float) -> None:
        """Take what the helper has reported so far (waiting up to ``wait_s`` for more)."""
        while not self.ended and select.select([self.results], [], [], wait_s)[0]:
            chunk = os.read(self.results, 1 << 20)
            if not chunk:
                self.ended = True
                break
            self.buf += chunk
            wait_s = 0.0
        while (frame := childrun.take_frame(self.buf)) is not None:
            tag, payload = frame
            if tag == _DONE:
                i, secs, value = pickle.loads(payload)
                done[int(i)] = value
                slowest[0] = max(slowest[0], float(secs))

    def finish(self, done: dict[int, Any], slowest: list[float]) -> None:
        """Wait until the helper has ended, or is stuck (nothing reported for too long)."""
        last = time.monotonic()
        while not self.ended:
            before = len(done)
            self.read(done, slowest, wait_s=0.2)
            if len(done) > before:
                last = time.monotonic()
            if not self.ended and childrun.exited(self.pid) is not None:
                self.read(done, slowest, wait_s=0.0)  # what it wrote before it ended
                return
            if time.monotonic() - last > stall_limit_s(slowest[0]):
                return  # stuck: its unreported jobs run here

    def close(self) -> None:
        os.close(self.queue)
        os.close(self.results)
        childrun.end(self.pid)


def _helper_main(jobs: Sequence[Callable[[], object]], queue: int, w: int, parent: int) -> None:
    """In the helper: take jobs until the queue is empty, report each; always os._exit."""
    try:
        childrun.isolate(parent)
        while b := os.read(queue, 1):
            t0 = time.perf_counter()
            value = jobs[b[0]]()
            payload = pickle.dumps(
                (b[0], time.perf_counter() - t0, value), protocol=pickle.HIGHEST_PROTOCOL
            )
            childrun.send(w, _DONE, payload)
    except BaseException:  # noqa: BLE001, S110 (this process runs what was not reported)
        pass
    finally:
        os._exit(0)
