"""Render the Report as one self-contained HTML file (jinja2, autoescape on, no external URLs;
control and bidi characters removed from every value shown).

The template gets only the view-model (:func:`advisor.output.viewmodel.build_viewmodel`) plus the
CSS and JavaScript inlined from ``templates/``. JavaScript only adds sorting, collapsing and copy
buttons; the page is complete without it.
"""

from __future__ import annotations

import datetime as dt
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape

from advisor import __version__
from advisor.output.doctext import DATE_FORMAT
from advisor.output.printable import displayable
from advisor.output.templatecache import template_cache
from advisor.output.viewmodel import build_viewmodel
from advisor.report import Report


def templates_dir() -> Path:
    """``advisor/templates`` inside an installed wheel, else the repository's ``templates/``."""
    here = Path(__file__).resolve().parent.parent
    for cand in (here / "templates", here.parent / "templates"):
        if (cand / "report.html.j2").is_file():
            return cand
    raise FileNotFoundError("torch-advisor templates not found (broken installation)")


_BREAK_AFTER = re.compile(r"(::|_|/|,)")


def breakable(text: object) -> Markup:
    """``text`` escaped, with a line-break opportunity (``<wbr>``) after each ``::``, ``_``,
    ``/`` and ``,``: a long identifier (``aten::cudnn_convolution_backward_weight``)
    wraps between its parts instead of widening its table or being cut inside a word."""
    return Markup(_BREAK_AFTER.sub(r"\1<wbr>", str(escape(str(text)))))


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The templates' environment; they are kept compiled between runs
    (:mod:`advisor.output.templatecache`), keyed by what shapes their code."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        autoescape=True,
        finalize=_shown,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.bytecode_cache = template_cache(f"jinja2 {jinja2.__version__}|{__version__}|{_shape(env)}")
    env.filters["breakable"] = breakable
    return env


# what the environment's generated code depends on, besides the template's source
_CODEGEN = (
    "autoescape",
    "trim_blocks",
    "lstrip_blocks",
    "keep_trailing_newline",
    "newline_sequence",
    "optimized",
    "is_async",
    "block_start_string",
    "block_end_string",
    "variable_start_string",
    "variable_end_string",
    "comment_start_string",
    "comment_end_string",
    "line_statement_prefix",
    "line_comment_prefix",
)


def _shape(env: jinja2.Environment) -> str:
    """What else shapes the code jinja2 compiles a template into: a cached template compiled
    under other settings is never read (:mod:`advisor.output.templatecache`)."""
    fin = env.finalize
    values = [getattr(env, k) for k in _CODEGEN] + [env.undefined.__name__, sorted(env.extensions)]
    values += [fin is not None, getattr(fin, "jinja_pass_arg", None)]
    return repr(values)


def _shown(value: Any) -> Any:
    """Every value a template prints: text without control bytes (ESC, BEL, DEL, C1) or bidi
    overrides, which a trace's names may hold (escaping for HTML leaves them in)."""
    if isinstance(value, Markup):
        return Markup(displayable(str(value)))
    return displayable(value) if isinstance(value, str) else value


def _asset(name: str) -> str:
    text = (templates_dir() / name).read_text(encoding="utf-8")
    # inlined into <style>/<script>: a closing tag inside would end the element early
    return text.replace("</", "<\\/")


def now_str() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime(DATE_FORMAT)


def report_template() -> jinja2.Template:
    """The report's compiled template (jinja2 compiles it on the first call, then keeps it in
    the environment)."""
    return environment().get_template("report.html.j2")


def render_viewmodel(vm: dict[str, Any]) -> str:
    return report_template().render(vm=vm, css=_asset("report.css"), js=_asset("report.js"))


def render_html(report: Report, extra: dict[str, Any] | None = None) -> str:
    """``extra``: ``annotated_trace`` (file name written beside the report), ``generated_at``,
    ``report_dir`` (the report's folder: paths are shown relative to it)."""
    ex = extra or {}
    vm = build_viewmodel(
        report,
        generated_at=str(ex.get("generated_at") or now_str()),
        annotated_trace=ex.get("annotated_trace"),
        report_dir=ex.get("report_dir"),
    )
    return render_viewmodel(vm)
