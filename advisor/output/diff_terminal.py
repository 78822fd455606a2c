"""Terminal rendering of ``advisor diff`` (the dict from :func:`advisor.multirank.diff.diff_sides`)."""

from __future__ import annotations

from typing import Any, TextIO

from rich.table import Table

from advisor.output.printable import printable as p
from advisor.output.terminal import console

# the step breakdown's categories (advisor.derive.breakdown), as the diff table names them
CATEGORY_LABELS = {
    "dataloader": "dataloader (GPU idle while fetching)",
    "idle": "idle (other GPU idle)",
    "host_only": "host only (no GPU)",
}


def _short(name: str, width: int = 70) -> str:
    name = p(name)
    return name if len(name) <= width else name[: width - 3] + "..."


def _table(*cols: str) -> Table:
    t = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for i, c in enumerate(cols):
        t.add_column(c, justify="left" if i == 0 else "right")
    return t


def _signed(x: float | None, fmt: str = ".2f") -> str:
    return "–" if x is None else f"{x:+{fmt}}"


def print_diff(d: dict[str, Any], file: TextIO | None = None) -> None:
    con = console(file, markup=False)  # names print verbatim, control characters escaped
    a, b, st = d["a"], d["b"], d["step_ms_median"]
    con.print(f"A: {p(a['path'])} ({a['traces']} trace(s), {a['steps']} step(s))")
    con.print(f"B: {p(b['path'])} ({b['traces']} trace(s), {b['steps']} step(s))")
    con.print(p(d["verdict"]))
    t = _table("per step", "A ms", "B ms", "change ms")
    pct = f" ({_signed(st['delta_pct'], '.1f')}%)" if st["delta_pct"] is not None else ""
    t.add_row("median step", f"{st['a']:.2f}", f"{st['b']:.2f}", _signed(st["delta_ms"]) + pct)
    for cat, v in d["categories_ms"].items():
        if cat == "host_only" and v["a"] == v["b"] == 0:
            continue  # GPU traces: no step time without a GPU
        label = CATEGORY_LABELS.get(cat, cat)
        t.add_row(label, f"{v['a']:.2f}", f"{v['b']:.2f}", _signed(v["delta_ms"]))
    con.print(t)
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
                _signed(r["delta_ms"]),
                f"{r['a_count']:g}",
                f"{r['b_count']:g}",
            )
        con.print(t)
    if d.get("explain"):
        _print_explain(con, d["explain"])
    fd = d["findings"]
    for key, title in (
        ("resolved", "Resolved"),
        ("new", "New"),
        ("changed", "Changed"),
        ("unchanged", "Still there"),
    ):
        rows = fd[key]
        if not rows:
            continue
        con.print(f"{title} ({len(rows)}):")
        for e in rows:
            where = f" at {p(e['location'])}" if e["location"] else ""
            sa, sb = e["est_savings_ms"]["a"], e["est_savings_ms"]["b"]
            sev = e["severity"]
            if key == "resolved":
                figs = f"was {sev['a']}, {sa:.2f} ms/step"
            elif key == "new":
                figs = f"{sev['b']}, {sb:.2f} ms/step"
            else:
                figs = f"{sev['a']} -> {sev['b']}, {sa:.2f} -> {sb:.2f} ms/step"
            con.print(f"  {p(e['id'])}{where}: {figs}")


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
        t.add_row(_signed(line["delta_ms"]), _short(line["label"], 110))
        parts = ", ".join(f"{f} {v:+.2f}" for f, v in (line.get("families") or {}).items())
        if parts:
            t.add_row("", f"  {p(parts)}")
    if small:
        total = sum(x["delta_ms"] for x in small)
        t.add_row(_signed(total, ".3f"), f"{len(small)} line(s) under 0.005 ms each")
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
