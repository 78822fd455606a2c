"""Rendering of ``advisor try`` (the try.json document): a terminal table and try.html.

Both show the same rows, formatted by :func:`rows`: per fix the median step before and after
with its spread (interquartile range), the measured saving, the advisor's estimate and their
ratio, the verdict against the noise, the numerics check, and failures.
"""

from __future__ import annotations

from typing import Any, TextIO

from rich.table import Table
from rich.text import Text

from advisor.output.printable import printable
from advisor.output.terminal import console


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def _step(s: dict[str, Any]) -> str:
    if not s or s.get("median_ms") is None:
        return "–"
    return f"{s['median_ms']:.2f} [{s['p25_ms']:.2f}–{s['p75_ms']:.2f}]"


def _spread(r: dict[str, Any]) -> str:
    b, a = r.get("before") or {}, r.get("after") or {}
    if b.get("median_ms") is None or a.get("median_ms") is None:
        return "no steps to compare"
    return (
        f"before {_step(b)} ms over {b['steps']} steps, after {_step(a)} ms over "
        f"{a['steps']} steps (median [p25–p75]); noise ±{r.get('noise_ms') or 0:.2f} ms"
    )


def _saving(r: dict[str, Any]) -> str:
    ms, pct = r.get("measured_saving_ms"), r.get("measured_saving_pct")
    if ms is None:
        return "–"
    return f"{ms:+.2f}" + (f" ({pct:+.1f}%)" if pct is not None else "")


def _estimate(r: dict[str, Any]) -> str:
    if r.get("estimated_saving_ms") is None:
        return "no finding"
    pct = r.get("estimated_saving_pct")
    return f"{r['estimated_saving_ms']:.2f}" + (f" ({pct:.1f}%)" if pct is not None else "")


def rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Display rows, one per result: strings only."""
    out = []
    for r in doc.get("results", []):
        num = r.get("numerics") or {}
        status = num.get("status")
        warn = []
        if r.get("failed"):
            warn.append(f"failed: {r['failed']}")
        if status == "changed":
            warn.append(num["text"])
        elif status == "inconclusive":
            warn.append(num["text"])
        for fid, err in (r.get("errors") or {}).items():
            warn.append(f"{fid}: patch error: {err}")
        if not r.get("acted") and not r.get("failed"):
            warn.append("the patch found nothing to change in this run")
        label = (
            "all together"
            if r["label"] == "after" and len(r["fixes"]) > 1
            else ", ".join(r["fixes"])
        )
        notes = [f"{k}: {v}" for c in (r.get("counts") or {}).values() for k, v in c.items()]
        notes += [n for ns in (r.get("notes") or {}).values() for n in ns]
        out.append(
            {
                "fix": label,
                "folder": r["label"],
                "before_ms": _ms((r.get("before") or {}).get("median_ms")),
                "after_ms": _ms((r.get("after") or {}).get("median_ms")),
                "spread": _spread(r),
                "before": _step(r.get("before", {})),
                "after": _step(r.get("after", {})),
                "saving": _saving(r),
                "estimate": _estimate(r),
                "ratio": "–" if r.get("ratio") is None else f"{r['ratio']:.2f}",
                "verdict": r.get("verdict") or "failed",
                "numerics": {
                    "same": "same",
                    "changed": "CHANGED",
                    "not-observed": "not observed",
                    "inconclusive": "inconclusive",
                }.get(status or "", "–"),
                "numerics_text": num.get("text") or "",
                "findings_after": ", ".join(
                    f"{k}: {v}" for k, v in (r.get("findings_after") or {}).items()
                ),
                "warnings": warn,
                "notes": notes,
            }
        )
    return out


def print_try(doc: dict[str, Any], files: dict[str, Any], file: TextIO | None = None) -> None:
    con = console(
        file, markup=False
    )  # names and messages print verbatim (advisor.output.printable)
    s = doc["settings"]
    con.print(
        f"advisor try · {printable(doc['script'])} {printable(' '.join(doc['argv']))}".rstrip()
    )
    con.print(
        f"steps {s['wait']}/{s['warmup']}/{s['active']} (wait/warmup/active), "
        f"{s['repeat']} round(s); step ms: median of the steady steps in each window"
    )
    if doc["before"].get("failed"):
        con.print(f"the unchanged run failed: {printable(doc['before']['failed'])}")
    rs = rows(doc)
    if rs:
        t = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
        for i, c in enumerate(
            (
                "fix",
                "before ms",
                "after ms",
                "saved ms",
                "estimate ms",
                "ratio",
                "verdict",
                "numerics",
            )
        ):
            t.add_column(c, justify="left" if i in (0, 6, 7) else "right")
        for r in rs:
            t.add_row(
                *(
                    Text(printable(r[k]))
                    for k in (
                        "fix",
                        "before_ms",
                        "after_ms",
                        "saving",
                        "estimate",
                        "ratio",
                        "verdict",
                        "numerics",
                    )
                )
            )
        con.print(t)
    for r in rs:
        con.print(f"{printable(r['fix'])}: {printable(r['spread'])}")
        for w in r["warnings"]:
            con.print(f"warning: {printable(r['fix'])}: {printable(w)}")
    for k in ("skipped", "not_applicable"):
        for e in doc.get(k, []):
            word = "not applied" if k == "skipped" else "not applicable to try"
            con.print(f"{word}: {printable(e['id'])}: {printable(e['reason'])}")
    if not rs and not doc["before"].get("failed"):
        con.print("no fix could be applied to this run: nothing was measured")
    for name, path in files.items():
        con.print(f"{name:>8}  {printable(str(path))}")
    if doc.get("diff_command"):
        con.print(f"compare the runs: {printable(doc['diff_command'])} (in the output folder)")


def render_html(doc: dict[str, Any]) -> str:
    from advisor.output.html import _asset, environment, now_str

    return (
        environment()
        .get_template("try.html.j2")
        .render(
            doc=doc,
            rows=rows(doc),
            css=_asset("report.css"),
            generated_at=now_str(),
        )
    )
