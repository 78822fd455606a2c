"""Render the Report as one self-contained HTML file (jinja2, autoescape on, no external URLs)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from advisor.report import Report


def templates_dir() -> Path:
    """``advisor/templates`` inside an installed wheel, else the repository's ``templates/``."""
    here = Path(__file__).resolve().parent.parent
    for cand in (here / "templates", here.parent / "templates"):
        if (cand / "report.html.j2").is_file():
            return cand
    raise FileNotFoundError("torch-advisor templates not found (broken installation)")


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_html(report: Report, extra: dict[str, Any] | None = None) -> str:
    env = environment()
    css = (templates_dir() / "report.css").read_text(encoding="utf-8")
    return env.get_template("report.html.j2").render(
        report=report, run=report.run, findings=report.findings, css=css, extra=extra or {}
    )
