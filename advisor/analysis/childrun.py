"""A plugin's code in a process of its own: whatever it does (exits, kills itself, changes the
working directory, closes stdout, holds the GIL in a call into C, never returns, raises an
exception whose message cannot be read) ends that process, never the analysis.

:func:`run` forks the analysing process: the child holds the trace and everything else the
parent held (copy-on-write: nothing is serialized on the way in). It runs ``prepare()`` (the
plugin's import), then ``work()`` (its detector), and sends ``work()``'s result back over a
pipe, pickled. The parent waits under two deadlines, ``prepare_s`` for the import and
``limit_s`` for the work, and past one kills the child's process group. It unpickles only the
types of :data:`ALLOWED` (the draft records, the replay's fixes and savings, numpy arrays,
builtins): a class of the plugin's own in a result is refused, so no code of the plugin ever
runs in the parent.

In the child: stdin reads ``/dev/null``, stdout writes to stderr (a plugin's ``print`` never
lands in ``--json``), signals are at their defaults (a SIGTERM the plugin sends itself ends the
child, not the analysis), it leads a process group of its own (the parent ends it and whatever
it started) and dies with the parent (:func:`advisor.lifeline.die_with`). It always ends with
``os._exit``: no ``atexit`` handler or buffered output of the parent runs twice.

Where the platform cannot fork, :func:`available` is False and the caller runs the code in its
own process (:func:`advisor.analysis.isolation.call`).
"""

from __future__ import annotations

import io
import os
import pickle
import select
import signal
import struct
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from advisor.lifeline import die_with, fork

MAX_RESULT_BYTES = 512 << 20  # a result larger than this is refused (read no further)
_HEAD = struct.Struct("<cQ")  # a frame: its tag and its payload's length
_READY, _RESULT, _ERROR = b"R", b"O", b"E"

_NUMPY = {"_frombuffer", "_reconstruct", "ndarray", "dtype", "scalar"}
ALLOWED: dict[str, set[str]] = {
    "builtins": {"list", "tuple", "dict", "set", "frozenset", "complex", "slice", "range"},
    "advisor.detect.draft": {"Draft"},
    "advisor.findings": {"Evidence", "Location"},
    "advisor.replay.whatif": {"Saving"},
    "advisor.replay.fixes": {
        "ScaleGpu",
        "ShrinkHost",
        "DropSyncs",
        "AsyncCopies",
        "GraphLaunch",
        "HideComm",
        "Combined",
    },
    "numpy": {"dtype", "ndarray"},
    "numpy.core.multiarray": _NUMPY,
    "numpy._core.multiarray": _NUMPY,
    "numpy.core.numeric": _NUMPY,
    "numpy._core.numeric": _NUMPY,
}


def available() -> bool:
    """Whether code can run in a forked child here (POSIX)."""
    return hasattr(os, "fork") and sys.platform != "win32"


@dataclass(frozen=True)
class Failure:
    """Why a child sent no result: ``error`` one line; ``skip`` the work raised ``Skip`` (its
    message is the reason); ``in_prepare`` it happened during ``prepare()``."""

    error: str
    trace: str = ""
    skip: bool = False
    in_prepare: bool = False


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if name in ALLOWED.get(module, ()):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"holds a {module}.{name}, not a type of advisor.detect")


def loads(data: bytes) -> Any:
    """Unpickle what a child sent, refusing every type outside :data:`ALLOWED`."""
    return _Unpickler(io.BytesIO(data)).load()


def run(
    prepare: Callable[[], object],
    work: Callable[[], Any],
    describe: Callable[[BaseException], str],
    is_skip: Callable[[BaseException], bool],
    prepare_s: float | None,
    limit_s: float | None,
) -> tuple[Any, Failure | None]:
    """``work()``'s result, run in a child after ``prepare()``, or why there is none. The
    deadlines are seconds (None: no limit); ``describe`` turns what the child raised into one
    line (in the child); ``is_skip``: that exception is a skip, not an error."""
    r, w = os.pipe()
    parent = os.getpid()
    pid = fork()
    if pid == 0:  # the child
        os.close(r)
        _child(w, parent, prepare, work, describe, is_skip)
    os.close(w)
    try:
        return _collect(r, pid, prepare_s, limit_s)
    finally:
        os.close(r)
        end(pid)


def _child(
    w: int,
    parent: int,
    prepare: Callable[[], object],
    work: Callable[[], Any],
    describe: Callable[[BaseException], str],
    is_skip: Callable[[BaseException], bool],
) -> None:
    stage = "prepare"
    try:
        isolate(parent)
        prepare()
        send(w, _READY, b"")
        stage = "work"
        send(w, _RESULT, pickle.dumps(work(), protocol=pickle.HIGHEST_PROTOCOL))
    except BaseException as err:  # noqa: BLE001 (everything goes to the parent as one line)
        try:
            text = describe(err)
            tb = _traceback(err)
            send(w, _ERROR, pickle.dumps((text, tb, is_skip(err), stage == "prepare")))
        except BaseException:  # noqa: BLE001, S110 (the parent reports the child's end)
            pass
    finally:
        os._exit(0)


def isolate(parent: int) -> None:
    """In a forked child: a process group of its own, death with ``parent``, default signals,
    stdin from /dev/null and stdout onto stderr."""
    os.setpgid(0, 0)
    die_with(parent)
    for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM"):
        sig = getattr(signal, name, None)
        if sig is not None:
            signal.signal(sig, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)  # a print lands on stderr, never in the parent's stdout (--json)


def _traceback(err: BaseException) -> str:
    try:
        return "".join(traceback.format_exception(type(err), err, err.__traceback__))
    except BaseException:  # noqa: BLE001 (its message cannot be read)
        return ""


def send(w: int, tag: bytes, payload: bytes) -> None:
    """Write one frame (``tag``, then ``payload``'s length and bytes) to the pipe ``w``."""
    data = memoryview(_HEAD.pack(tag, len(payload)) + payload)
    while data:
        data = data[os.write(w, data) :]


def _collect(
    r: int, pid: int, prepare_s: float | None, limit_s: float | None
) -> tuple[Any, Failure | None]:
    buf = bytearray()
    prepared, eof = False, False
    t0 = time.monotonic()
    while True:
        frame = take_frame(buf)
        if frame is not None:
            tag, payload = frame
            if tag == _READY:
                prepared, t0 = True, time.monotonic()
                continue
            return _result(tag, payload)
        if len(buf) > MAX_RESULT_BYTES + _HEAD.size:
            return None, Failure(f"its result is over {MAX_RESULT_BYTES >> 20} MiB: refused")
        limit = limit_s if prepared else prepare_s
        left = None if not limit or limit <= 0 else limit - (time.monotonic() - t0)
        if left is not None and left <= 0:
            return None, Failure(
                f"still running after {limit:g} s: stopped (ADVISOR_PLUGIN_TIMEOUT sets the limit)",
                in_prepare=not prepared,
            )
        wait_s = 0.2 if left is None else min(left, 0.2)
        if not eof and select.select([r], [], [], wait_s)[0]:
            chunk = os.read(r, 1 << 20)
            buf += chunk
            eof = not chunk
            continue
        if eof:
            time.sleep(min(wait_s, 0.02))
        status = exited(pid)  # ended, or the pipe is held open (a grandchild) or closed
        if status is not None and not _drain(r, buf, eof):
            return None, Failure(_ending(status), in_prepare=not prepared)


def _drain(r: int, buf: bytearray, eof: bool) -> bool:
    """Read what an ended child left in the pipe; whether a frame may still be in it."""
    while not eof and select.select([r], [], [], 0)[0]:
        chunk = os.read(r, 1 << 20)
        if not chunk:
            break
        buf += chunk
    return _frame_ready(buf)


def _frame_ready(buf: bytearray) -> bool:
    if len(buf) < _HEAD.size:
        return False
    return len(buf) >= _HEAD.size + int(_HEAD.unpack_from(buf)[1])


def _result(tag: bytes, payload: bytes) -> tuple[Any, Failure | None]:
    try:
        value = loads(payload)
    except Exception as err:  # noqa: BLE001 (a type of the plugin's own, or damage)
        why = str(err) if _named(err) else f"could not be read: {type(err).__name__}"
        return None, Failure(f"its result {why}")
    if tag == _RESULT:
        return value, None
    text, tb, skip, in_prepare = value
    return None, Failure(str(text), str(tb), bool(skip), bool(in_prepare))


def _named(err: Exception) -> bool:
    return isinstance(err, pickle.UnpicklingError) and str(err).startswith("holds a")


def take_frame(buf: bytearray) -> tuple[bytes, bytes] | None:
    """The first complete frame in ``buf`` (removed from it), else None."""
    if len(buf) < _HEAD.size:
        return None
    tag, size = _HEAD.unpack_from(buf)
    if len(buf) < _HEAD.size + size:
        return None
    payload = bytes(buf[_HEAD.size : _HEAD.size + size])
    del buf[: _HEAD.size + size]
    return tag, payload


def exited(pid: int) -> int | None:
    """The child's wait status once it has ended (left unreaped: its pid, and so its process
    group's id, stays its own until :func:`end`), else None."""
    waitid = getattr(os, "waitid", None)
    if waitid is None:
        done, status = os.waitpid(pid, os.WNOHANG)  # reaped here: end's kill finds no group
        return status if done else None
    info = waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    if info is None:
        return None
    if info.si_code == os.CLD_EXITED:
        return (int(info.si_status) & 0xFF) << 8
    return int(info.si_status) & 0x7F  # killed by this signal


def _ending(status: int) -> str:
    """How a child that sent nothing ended, in words."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"its process was killed by {name} before it returned"
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
    return f"its process exited with code {code} before it returned (os._exit or a C exit)"


def end(pid: int) -> None:
    """Kill the child's process group (whatever it started too) and reap the child."""
    targets: tuple[Callable[[], None], ...] = (
        lambda: os.killpg(pid, signal.SIGKILL),
        lambda: os.kill(pid, signal.SIGKILL),
    )
    for target in targets:
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
