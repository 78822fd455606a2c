"""Options and endings shared by the commands that produce findings."""

from __future__ import annotations

import contextlib
import re
import shutil
import sys
import time
import webbrowser
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from advisor.errors import AdvisorError
from advisor.findings import SEVERITIES
from advisor.report import Report

EXIT_FAIL_ON = 3


def split_ids(values: list[str]) -> frozenset[str]:
    return frozenset(v.strip() for item in values for v in item.split(",") if v.strip())


def options_from_cli(only, skip, set_, debug, no_source, max_trace_bytes, source_roots=()):  # type: ignore[no-untyped-def]
    from advisor.pipeline import Options
    from advisor.thresholds import parse_overrides

    opts = Options(
        only=split_ids(only),
        skip=split_ids(skip),
        overrides=parse_overrides(set_),
        debug=debug,
        no_source=no_source,
        max_trace_bytes=max_trace_bytes,
        source_roots=tuple(str(p) for p in source_roots),
    )
    opts.validate()
    return opts


@dataclass(frozen=True)
class OutputOptions:
    fail_on: str | None

    @staticmethod
    def parse(fail_on: str | None) -> OutputOptions:
        if fail_on is not None and fail_on not in ("high", "medium", "low"):
            raise AdvisorError(f"--fail-on expects high, medium or low, got {fail_on!r}")
        return OutputOptions(fail_on)


def default_out_dir(trace: Path) -> Path:
    stem = trace.name
    for suf in (".gz", ".json", ".trace", ".pt"):
        stem = stem.removesuffix(suf)
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", stem) or "trace"
    return Path("advisor-runs") / f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"


def fail_on_hit(report: Report, level: str | None) -> bool:
    if level is None:
        return False
    limit = SEVERITIES.index(level)  # type: ignore[arg-type]
    return any(SEVERITIES.index(f.severity) <= limit for f in report.findings)


def finish(report: Report, written: dict[str, Path], json_out: bool, oo: OutputOptions,
           open_: bool, seconds: float) -> int:  # fmt: skip
    if json_out:
        sys.stdout.buffer.write(report.to_json())
        sys.stdout.flush()
    else:
        from advisor.render.terminal import print_summary

        print_summary(report, written)
    if open_ and "report" in written:
        try:
            webbrowser.open(written["report"].resolve().as_uri())
        except Exception:  # noqa: BLE001 (a missing browser never fails the run)
            pass
    return EXIT_FAIL_ON if fail_on_hit(report, oo.fail_on) else 0


def list_thresholds() -> None:
    from advisor.registry import all_detectors
    from advisor.thresholds import THRESHOLDS

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
