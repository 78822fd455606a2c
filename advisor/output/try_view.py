"""Rendering of ``advisor try`` (a :class:`~advisor.tryresult.TryResult`): a terminal table and
try.html.

Both show the same rows, formatted by :func:`rows`: per fix the median step before and after
with its spread (interquartile range), the measured saving, the advisor's estimate and their
ratio, the verdict against the noise and the drift between rounds (with one round: no verdict),
the numerics check, failures and runs a signal interrupted.
"""

from __future__ import annotations

from typing import Any, TextIO

from rich.table import Table
from rich.text import Text

from advisor.output.printable import printable
from advisor.output.terminal import console
from advisor.tryresult import StepStats, TryResult, TryRow


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def _step(s: StepStats) -> str:
    if s.median_ms is None:
        return "–"
    return f"{s.median_ms:.2f} [{s.p25_ms or 0:.2f}–{s.p75_ms or 0:.2f}]"


def _iqr(s: StepStats) -> str:
    if s.median_ms is None:
        return ""
    return f"[{s.p25_ms or 0:.2f}–{s.p75_ms or 0:.2f}]"


def _spread(r: TryRow) -> str:
    b, a = r.before, r.after
    if b.median_ms is None or a.median_ms is None:
        return "no steps to compare"
    return (
        f"before {_step(b)} ms over {b.steps} steps, after {_step(a)} ms over "
        f"{a.steps} steps (median [p25–p75]); noise ±{r.noise_ms or 0:.2f} ms"
    )


def _drift(r: TryRow) -> str:
    """The medians round by round, and how far they drifted."""
    if not r.rounds:
        return ""
    per = "; ".join(
        f"round {x.round}: {_ms(x.before_ms)} -> {_ms(x.after_ms)} ms ({x.saving_ms or 0:+.2f})"
        for x in r.rounds
    )
    if len(r.rounds) < 2:
        return f"{per}; one round: the drift between rounds is not measured"
    return f"{per}; drift between rounds ±{r.drift_ms or 0:.2f} ms"


def _saving(r: TryRow) -> str:
    ms, pct = r.measured_saving_ms, r.measured_saving_pct
    if ms is None:
        return "–"
    return f"{ms:+.2f}" + (f" ({pct:+.1f}%)" if pct is not None else "")


def _estimate(r: TryRow) -> str:
    if r.estimated_saving_ms is None:
        return "no finding"
    pct = r.estimated_saving_pct
    return f"{r.estimated_saving_ms:.2f}" + (f" ({pct:.1f}%)" if pct is not None else "")


_NUMERICS = {
    "same": "same",
    "changed": "CHANGED",
    "not-observed": "not observed",
    "inconclusive": "inconclusive",
}


def rows(doc: TryResult) -> list[dict[str, Any]]:
    """Display rows, one per result: strings only."""
    out = []
    for r in doc.results:
        num = r.numerics
        status = num.status if num is not None else None
        warn = []
        if r.failed:
            warn.append(f"failed: {r.failed}")
        if r.interrupted:
            warn.append(
                f"interrupted ({doc.interrupted or 'a signal'}): its runs did not all finish"
            )
        if num is not None and status in ("changed", "inconclusive"):
            warn.append(num.text)
        for fid, err in r.errors.items():
            warn.append(f"{fid}: patch error: {err}")
        if not r.acted and not r.failed and not r.interrupted:
            warn.append("the patch found nothing to change in this run")
        label = "all together" if r.label == "after" and len(r.fixes) > 1 else ", ".join(r.fixes)
        notes = [f"{k}: {v}" for c in r.counts.values() for k, v in c.items()]
        notes += [n for ns in r.notes.values() for n in ns]
        out.append(
            {
                "fix": label,
                "folder": r.label,
                "before_ms": _ms(r.before.median_ms),
                "after_ms": _ms(r.after.median_ms),
                "spread": _spread(r),
                "drift": _drift(r),
                "before": _step(r.before),
                "after": _step(r.after),
                "before_iqr": _iqr(r.before),
                "after_iqr": _iqr(r.after),
                "saving": _saving(r),
                "estimate": _estimate(r),
                "ratio": "–" if r.ratio is None else f"{r.ratio:.2f}",
                "verdict": r.verdict or "failed",
                "verdict_why": r.verdict_why or "",
                "numerics": _NUMERICS.get(status or "", "–"),
                "numerics_text": num.text if num is not None else "",
                "findings_after": ", ".join(f"{k}: {v}" for k, v in r.findings_after.items()),
                "warnings": warn,
                "notes": notes,
            }
        )
    return out


_COLUMNS = (
    ("fix", "fix"),
    ("before ms", "before_ms"),
    ("after ms", "after_ms"),
    ("saved ms", "saving"),
    ("estimate ms", "estimate"),
    ("ratio", "ratio"),
    ("verdict", "verdict"),
    ("numerics", "numerics"),
)


def print_try(doc: TryResult, files: dict[str, Any], file: TextIO | None = None) -> None:
    con = console(file, markup=False)  # names and messages print verbatim (printable)
    s = doc.settings
    con.print(f"advisor try · {printable(doc.script)} {printable(' '.join(doc.argv))}".rstrip())
    con.print(
        f"steps {s.wait}/{s.warmup}/{s.active} (wait/warmup/active), "
        f"{s.repeat} round(s); step ms: median of the steady steps in each window"
    )
    if doc.interrupted:
        con.print(
            f"interrupted by {doc.interrupted}: the results cover the runs that finished; "
            "the others are marked interrupted"
        )
    if doc.before.failed:
        con.print(f"the unchanged run failed: {printable(doc.before.failed)}")
    rs = rows(doc)
    if rs:
        t = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
        for i, (title, _) in enumerate(_COLUMNS):
            t.add_column(title, justify="left" if i in (0, 6, 7) else "right")
        for r in rs:
            t.add_row(*(Text(printable(r[key])) for _, key in _COLUMNS))
        con.print(t)
    for r in rs:
        con.print(f"{printable(r['fix'])}: {printable(r['spread'])}")
        if r["drift"]:
            con.print(f"{printable(r['fix'])}: {printable(r['drift'])}")
        if r["verdict_why"]:
            con.print(
                f"{printable(r['fix'])}: {printable(r['verdict'])}: {printable(r['verdict_why'])}"
            )
        for w in r["warnings"]:
            con.print(f"warning: {printable(r['fix'])}: {printable(w)}")
    for word, entries in (
        ("not applied", doc.skipped),
        ("not applicable to try", doc.not_applicable),
    ):
        for e in entries:
            con.print(f"{word}: {printable(e.id)}: {printable(e.reason)}")
    if not rs and not doc.before.failed and not doc.interrupted:
        con.print("no fix could be applied to this run: nothing was measured")
    for name, path in files.items():
        con.print(f"{name:>8}  {printable(str(path))}")
    if doc.diff_command:
        con.print(f"compare the runs: {printable(doc.diff_command)} (in the output folder)")


def render_html(doc: TryResult) -> str:
    from advisor.output.doctext import date_str
    from advisor.output.html import _asset, environment, now_str

    return (
        environment()
        .get_template("try.html.j2")
        .render(
            doc=doc,
            rows=rows(doc),
            css=_asset("report.css"),
            generated_at=now_str(),
            started_at=date_str(doc.started_at) if doc.started_at else "",
        )
    )
