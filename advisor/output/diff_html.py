"""``advisor diff --html FILE``: the comparison as one self-contained page (jinja2, autoescape
on, the report's CSS inlined, no script, no external URL), showing the rows of
:mod:`advisor.output.diff_view` that the terminal shows, in the same order."""

from __future__ import annotations

from typing import Any

from advisor import __version__
from advisor.output import diff_view as v


def view(d: dict[str, Any]) -> dict[str, Any]:
    """The page's rows (strings only) from the diff's dict."""
    e = d.get("explain")
    return {
        "a": d["a"],
        "b": d["b"],
        "verdict": d["verdict"],
        "workload": v.workload_lines(d),
        "steps": v.step_rows(d),
        "bound": v.bound_line(d),
        "one_time": v.one_time_lines(d),
        "runtime_changes": v.runtime_changes(d),
        "calls": v.call_rows(d),
        "copies": v.copy_rows(d),
        "kernels": _rows(d["kernels"]),
        "ops": _rows(d["ops"]),
        "explain": None
        if not e
        else {
            "intro": f"ms per step, {e['steps_compared']} step(s) compared: the lines add up to "
            f"{e['lines_sum_ms']:+.2f} ms, the change of the mean step (the median step "
            f"changed {e['step_delta_ms']:+.2f} ms)",
            "lines": [
                (
                    v.signed(x["delta_ms"]),
                    x["label"],
                    ", ".join(f"{f} {y:+.2f}" for f, y in (x.get("families") or {}).items()),
                )
                for x in e["lines"]
            ],
            "by_family": ", ".join(f"{x['family']} {x['delta_ms']:+.2f}" for x in e["by_family"]),
            "by_op": ", ".join(f"{x['op']} {x['delta_ms']:+.2f}" for x in e["by_op"]),
            "renamed": [(r["a"], r["b"], f"{r['per_step']:g}") for r in e["renamed"]],
        },
        "findings": [
            (title, [v.finding_line(key, x) for x in d["findings"][key]])
            for key, title in v.FINDING_SECTIONS
            if d["findings"][key]
        ],
        "still": [
            {
                "id": x["id"],
                "where": x["location"] or "",
                "severity": x["severity"]["b"],
                "ms": v.num(x["est_savings_ms"]["b"]),
                "change": x["change"],
                "summary": x["summary"],
            }
            for x in d["findings"].get("still_to_fix", [])
        ],
    }


def _rows(rows: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    return [
        (
            r["name"] + (f" (was {r['a_name']})" if r.get("a_name") else ""),
            f"{r['a_ms']:.2f}",
            f"{r['b_ms']:.2f}",
            v.signed(r["delta_ms"]),
            f"{r['a_count']:g}",
            f"{r['b_count']:g}",
        )
        for r in rows
    ]


def render_diff_html(d: dict[str, Any]) -> str:
    from advisor.output.html import _asset, environment, now_str

    return (
        environment()
        .get_template("diff.html.j2")
        .render(
            vm=view(d),
            css=_asset("report.css"),
            generated_at=now_str(),
            version=__version__,
            schema=d["schema_version"],
        )
    )
