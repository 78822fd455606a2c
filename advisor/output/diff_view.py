"""What ``advisor diff`` shows, as text and table rows (strings only), from the dict of
:func:`advisor.multirank.diff.diff_sides`: the terminal (:mod:`advisor.output.diff_terminal`)
and the HTML page (:mod:`advisor.output.diff_html`) show the same rows, in the same order: the
workload first, the steps (measured, steady, by category), the bound, the one-time work, the
runtime calls, the kernels and ops, why the step changed, and the findings.
"""

from __future__ import annotations

from typing import Any

from advisor.derive.onetime import LABELS
from advisor.output.header import BOUND_LABELS

# the step breakdown's categories (advisor.derive.breakdown), as the diff table names them
CATEGORY_LABELS = {
    "dataloader": "dataloader (GPU idle while fetching)",
    "idle": "idle (other GPU idle)",
    "host_only": "host only (no GPU)",
}
KIND_LABELS = {
    "sync": "sync",
    "launch": "kernel launch",
    "graph-launch": "graph launch",
    "alloc": "allocator",
    "copy": "copy call",
}
FINDING_SECTIONS = (
    ("resolved", "Resolved"),
    ("new", "New"),
    ("changed", "Changed"),
    ("unchanged", "Unchanged"),
)


def signed(x: float | None, fmt: str = ".2f") -> str:
    return "–" if x is None else f"{x:+{fmt}}"


def num(x: float | None, fmt: str = ".2f") -> str:
    return "–" if x is None else f"{x:{fmt}}"


def step_rows(d: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(label, A ms, B ms, change) for the median step, the steady step when one-time work
    held either run's steps, and each category of the step breakdown."""
    st = d["step_ms_median"]
    pct = f" ({signed(st['delta_pct'], '.1f')}%)" if st["delta_pct"] is not None else ""
    rows = [("median step", num(st["a"]), num(st["b"]), signed(st["delta_ms"]) + pct)]
    steady = d.get("steady_step_ms")
    once = d.get("one_time") or {}
    if steady and once.get("kept_out"):
        p2 = f" ({signed(steady['delta_pct'], '.1f')}%)" if steady["delta_pct"] is not None else ""
        rows.append(
            (
                "steady step (one-time work out)",
                num(steady["a"]),
                num(steady["b"]),
                signed(steady["delta_ms"]) + p2,
            )
        )
    for cat, v in d["categories_ms"].items():
        if cat == "host_only" and v["a"] == v["b"] == 0:
            continue  # GPU traces: no step time without a GPU
        rows.append(
            (CATEGORY_LABELS.get(cat, cat), num(v["a"]), num(v["b"]), signed(v["delta_ms"]))
        )
    return rows


def workload_lines(d: dict[str, Any]) -> list[str]:
    """The workload, when the runs computed different things (shown before any attribution)."""
    w = d.get("workload")
    if not w or not w["differs"]:
        return []
    out = [f"{w['text'][0].upper()}{w['text'][1:]}."]
    for c in w["ops"][1:4]:
        out.append(f"  {c['op']} [{c['a']}] -> [{c['b']}]")
    n = w["normalised"]
    if n:
        out.append(
            f"  Per {n['unit']}: A {num(n['a_ms'], '.3f')} ms, B {num(n['b_ms'], '.3f')} ms"
            + (f" ({signed(n['delta_pct'], '.1f')}%)" if n.get("delta_pct") is not None else "")
        )
    else:
        out.append("  The steps do different work: their times are not a like-for-like change.")
    return out


def bound_line(d: dict[str, Any]) -> str | None:
    b = d.get("bound")
    if not b or not (b["a"] or b["b"]):
        return None

    def side(s: str) -> str:
        by, sh = b[s], b[f"{s}_shares_pct"] or {}
        if by is None:
            return "unknown"
        return f"{BOUND_LABELS.get(by, by)} {sh.get(by, 0):.0f}% of the critical path"

    flip = " (flipped)" if b["flipped"] else ""
    return f"Bound by: A {side('a')}; B {side('b')}{flip}"


def one_time_lines(d: dict[str, Any]) -> list[str]:
    once = d.get("one_time")
    if not once:
        return []
    out = []
    for s in ("a", "b"):
        o = once[s]
        kinds = ", ".join(f"{LABELS.get(k, k)} {v:.2f} ms" for k, v in o["by_kind_ms"].items())
        if kinds:
            kept = (
                "kept out of the steady step"
                if once["kept_out"]
                else "under 1% of the step: the headline keeps the measured step"
            )
            out.append(
                f"{s.upper()}: one-time work inside its steps ({kinds}); with the GPU idle it "
                f"held the step {o['held_ms_per_step']:.2f} ms per step ({kept})"
            )
        for x in o["excluded"]:
            step = f"step {x['step']}" if x["step"] is not None else "time outside the steps"
            out.append(f"{s.upper()}: {step} left out ({num(x['ms'])} ms): {x['reason']}")
    return out


def call_rows(d: dict[str, Any]) -> list[tuple[str, ...]]:
    """(kind, call, A per step, B per step, A host ms, B host ms)."""
    rt = d.get("runtime")
    if not rt:
        return []
    return [
        (
            KIND_LABELS.get(c["kind"], c["kind"]),
            c["name"],
            f"{c['a']['count']:g}",
            f"{c['b']['count']:g}",
            num(c["a"]["host_ms"]),
            num(c["b"]["host_ms"]),
        )
        for c in rt["calls"]
    ]


def copy_rows(d: dict[str, Any]) -> list[tuple[str, ...]]:
    """(copy, A per step, B per step, A GB/s, B GB/s, A % under compute, B %, A host ms,
    B host ms)."""
    rt = d.get("runtime")
    if not rt:
        return []
    out: list[tuple[str, ...]] = []
    for c in rt["copies"]:
        a, b = c["a"] or {}, c["b"] or {}
        out.append(
            (
                f"{c['kind']} {c['src']} -> {c['dst']}",
                f"{a.get('count', 0):g}",
                f"{b.get('count', 0):g}",
                num(a.get("gbps"), ".1f"),
                num(b.get("gbps"), ".1f"),
                num(a.get("overlap_pct"), ".0f"),
                num(b.get("overlap_pct"), ".0f"),
                num(a.get("host_ms")),
                num(b.get("host_ms")),
            )
        )
    return out


def runtime_changes(d: dict[str, Any]) -> list[str]:
    rt = d.get("runtime")
    return list(rt["changes"]) if rt else []


def finding_line(key: str, e: dict[str, Any]) -> str:
    """One finding of a section: id, place, severity and figures, what changed."""
    where = f" at {e['location']}" if e["location"] else ""
    if e.get("a_location"):
        where += f" (A: {e['a_location']})"
    sa, sb = e["est_savings_ms"]["a"], e["est_savings_ms"]["b"]
    sev = e["severity"]
    if key == "resolved":
        figs = f"was {sev['a']}, {num(sa)} ms/step"
    elif key == "new":
        figs = f"{sev['b']}, {num(sb)} ms/step"
    else:
        figs = f"{sev['a'] or 'not reported'} -> {sev['b'] or 'not reported'}, {e['change']}"
    under = e.get("listed_under") or {}
    for s in ("a", "b"):
        if under.get(s):
            figs += f"; listed under {under[s]} in {s.upper()}"
    return f"{e['id']}{where}: {figs}"


def still_line(e: dict[str, Any]) -> tuple[str, str]:
    """A finding still to fix: its id, place, severity, saving and change; and its summary."""
    where = f" at {e['location']}" if e["location"] else ""
    head = (
        f"{e['id']}{where}: {e['severity']['b']}, {num(e['est_savings_ms']['b'])} ms/step "
        f"({e['change']})"
    )
    return head, e["summary"]
