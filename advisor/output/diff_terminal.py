"""Terminal rendering of ``advisor diff`` (the dict from :func:`advisor.multirank.diff.diff_sides`;
the rows from :mod:`advisor.output.diff_view`, which the HTML page shows too)."""

from __future__ import annotations

from typing import Any, TextIO

from rich.table import Table

from advisor.output import diff_view as v
from advisor.output.printable import printable as p
from advisor.output.terminal import console


def _short(name: str, width: int = 70) -> str:
    name = p(name)
    return name if len(name) <= width else name[: width - 3] + "..."


def _table(*cols: str) -> Table:
    t = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for i, c in enumerate(cols):
        t.add_column(c, justify="left" if i == 0 else "right")
    return t


def print_diff(d: dict[str, Any], file: TextIO | None = None) -> None:
    con = console(file, markup=False)  # names print verbatim, control characters escaped
    a, b = d["a"], d["b"]
    con.print(f"A: {p(a['path'])} ({a['traces']} trace(s), {a['steps']} step(s))")
    con.print(f"B: {p(b['path'])} ({b['traces']} trace(s), {b['steps']} step(s))")
    con.print(p(d["verdict"]))
    for line in v.workload_lines(d):
        con.print(p(line))
    t = _table("per step", "A ms", "B ms", "change ms")
    for row in v.step_rows(d):
        t.add_row(*row)
    con.print(t)
    bound = v.bound_line(d)
    if bound:
        con.print(p(bound))
    for line in v.one_time_lines(d):
        con.print(p(line))
    for key, title in (("kernels", "GPU kernels"), ("ops", "CPU ops and ranges")):
        rows = d[key]
        if not rows:
            continue
        con.print(f"{title} whose time per step changed most:")
        t = _table("name", "A ms", "B ms", "change ms", "A count", "B count")
        for r in rows:
            label = r["name"] + (f" (was {r['a_name']})" if r.get("a_name") else "")
            t.add_row(
                _short(label),
                f"{r['a_ms']:.2f}",
                f"{r['b_ms']:.2f}",
                v.signed(r["delta_ms"]),
                f"{r['a_count']:g}",
                f"{r['b_count']:g}",
            )
        con.print(t)
    if d.get("explain"):
        _print_explain(con, d["explain"])
    _print_runtime(con, d)
    _print_findings(con, d["findings"])


def _print_runtime(con: Any, d: dict[str, Any]) -> None:
    changes = v.runtime_changes(d)
    calls, copies = v.call_rows(d), v.copy_rows(d)
    if not (changes or calls or copies):
        return
    con.print(
        "What the runtime calls say (per step, A -> B):" if changes else "Runtime calls per step:"
    )
    for c in changes:
        con.print(f"  {p(c)}")
    if calls:
        t = _table("call", "kind", "A /step", "B /step", "A host ms", "B host ms")
        for kind, name, *rest in calls:
            t.add_row(_short(name, 50), kind, *rest)
        con.print(t)
    if copies:
        t = _table(
            "copies",
            "A /step",
            "B /step",
            "A GB/s",
            "B GB/s",
            "A % hidden",
            "B % hidden",
            "A host ms",
            "B host ms",
        )
        for row in copies:
            t.add_row(*row)
        con.print(t)


def _print_findings(con: Any, fd: dict[str, Any]) -> None:
    for key, title in v.FINDING_SECTIONS:
        rows = fd[key]
        if not rows:
            continue
        con.print(f"{title} ({len(rows)}):")
        for e in rows:
            con.print(f"  {p(v.finding_line(key, e))}")
    left = fd.get("still_to_fix") or []
    con.print(
        f"Still to fix ({len(left)}):" if left else "Still to fix: nothing above information."
    )
    for e in left:
        head, summary = v.still_line(e)
        con.print(f"  {p(head)}")
        con.print(f"    {p(summary)}")


def _print_explain(con: Any, e: dict[str, Any]) -> None:
    """The ``explain`` block: the net attribution, then by family, by launching op, renames."""
    con.print(
        f"Why the step changed (ms per step, {e['steps_compared']} step(s) compared): the lines "
        f"add up to {e['lines_sum_ms']:+.2f} ms, the change of the mean step (the median "
        f"step changed {e['step_delta_ms']:+.2f} ms):"
    )
    t = _table("change ms", "where")
    t.columns[0].justify = "right"
    t.columns[1].justify = "left"
    small = [x for x in e["lines"] if abs(x["delta_ms"]) < 0.005]
    for line in e["lines"]:
        if abs(line["delta_ms"]) < 0.005:
            continue
        t.add_row(v.signed(line["delta_ms"]), _short(line["label"], 110))
        parts = ", ".join(f"{f} {x:+.2f}" for f, x in (line.get("families") or {}).items())
        if parts:
            t.add_row("", f"  {p(parts)}")
    if small:
        total = sum(x["delta_ms"] for x in small)
        t.add_row(v.signed(total, ".3f"), f"{len(small)} line(s) under 0.005 ms each")
    con.print(t)
    fams = ", ".join(f"{x['family']} {x['delta_ms']:+.2f}" for x in e["by_family"])
    if fams:
        con.print(f"By kernel family: {p(fams)}")
    ops = ", ".join(f"{_short(x['op'], 40)} {x['delta_ms']:+.2f}" for x in e["by_op"])
    if ops:
        con.print(f"By launching op: {ops}")
    if e["renamed"]:
        con.print(f"Renamed kernels paired ({len(e['renamed'])}):")
        for r in e["renamed"][:5]:
            con.print(f"  {_short(r['a'], 60)} -> {_short(r['b'], 60)} ({r['per_step']:g}/step)")
