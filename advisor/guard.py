"""How every command ends: one line for an error, exit codes, and the fast exit.

Kept free of typer so the console entry's fast path (:mod:`advisor.entry`) shares it.
"""

from __future__ import annotations

import atexit
import os
import sys
import traceback
from collections.abc import Callable

from advisor.errors import AdvisorError
from advisor.printable import printable

# Commands that only read traces and write their own outputs: once those are written and
# flushed, the process ends without tearing down every module and table (~0.1 s per run).
# Never ``profile``: the user's script may rely on the normal interpreter shutdown.
FAST_EXIT = frozenset({"analyze", "inspect", "report", "diff"})


def fast_exit(code: object) -> None:
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    atexit._run_exitfuncs()
    os._exit(status)


def guarded(run: Callable[[], object]) -> None:
    """Run a command; every failure becomes one line on stderr and an exit code."""
    try:
        run()
    except AdvisorError as err:
        _fail(f"error: {err}")
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except MemoryError:
        _fail("error: out of memory (try a smaller trace or a machine with more memory)")
    except RecursionError:
        _fail("error: input nested too deeply")
    except OSError as err:
        where = f"{err.filename}: " if getattr(err, "filename", None) else ""
        _fail(f"error: {where}{err.strerror or err}")
    except Exception as err:  # noqa: BLE001 (a bug: still one line, traceback on request)
        if os.environ.get("ADVISOR_DEBUG"):
            traceback.print_exc()
        _fail(
            f"internal error: {type(err).__name__}: {_one_line(str(err))} "
            "(a bug in torch-advisor; rerun with ADVISOR_DEBUG=1 for the traceback)"
        )


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fail(message: str, code: int = 1) -> None:
    try:
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError):  # AttributeError: started with stdout closed
        pass
    print(f"advisor: {printable(_one_line(message, 2000))}", file=sys.stderr)
    sys.exit(code)
