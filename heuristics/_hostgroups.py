"""The rows of ``host-preprocessing``'s findings: quiet frames grouped by the user's line that
runs them and the frame doing the work, with the largest parts inside it; the user's lines;
how much the same work varies in the trace (``spread_of``: the threshold's band).
Shared by the finding's kinds (input, output, framework); not a detector."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from advisor.detect.registry import Context
from advisor.findings import MIN_STEPS_SEEN, Evidence, Location
from advisor.trace.model import Trace

from ._frameworks import Cause, known_cause
from ._per_step import fmt_ms
from ._preprocess import parent_rows


def short(name: str) -> str:
    """``pkg/mod.py(12): fn`` -> ``fn (pkg/mod.py:12)``."""
    head, sep, fn = name.partition("): ")
    if not sep or "(" not in head:
        return name
    file, _, line = head.rpartition("(")
    return f"{fn} ({file}:{line})"


_BUILTIN_RE = re.compile(
    r"^<built-in (?:method|function) (\w+)(?: of (.+?)(?: object at 0x[0-9a-f]+)?)?>$"
)


def brief(name: str) -> str:
    """``pkg/mod.py(12): fn`` -> ``fn (mod.py:12)``; ``<built-in method tobytes of
    numpy.ndarray object at 0x..>`` -> ``tobytes (numpy.ndarray)``."""
    b = _BUILTIN_RE.match(name)
    if b:
        return f"{b.group(1)} ({b.group(2)})" if b.group(2) else b.group(1)
    fn, sep, where = short(name).partition(" (")
    return f"{fn} ({where.rsplit('/', 1)[-1]}" if sep else fn


def children(py: pd.DataFrame) -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for child, par in enumerate(parent_rows(py).tolist()):
        if par >= 0:
            kids.setdefault(par, []).append(child)
    return kids


def _through_wrappers(kids: dict[int, list[int]], dur: np.ndarray, row: int) -> int:
    """Down from ``row`` while one child holds nine tenths of the frame (wrappers)."""
    while kids.get(row):
        big = max(kids[row], key=lambda c: dur[c])
        if dur[big] < 0.9 * dur[row]:
            break
        row = big
    return row


def parts(py: pd.DataFrame, kids: dict[int, list[int]], row: int, share: float = 0.05) -> list[int]:
    """The frames that do a frame's work: past its wrappers, the children above ``share`` of
    it, each past its own wrappers."""
    dur = py["dur_ns"].to_numpy()
    inner = _through_wrappers(kids, dur, row)
    out = []
    for c in sorted(kids.get(inner, []), key=lambda c: -dur[c]):
        if dur[c] < share * dur[row]:
            break
        out.append(_through_wrappers(kids, dur, c))
    return out


def cause_of(trace: Trace, q: pd.DataFrame) -> Cause | None:
    """The known framework cause (``_frameworks.CAUSES``) of the frames in ``q`` or the frames
    doing their work, weighted by time: the one holding the most."""
    py = trace.python
    files = py["file"].astype(str).to_numpy()
    funcs = py["function"].astype(str).to_numpy()
    dur = py["dur_ns"].to_numpy()
    kids = children(py)
    found: dict[Cause, int] = {}
    for r in q["row"].to_numpy().tolist():
        chain = [r, _through_wrappers(kids, dur, r), *parts(py, kids, r)]
        for c in dict.fromkeys(chain):
            cause = known_cause(files[c], funcs[c])
            if cause is not None:
                found[cause] = found.get(cause, 0) + int(dur[c])
                break
    return max(found, key=lambda c: found[c]) if found else None


def recurring(trace: Trace, q: pd.DataFrame) -> pd.DataFrame:
    """Preprocessing happens for every input: in a window of at least ``MIN_STEPS_SEEN``
    steady steps, a kind of frame (its name, under its caller's) found in fewer of them is a
    one-off (a first call, a hiccup of the host), not preprocessing, and is left out."""
    st = trace.steps
    if len(st) < MIN_STEPS_SEEN or not len(q):
        return q
    starts = np.sort(st["ts_ns"].to_numpy())
    step = np.searchsorted(starts, q["ts_ns"].to_numpy(), side="right") - 1
    names = trace.python["name"].astype(str).to_numpy()
    keys = [
        (brief(names[r]), names[p] if p >= 0 else "")
        for r, p in zip(q["row"].to_numpy(), q["parent_row"].to_numpy(), strict=True)
    ]
    seen: dict[tuple[str, str], set[int]] = {}
    for key, k in zip(keys, step.tolist(), strict=True):
        seen.setdefault(key, set()).add(k)
    return q[np.array([len(seen[key]) >= MIN_STEPS_SEEN for key in keys], dtype=bool)]


def _caller(trace: Trace, ctx: Context, row: int, parent: int) -> Location | None:
    """The user's line that runs frame ``row``: the innermost user frame enclosing it (for a
    user frame, its caller's line: the recorded call site, else the caller's running line)."""
    py = trace.python
    tid, ts = int(py["tid"].iloc[row]), int(py["ts_ns"].iloc[row])
    if not bool(py["is_user"].iloc[row]):
        return ctx.locator.at(tid, ts)
    line = int(py["call_line"].iloc[row])
    if line > 0 and parent >= 0:
        return Location(str(py["call_file"].iloc[row]), line, str(py["function"].iloc[parent]))
    return ctx.locator.at(tid, ts - 1)


def groups(
    trace: Trace,
    ctx: Context,
    q: pd.DataFrame,
    idle: np.ndarray,
    steps: int,
    step_ms: float,
) -> tuple[str, tuple[Evidence, ...], tuple[Location, ...]]:
    """The frames by (user line, frame doing the work), largest first: the summary's words,
    the evidence rows (each group, then the parts inside it) and the user lines."""
    py = trace.python
    names = py["name"].astype(str).to_numpy()
    dur = py["dur_ns"].to_numpy()
    pts = py["ts_ns"].to_numpy()
    rows = q["row"].to_numpy()
    locs = [_caller(trace, ctx, int(r), int(p)) for r, p in zip(rows, q["parent_row"], strict=True)]
    keys = [(f"{c.file}:{c.line}" if c else "?", names[r]) for c, r in zip(locs, rows, strict=True)]
    kids = children(py)
    grp: dict[tuple[str, str], dict] = {}
    for key, r, ns in zip(keys, rows, idle, strict=True):
        g = grp.setdefault(key, {"ns": 0, "n": 0, "ts": int(pts[r]), "parts": {}})
        g["ns"] += int(ns)
        g["n"] += 1
        for p in parts(py, kids, int(r)):
            part = g["parts"].setdefault(names[p], [0, int(pts[p]), 0])
            part[0] += int(dur[p])
            part[2] += 1
    order = sorted(grp.items(), key=lambda kv: -kv[1]["ns"])
    words, evidence = [], []
    for (user, frame), g in order[:4]:
        ms = g["ns"] / 1e6 / steps
        pct = 100.0 * ms / step_ms if step_ms > 0 else 0.0
        within = sorted(g["parts"].items(), key=lambda kv: -kv[1][0])
        inner = ", ".join(f"{brief(n)} {fmt_ms(v[0] / 1e6 / steps)}" for n, v in within)
        words.append(f"{brief(frame)} from {user} {fmt_ms(ms)}" + (f" ({inner})" if inner else ""))
        evidence.append(
            Evidence(
                f"{short(frame)}, called from {user}: {pct:.0f}% of the step",
                g["n"],
                round(g["ns"] / 1e6, 3),
                trace.to_trace_us(g["ts"]),
            )
        )
        evidence += [
            Evidence(
                f"  inside it: {short(n)}", v[2], round(v[0] / 1e6, 3), trace.to_trace_us(v[1])
            )
            for n, v in within
        ]
    best: dict[tuple[str, int], tuple[int, Location]] = {}
    for c, ns in zip(locs, idle, strict=True):
        if c is not None:
            prev = best.get((c.file, c.line), (0, c))[0]
            best[(c.file, c.line)] = (prev + int(ns), c)
    top = sorted(best.values(), key=lambda v: -v[0])
    return "; ".join(words), tuple(evidence[:8]), tuple(c for _, c in top[:5])


def spread_of(trace: Trace, q: pd.DataFrame, idle: np.ndarray) -> float:
    """How much the same work's figure varies in this trace, as a share of it: the half-range
    of the per-step figure over the steady steps; with one step, of the durations of the
    repeated calls of the same frame (by name), weighted by their time (0: no repeat)."""
    st = trace.steps
    starts = np.sort(st["ts_ns"].to_numpy())
    if len(starts) >= 2:
        step = np.searchsorted(starts, q["ts_ns"].to_numpy(), side="right") - 1
        ok = step >= 0
        per = np.bincount(step[ok], weights=idle[ok], minlength=len(starts))
        mean = float(per.mean())
        return float((per.max() - per.min()) / 2 / mean) if mean > 0 else 0.0
    names = trace.python["name"].astype(str).to_numpy()[q["row"].to_numpy()]
    dur = (q["end_ns"] - q["ts_ns"]).to_numpy().astype(float)
    df = pd.DataFrame({"name": names, "dur": dur})
    g = df.groupby("name")["dur"].agg(["min", "max", "mean", "sum", "size"])
    g = g[g["size"] >= 2]
    if not len(g) or g["sum"].sum() <= 0:
        return 0.0
    rel = (g["max"] - g["min"]) / 2 / g["mean"]
    return float((rel * g["sum"]).sum() / g["sum"].sum())
