"""Signals during ``advisor profile``: SIGTERM ends the script like Ctrl-C does, and the outputs
are still written.

While the script runs, SIGTERM raises :class:`Terminated` into it (exit code 143), so the
capture is analyzed and written instead of lost. To the script everything looks as under plain
Python: ``signal.getsignal(SIGTERM)`` answers what was installed before the advisor (normally
``SIG_DFL``), a handler the script installs itself runs as usual (the advisor only notes that
SIGTERM arrived, see :attr:`RunSignals.sigterm_handled_by_script`), ``SIG_IGN`` ignores it,
and ``SIG_DFL`` gives back the advisor's handler (the advisor's "default": end the run,
report, exit 143). A process forked from the script (a DataLoader worker) that inherited the
handler dies of SIGTERM as it would without the advisor, instead of printing a traceback.

While the outputs are written, SIGTERM is ignored and Ctrl-C asks for a second press (which
abandons the report); torch's DataLoader SIGCHLD handler, which raises when a worker has
died, is set aside so a worker that dies now cannot break the writing. Everything is put back
when the run is over.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from advisor.profile.execute import Outcome, Terminated

TERM_GRACE_S = 3.0  # after SIGTERM, how long the script may take to end before a hard stop
# ended like SIGTERM (when the script leaves them at their default): end_reason per signal
ENDING_SIGNALS: dict[int, str] = {signal.SIGTERM: "sigterm"}
for _name, _reason in (("SIGHUP", "sighup"), ("SIGQUIT", "sigquit")):
    if hasattr(signal, _name):
        ENDING_SIGNALS[getattr(signal, _name)] = _reason

Handler = Any  # a callable, signal.SIG_DFL / SIG_IGN, or None
_raw_signal = signal.signal  # never the wrappers below (a forked child still has them)
_raw_getsignal = signal.getsignal


def _say(line: str) -> None:
    try:  # from a signal handler: stderr may be in the middle of a write (reentrant call)
        print(line, file=sys.stderr)
    except Exception:  # noqa: BLE001
        pass


class _ScriptHandler:
    """A SIGTERM handler the script installed, called through the advisor (which notes the
    signal first)."""

    def __init__(self, owner: RunSignals, handler: Callable[..., Any]) -> None:
        self.owner = owner
        self.handler = handler

    def __call__(self, signum: int, frame: FrameType | None) -> Any:
        if os.getpid() == self.owner.pid:
            self.owner.sigterm_handled_by_script = True
        return self.handler(signum, frame)


class RunSignals:
    """``with RunSignals() as sigs: ... sigs.finalizing() ...`` around one profiled run."""

    def __init__(self) -> None:
        self.main = threading.current_thread() is threading.main_thread()
        self.pid = os.getpid()
        self.sigterm_handled_by_script = False  # SIGTERM arrived; the script's handler ran
        self.terminated = False  # the advisor's handler raised Terminated into the script
        self._saved: dict[int, Handler] = {}
        self._ctrl_c = 0
        self._late_term_seen = False
        self._orig: tuple[Callable[..., Any], Callable[..., Any]] | None = None
        self._patched: tuple[Callable[..., Any], Callable[..., Any]] | None = None
        self.hard_stop: Callable[[Outcome], None] | None = None  # see advisor.profile.run
        self.term_signal: int = signal.SIGTERM  # which signal ended the run (when terminated)
        self._real_exit: Callable[[int], Any] = os._exit
        self._patched_exit: Callable[[int], Any] | None = None
        self._grace: threading.Timer | None = None

    # ------------------------------------------------------------------ the run
    def __enter__(self) -> RunSignals:
        if self.main:
            self._saved[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._term)
            for sig in ENDING_SIGNALS:  # SIGHUP, SIGQUIT: only when nothing else handles them
                if sig != signal.SIGTERM and signal.getsignal(sig) == signal.SIG_DFL:
                    self._saved[sig] = signal.signal(sig, self._term)
            self._patch()
        self._patch_exit()
        return self

    def outcome(self) -> Outcome:
        """How the run ended when a signal ended it: SIGTERM 143, SIGHUP 129, SIGQUIT 131."""
        sig = int(self.term_signal)
        return Outcome(ENDING_SIGNALS.get(sig, "sigterm"), 128 + sig, signal.Signals(sig).name)

    def _patch_exit(self) -> None:
        """``os._exit`` from the script's own process writes the outputs first (a forked
        child's goes straight through)."""
        real = self._real_exit = os._exit

        def _exit(status: int) -> None:
            if os.getpid() == self.pid and self.hard_stop is not None:
                os._exit = real
                code = status if isinstance(status, int) else 1
                self.hard_stop(Outcome("os-exit", code & 0xFF, f"os._exit({status})"))
            real(status)

        os._exit = _exit  # type: ignore[assignment]
        self._patched_exit = _exit

    def _unpatch_exit(self) -> None:
        if self._patched_exit is not None and os._exit is self._patched_exit:
            os._exit = self._real_exit  # type: ignore[assignment]
        self._patched_exit = None

    def _term(self, signum: int, frame: FrameType | None) -> Any:
        """The advisor's SIGTERM handler while the script runs."""
        if os.getpid() != self.pid:  # a forked child inherited it: behave as before the advisor
            prev = self._saved.get(signum)
            _raw_signal(signum, prev if prev is not None else signal.SIG_DFL)
            if callable(prev):
                return prev(signum, frame)
            if prev != signal.SIG_IGN:
                os.kill(os.getpid(), signum)
            return None
        if self.terminated and self.hard_stop is not None:
            # SIGTERM again (or the grace timer): the first one's exception was swallowed
            self.hard_stop(self.outcome())
        if not self.terminated:
            self.term_signal = signum
        self.terminated = True  # stands even when the exception is lost (see run.py)
        self._set_aside_sigchld()  # the workers get SIGTERM too when the whole group does
        if self.hard_stop is not None and self._grace is None:
            # a script that catches BaseException would run on: after the grace period the
            # timer sends SIGTERM again, and that one ends the run (report first)
            self._grace = threading.Timer(TERM_GRACE_S, os.kill, (self.pid, signal.SIGTERM))
            self._grace.daemon = True
            self._grace.start()
        raise Terminated()

    def _set_aside_sigchld(self) -> None:
        """torch's DataLoader SIGCHLD handler raises when a worker has died, from wherever the
        main thread is: while the run winds down, that is never the script's business."""
        sigchld = getattr(signal, "SIGCHLD", None)
        if sigchld is None or not self.main:
            return
        current = _raw_getsignal(sigchld)
        if callable(current):  # safe to call again when a late signal interrupted it
            # the newest: one the script installed after an earlier set-aside is the one to
            # put back at the end (the set-aside left SIG_DFL, which is never saved)
            self._saved[sigchld] = current
            _raw_signal(sigchld, signal.SIG_DFL)

    def script_over(self) -> None:
        """The script's code is over (it returned or raised): from here on, a DataLoader worker
        that dies is no longer the script's business. Called first thing by
        :meth:`advisor.profile.execute.ScriptRun.run`, before it looks at the script's
        exception, so torch's handler cannot raise into the advisor (and lose the outputs)."""
        self._set_aside_sigchld()

    def _shown(self, handler: Handler) -> Handler:
        """What the script sees for an installed SIGTERM handler."""
        if isinstance(handler, _ScriptHandler):
            return handler.handler
        if handler == self._term:
            return self._saved.get(signal.SIGTERM)
        return handler

    def _patch(self) -> None:
        orig_signal, orig_getsignal = signal.signal, signal.getsignal

        def _signal(signalnum: Any, handler: Any) -> Any:
            if signalnum != signal.SIGTERM:
                return orig_signal(signalnum, handler)
            if handler == signal.SIG_DFL:
                installed: Any = self._term
            elif callable(handler) and not isinstance(handler, _ScriptHandler):
                installed = _ScriptHandler(self, handler)
            else:
                installed = handler
            return self._shown(orig_signal(signalnum, installed))

        def _getsignal(signalnum: Any) -> Any:
            current = orig_getsignal(signalnum)
            return self._shown(current) if signalnum == signal.SIGTERM else current

        _signal.__wrapped__ = orig_signal  # type: ignore[attr-defined]
        _getsignal.__wrapped__ = orig_getsignal  # type: ignore[attr-defined]
        self._orig = (orig_signal, orig_getsignal)
        self._patched = (_signal, _getsignal)
        signal.signal = _signal
        signal.getsignal = _getsignal

    def _unpatch(self) -> None:
        """Put signal.signal / getsignal back (unless someone wrapped them again since)."""
        if self._orig is None or self._patched is None:
            return
        if signal.signal is self._patched[0]:
            signal.signal = self._orig[0]
        if signal.getsignal is self._patched[1]:
            signal.getsignal = self._orig[1]
        self._orig = self._patched = None

    # ------------------------------------------------------------------ writing the outputs
    def _late(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self.pid:
            return
        if signum == signal.SIGINT:
            self._ctrl_c += 1
            if self._ctrl_c > 1:
                raise KeyboardInterrupt
            _say("advisor: writing the report; press Ctrl-C again to abandon it")
        elif not self._late_term_seen:
            self._late_term_seen = True
            _say(f"advisor: {signal.Signals(signum).name}: finishing the report first")

    def finalizing(self) -> None:
        """The script is over: hold off signals while the outputs are written."""
        self._set_aside_sigchld()  # first: torch's handler would raise from any call below
        if self._grace is not None:
            self._grace.cancel()
        self._unpatch()
        self._unpatch_exit()
        if not self.main:
            return
        current = signal.signal(signal.SIGTERM, self._late)
        self._saved.setdefault(signal.SIGTERM, current)
        for sig in ENDING_SIGNALS:
            if sig in self._saved and sig != signal.SIGTERM:
                signal.signal(sig, self._late)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._saved[signal.SIGINT] = signal.signal(signal.SIGINT, self._late)

    def __exit__(self, *exc: object) -> None:
        if self._grace is not None:
            self._grace.cancel()
        self._unpatch()
        self._unpatch_exit()
        for sig, handler in self._saved.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._saved.clear()
