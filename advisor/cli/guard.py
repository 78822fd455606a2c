"""How every command ends: one line for an error, and the exit codes."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable

from advisor import settings
from advisor.errors import AdvisorError
from advisor.output.printable import printable


def guarded(run: Callable[[], object]) -> None:
    """Run a command; every failure becomes one line on stderr and an exit code."""
    try:
        run()
    except AdvisorError as err:
        _fail(f"error: {err}")
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except BrokenPipeError:  # the reader went away (| head): it has what it wanted
        _quiet_end()
    except MemoryError:
        _fail("error: out of memory (try a smaller trace or a machine with more memory)")
    except RecursionError:
        _fail("error: input nested too deeply")
    except OSError as err:
        where = f"{err.filename}: " if getattr(err, "filename", None) else ""
        _fail(f"error: {where}{err.strerror or err}")
    except Exception as err:  # noqa: BLE001 (a bug: still one line, traceback on request)
        if settings.debug():
            traceback.print_exc()
        _fail(
            f"internal error: {type(err).__name__}: {_one_line(str(err))} "
            "(a bug in torch-advisor; rerun with ADVISOR_DEBUG=1 for the traceback)"
        )


def _quiet_end() -> None:
    """EPIPE is quiet, as for Unix tools: no message, stdout pointed at /dev/null so the flush at
    exit cannot fail, and exit 0 (what was printed was read as far as the reader wanted)."""
    from advisor.output.terminal import quiet_stdout

    quiet_stdout()
    sys.exit(0)


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
