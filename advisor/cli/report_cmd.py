"""``advisor report RUN_DIR|findings.json``: re-render report.html without re-running anything."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from advisor.runfolder import ANNOTATED_NAME, FINDINGS_NAME, REPORT_NAME

if TYPE_CHECKING:
    from advisor.report import Report


def load_report(path: Path) -> tuple[Report, Path]:
    """The Report saved in ``path`` (findings.json, or a folder holding one) and its file."""
    from advisor.errors import AdvisorError
    from advisor.report import read

    src = path / FINDINGS_NAME if path.is_dir() else path
    if not src.is_file():
        raise AdvisorError("no findings.json here (run `advisor analyze` or `profile` first)", path)
    return read(src), src


def rerender(
    path: Path, out: Path | None = None, no_source: bool = False, force: bool = False
) -> Path:
    """Write report.html from a saved findings.json; returns the file written.

    Beside the findings (no ``out``) it replaces the report advisor wrote there; an existing
    ``out`` is replaced only with ``force``, and never a file advisor did not write."""
    import dataclasses
    import os

    from advisor.errors import AdvisorError
    from advisor.output.html import render_html
    from advisor.output.outfiles import atomic_write
    from advisor.output.outfolder import is_advisor_report

    report, src = load_report(path)
    if no_source:  # the snippets saved at analysis time (none if it ran with --no-source)
        views = dataclasses.replace(report.views, sources=None, sources_withheld=())
        report = dataclasses.replace(report, views=views)
    target = out if out is not None else src.parent / REPORT_NAME
    if target.is_dir():
        target = target / REPORT_NAME
    if target.exists() or target.is_symlink():
        if not is_advisor_report(target):
            raise AdvisorError(
                "exists and is not a report advisor wrote; pick another --out", target
            )
        if out is not None and not force:
            raise AdvisorError("exists (use --force to replace this advisor report)", target)
    annotated = src.parent / ANNOTATED_NAME
    rel = (
        os.path.relpath(annotated.resolve(), target.resolve().parent)
        if annotated.is_file()
        else None
    )
    extra = {"annotated_trace": rel, "report_dir": str(target.parent)}
    try:
        page = render_html(report, extra)
    except Exception as err:  # noqa: BLE001 (a value of the wrong type in an edited file)
        raise AdvisorError(
            f"damaged findings.json: cannot render it ({type(err).__name__}: {err})", src
        ) from None
    try:
        atomic_write(target, page.encode("utf-8"))
    except OSError as err:
        raise AdvisorError(f"cannot write: {err.strerror or err}", target) from None
    return target


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report_command(
        path: Path = typer.Argument(..., help="A run folder or its findings.json."),
        out: Path | None = typer.Option(
            None, "--out", "-o", help="Write the HTML here (default: report.html beside it)."
        ),
        open_: bool = typer.Option(False, "--open", help="Open the report in a browser."),
        no_source: bool = typer.Option(
            False, "--no-source", help="Keep source code out of the report."
        ),
        force: bool = typer.Option(
            False, "--force", help="Replace an existing report advisor wrote at --out."
        ),
    ) -> None:
        """Re-render report.html from a saved findings.json, without re-running the analysis."""
        import webbrowser

        target = rerender(path, out, no_source, force)
        typer.echo(f"report: {target}")
        if open_:
            try:
                webbrowser.open(target.resolve().as_uri())
            except Exception:  # noqa: BLE001 (a missing browser never fails the command)
                pass
