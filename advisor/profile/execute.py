"""Run a script or module the way ``python SCRIPT ARGS`` / ``python -m MODULE ARGS`` would.

``__name__ == "__main__"``, ``sys.argv``, ``sys.path[0]`` (the script's folder, or the working
directory for ``-m``), ``__file__`` (absolute, as Python 3.9+ sets it) and ``sys.modules
["__main__"]`` are set up for the run and restored afterwards, along with the working directory.
How the run ended is returned as an :class:`Outcome`; the user's traceback is printed the way
Python prints it, without the advisor's own frames.
"""

from __future__ import annotations

import builtins
import importlib.machinery
import importlib.util
import os
import runpy
import sys
import tokenize
import types
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from advisor.errors import AdvisorError
from advisor.output.printable import without_escapes
from advisor.profile.faults import classify
from advisor.profile.forks import leave_child

EXIT_SIGINT = 130
EXIT_SIGTERM = 143


class WindowCaptured(BaseException):  # noqa: N818 (a control-flow signal, not an error)
    """Raised into the script to stop it once the profiling window is captured.

    Derived from BaseException so the user's ``except Exception`` cannot swallow it.
    """


class Terminated(BaseException):  # noqa: N818
    """Raised into the script by the advisor's SIGTERM handler."""


@dataclass(frozen=True)
class Target:
    """What to run: a script path (as the user typed it) or a module name, plus its arguments."""

    kind: str  # "script" or "module"
    name: str
    args: tuple[str, ...]

    @property
    def stem(self) -> str:
        if self.kind == "module":
            return self.name
        p = Path(self.name)
        return p.stem if p.suffix else p.name

    @property
    def display(self) -> str:
        return f"-m {self.name}" if self.kind == "module" else self.name


@dataclass(frozen=True)
class Outcome:
    """How the script ended."""

    # completed | window-captured | exception | out-of-memory | dataloader-worker-died |
    # sys-exit | keyboard-interrupt | sigterm
    end_reason: str
    exit_code: int
    error: str | None = None  # one line naming the exception, for run.json

    @property
    def ended_early(self) -> bool:
        if self.end_reason in ("completed", "window-captured"):
            return False
        return self.end_reason != "sys-exit" or self.exit_code != 0


def resolve_target(name: str, args: list[str] | tuple[str, ...], module: bool) -> Target:
    """Check that the script or module exists; raises AdvisorError (one line) when it does not."""
    if module:
        if not name or name.startswith("-"):
            raise AdvisorError(f"-m expects a module name, got {name!r}")
        saved = list(sys.path)
        sys.path.insert(0, os.getcwd())
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError) as err:
            raise AdvisorError(f"cannot find module {name!r}: {err}") from None
        finally:
            sys.path[:] = saved
        if spec is None:
            raise AdvisorError(f"no module named {name!r}")
        return Target("module", name, tuple(args))
    p = Path(name)
    if not p.exists():
        raise AdvisorError("no such script", name)
    if p.is_dir() and not (p / "__main__.py").is_file():
        raise AdvisorError("is a directory without __main__.py", name)
    if not os.access(p, os.R_OK):
        raise AdvisorError("script is not readable", name)
    return Target("script", name, tuple(args))


class _SavedState:
    """The interpreter state a run changes, captured before and put back after."""

    def __init__(self) -> None:
        self.argv = list(sys.argv)
        self.path = list(sys.path)
        self.main = sys.modules.get("__main__")
        try:
            self.cwd: str | None = os.getcwd()
        except OSError:
            self.cwd = None

    def restore(self) -> None:
        sys.argv[:] = self.argv
        sys.path[:] = self.path
        if self.main is not None:
            sys.modules["__main__"] = self.main
        if self.cwd is not None:
            try:
                os.chdir(self.cwd)
            except OSError:
                pass


def _exec_script(path: str) -> None:
    """Execute a script file as ``__main__`` (what ``python path`` does)."""
    abs_path = os.path.abspath(path)
    main = types.ModuleType("__main__")
    main.__file__ = abs_path
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", abs_path)
    main.__spec__ = None
    main.__package__ = None
    main.__dict__["__cached__"] = None
    with tokenize.open(abs_path) as fh:  # honours the PEP 263 coding cookie
        source = fh.read()
    code = compile(source, abs_path, "exec", dont_inherit=True)
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def _set_path0(folder: str) -> None:
    if sys.path:
        sys.path[0] = folder
    else:
        sys.path.append(folder)


def _exec_module(name: str) -> None:
    """Execute a module as ``__main__`` (what ``python -m name`` does; runpy's steps, but the
    module stays in ``sys.modules["__main__"]`` until the run's state is restored)."""
    spec = importlib.util.find_spec(name)
    if spec is None:
        raise ImportError(f"No module named {name}")
    if spec.submodule_search_locations is not None:  # a package: run its __main__
        spec = importlib.util.find_spec(f"{name}.__main__")
        if spec is None:
            raise ImportError(f"No module named {name}.__main__; '{name}' is a package")
    loader = spec.loader
    code = loader.get_code(spec.name) if loader is not None else None  # type: ignore[attr-defined]
    if code is None:
        raise ImportError(f"No code object available for {name}")
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=spec.origin,
        __cached__=spec.cached,
        __loader__=loader,
        __package__=spec.parent,
        __spec__=spec,
        __builtins__=builtins,
    )
    if spec.origin:
        sys.argv[0] = spec.origin
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def _run(target: Target) -> None:
    if target.kind == "module":
        sys.argv[:] = ["-m", *target.args]
        _set_path0(os.getcwd())
        _exec_module(target.name)
        return
    sys.argv[:] = [target.name, *target.args]
    _set_path0(os.path.dirname(os.path.realpath(target.name)))
    if os.path.isdir(target.name) or (
        not target.name.endswith((".py", ".pyw")) and zipfile.is_zipfile(target.name)
    ):
        sys.path[0] = target.name  # a folder or zip with __main__.py, as Python does it
        runpy.run_path(target.name, run_name="__main__")
        return
    _exec_script(target.name)


_OWN_DIR = os.path.dirname(os.path.abspath(__file__))
_RUNPY = os.path.abspath(runpy.__file__ or "runpy.py")


def _is_runner_frame(filename: str) -> bool:
    f = os.path.abspath(filename) if not filename.startswith("<") else filename
    return f.startswith(_OWN_DIR) or f == _RUNPY or filename in ("<frozen runpy>", "<string>")


def user_traceback(tb: TracebackType | None) -> TracebackType | None:
    """Drop the leading frames that belong to the advisor's runner or runpy."""
    while tb is not None and _is_runner_frame(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb


def _print_exception(exc: BaseException) -> None:
    """Print the traceback as Python would at exit (through sys.excepthook)."""
    tb = user_traceback(exc.__traceback__)
    exc = exc.with_traceback(tb)
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001
        pass
    try:
        sys.excepthook(type(exc), exc, tb)
    except Exception:  # noqa: BLE001 (a broken user excepthook falls back to the default)
        sys.__excepthook__(type(exc), exc, tb)


def _exit_code(code: object) -> int:
    """The process exit status for ``sys.exit(code)``, printing non-int codes like Python."""
    if code is None:
        return 0
    if isinstance(code, bool):
        return int(code)
    if isinstance(code, int):  # as CPython: a C long (else -1), its low byte
        return code & 0xFF if -(2**63) <= code < 2**63 else 0xFF
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001
        pass
    print(code, file=sys.stderr)
    return 1


def _one_line(exc: BaseException) -> str:
    """The exception as one line for run.json and the report, without terminal escapes."""
    text = without_escapes(str(exc)).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class ScriptRun:
    """Context manager around one run: ``with ScriptRun(t) as r: outcome = r.run()``.

    The interpreter state is restored on exit, not when :meth:`run` returns, so the script's
    objects (its ``__main__`` namespace) are still alive for the advisor to read facts from.
    """

    def __init__(self, target: Target) -> None:
        self.target = target
        self._saved: _SavedState | None = None
        self._pid = os.getpid()  # a forked child of the script is another process

    def __enter__(self) -> ScriptRun:
        self._saved = _SavedState()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved is not None:
            self._saved.restore()
            self._saved = None

    def run(self, script_over: Callable[[], None] | None = None) -> Outcome:
        """Run the target to its end (or until it is stopped) and report how it ended.

        ``script_over`` is called as soon as the script's code is over, before anything else
        (see :meth:`advisor.profile.signals.RunSignals.script_over`): a signal handler of the
        script's that raises late (torch's SIGCHLD handler when a DataLoader worker died) can
        fire at any call until then, and must not replace how the script ended.
        """
        exc: BaseException | None = None
        try:
            _run(self.target)
        except BaseException as err:  # noqa: BLE001 (the user's uncaught exception, as Python does)
            exc = err
        if os.getpid() != self._pid:  # a forked child of the script ended: as plain Python
            leave_child(_outcome(exc).exit_code)
        for _ in range(_LATE_TRIES):
            try:
                if script_over is not None:
                    script_over()
                break
            except Exception:  # noqa: BLE001, S112 (raised by a late signal: the script is over)
                continue
        return _outcome(exc)


_LATE_TRIES = 10  # script_over() retried when a late signal handler raised inside it


def _outcome(exc: BaseException | None) -> Outcome:
    """How the run ended, from the exception that ended the script (None: it completed)."""
    if exc is None:
        return Outcome("completed", 0)
    if isinstance(exc, WindowCaptured):
        return Outcome("window-captured", 0)
    if isinstance(exc, SystemExit):
        code = _exit_code(exc.code)
        return Outcome("sys-exit", code, None if code == 0 else f"SystemExit: {exc.code}")
    if isinstance(exc, KeyboardInterrupt):
        return Outcome("keyboard-interrupt", EXIT_SIGINT, "KeyboardInterrupt")
    if isinstance(exc, Terminated):
        return Outcome("sigterm", EXIT_SIGTERM, "SIGTERM")
    _print_exception(exc)
    return Outcome(classify(exc), 1, _one_line(exc))


def run_target(target: Target) -> Outcome:
    """Run ``target`` and restore the interpreter state afterwards."""
    with ScriptRun(target) as r:
        return r.run()
