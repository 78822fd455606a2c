"""Options and endings shared by the commands that produce findings."""

from __future__ import annotations

import contextlib
import errno
import shutil
import sys
import webbrowser
from collections.abc import Iterator
from pathlib import Path

from advisor.errors import EXIT_FAIL_ON, AdvisorError
from advisor.findings import fails_at
from advisor.report import Report


def finish(
    report: Report,
    written: dict[str, Path],
    json_out: bool,
    fail_on: str | None,
    open_: bool,
    seconds: float,
) -> int:
    if json_out:
        _write_json(report, written)
    else:
        from advisor.output.terminal import print_summary, quiet_stdout

        try:
            print_summary(report, written)
        except (OSError, ValueError, AttributeError):  # stdout closed (>&-) or gone (| head)
            quiet_stdout()  # the outputs are written: the summary is only a courtesy
    if open_ and "report" in written:
        try:
            webbrowser.open(written["report"].resolve().as_uri())
        except Exception:  # noqa: BLE001 (a missing browser never fails the run)
            pass
    return EXIT_FAIL_ON if fails_at(report.findings, fail_on) else 0


def _write_json(report: Report, written: dict[str, Path]) -> None:
    """findings.json to stdout: the product of ``--json``. A reader that leaves early is quiet
    and keeps the exit code; a closed stdout is one line naming where the findings are."""
    stream = getattr(sys.stdout, "buffer", None)
    try:
        if stream is None:
            raise OSError(errno.EBADF, "closed")
        stream.write(report.to_json())
        stream.flush()
    except BrokenPipeError:  # the reader left (| head): quiet, as Unix tools are
        from advisor.output.terminal import quiet_stdout

        quiet_stdout()
    except (OSError, ValueError) as err:
        where = (
            f" (findings.json is in {written['findings'].parent})" if "findings" in written else ""
        )
        raise AdvisorError(
            f"cannot write the findings to standard output: it is closed{where}"
        ) from err


def list_thresholds() -> None:
    from advisor.analysis.detection import all_detectors
    from advisor.detect.thresholds import THRESHOLDS

    all_detectors()
    for key in sorted(THRESHOLDS):
        t = THRESHOLDS[key]
        print(f"{key} = {t.default:g}    {t.doc}")


@contextlib.contextmanager
def output_guard(out: Path) -> Iterator[None]:
    """No half-written output: if the block fails (any exception, Ctrl-C included), remove what
    it added to ``out`` (and ``out`` itself when the block created it), then re-raise."""
    existed = out.is_dir()
    try:
        before = {p.name for p in out.iterdir()} if existed else set()
    except OSError:
        before = set()
    try:
        yield
    except BaseException:
        _remove_new(out, existed, before)
        raise


def _remove_new(out: Path, existed: bool, before: set[str]) -> None:
    try:
        if not existed:
            shutil.rmtree(out, ignore_errors=True)
            return
        for p in out.iterdir():
            if p.name not in before:
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
    except OSError:
        pass  # cleaning up is best effort; the original error is what the user needs
