"""Options and endings shared by the commands that produce findings."""

from __future__ import annotations

import contextlib
import shutil
import sys
import webbrowser
from collections.abc import Iterator
from pathlib import Path

from advisor.errors import EXIT_FAIL_ON
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
        sys.stdout.buffer.write(report.to_json())
        sys.stdout.flush()
    else:
        from advisor.output.terminal import print_summary

        print_summary(report, written)
    if open_ and "report" in written:
        try:
            webbrowser.open(written["report"].resolve().as_uri())
        except Exception:  # noqa: BLE001 (a missing browser never fails the run)
            pass
    return EXIT_FAIL_ON if fails_at(report.findings, fail_on) else 0


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
