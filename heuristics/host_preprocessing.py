"""Preprocessing (or other host work) inside the step while the GPU has nothing to do.

**What it detects.** Python frames inside the steps that run for at least
``host_preprocessing.min_frame_ms`` without launching any GPU work (no kernel launch, copy,
memset or sync starts inside them; see ``heuristics/_preprocess.py``), during the time the main
GPU is idle: decoding images or video, tokenizing, resizing and normalizing with PIL or NumPy,
an image processor, building the batch in Python. They are grouped by the user's frame that
calls them and the library frame doing the work, with the largest parts inside it (a decode,
an image processor, ``np.array``). On a CPU run, frames that run none of the model's operators
(no autograd-recording op, no backward, nothing under an ``nn.Module`` or optimizer step) count
the same way. Time inside a ``DataLoader`` fetch is ``dataloader-stall``'s, not this finding's.
Preprocessing happens for every input: with two or more steady steps, a frame (by name, under
its caller) found in only one of them is a one-off and is not counted.
Torch's own machinery around the model (the optimizer's step wrapper, torch.compile's
wrappers) is never counted, even when it runs quiet for a while (a lazy import on first use).
Needs a trace with Python stacks (``with_stack=True``, which ``advisor profile`` records).

**Why it costs time.** The GPU waits while the host prepares the next input: the step takes
the preprocessing time plus the model time instead of the larger of the two. ``gpu-idle``
lists this share as *preprocessing*, not as waiting for launches.

**How the saving is estimated.** The steady steps are replayed (see docs/savings.md) with the
frames' host time cut to ``host_preprocessing.keep`` of itself (what stays on the step's
thread once the work runs in DataLoader workers or overlaps the GPU: receiving and collating
the batch); the range keeps none of it to half of it. The saving is what the step loses in the
replay. Without GPU work (a CPU run) the saving is the frames' time per step times
``1 - host_preprocessing.keep``.

**How to fix.** Run the preprocessing in ``DataLoader`` workers (``num_workers > 0``,
``persistent_workers=True``, ``prefetch_factor``) so it overlaps the GPU; preprocess on the GPU
(``torchvision.transforms.v2`` on tensors on the device, a fast image processor with
``use_fast=True`` and ``device="cuda"``, GPU video decoding); batch requests so one call
prepares many items; or prepare the next item on a background thread while the GPU runs the
current one.

**Known false positives.** Host work that must happen between steps (logging, checkpoint
saving, metrics on the CPU) looks the same; the frames named say which it is.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from advisor.derive.timeline import busy_by_device, covered_by, main_device, subtract, union
from advisor.detect.registry import Context, Skip, detector
from advisor.detect.thresholds import register
from advisor.findings import MIN_STEPS_SEEN, Draft, Evidence, Location
from advisor.replay.fixes import ShrinkHost
from advisor.trace.model import Trace

from ._per_step import fmt_ms, n_steps
from ._preprocess import allowed_spans, parent_rows, quiet_frames

ID = "host-preprocessing"
TITLE = "Preprocessing on the host inside the step, GPU idle"

register(
    "host_preprocessing.min_pct",
    5.0,
    "report when such host work keeps the GPU idle this % of the median step",
)
register(
    "host_preprocessing.keep",
    0.25,
    "share of the host work that stays on the step's thread once moved to workers",
)

SNIPPET = """\
# prepare inputs in worker processes, overlapping the GPU
loader = DataLoader(items, batch_size=bs, num_workers=4, persistent_workers=True,
                    prefetch_factor=2, pin_memory=True, collate_fn=preprocess_batch)
for batch in loader:
    out = model(batch.to("cuda", non_blocking=True))
# or on the GPU: torchvision.transforms.v2 on device tensors, use_fast=True image processors"""


def _short(name: str) -> str:
    """``pkg/mod.py(12): fn`` -> ``fn (pkg/mod.py:12)``."""
    head, sep, fn = name.partition("): ")
    if not sep or "(" not in head:
        return name
    file, _, line = head.rpartition("(")
    return f"{fn} ({file}:{line})"


_BUILTIN_RE = re.compile(
    r"^<built-in (?:method|function) (\w+)(?: of (.+?)(?: object at 0x[0-9a-f]+)?)?>$"
)


def _brief(name: str) -> str:
    """``pkg/mod.py(12): fn`` -> ``fn (mod.py:12)``; ``<built-in method tobytes of
    numpy.ndarray object at 0x..>`` -> ``tobytes (numpy.ndarray)``."""
    b = _BUILTIN_RE.match(name)
    if b:
        return f"{b.group(1)} ({b.group(2)})" if b.group(2) else b.group(1)
    fn, sep, where = _short(name).partition(" (")
    return f"{fn} ({where.rsplit('/', 1)[-1]}" if sep else fn


def _children(py: pd.DataFrame) -> dict[int, list[int]]:
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


def _parts(
    py: pd.DataFrame, kids: dict[int, list[int]], row: int, share: float = 0.05
) -> list[int]:
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


@detector(ID, TITLE, needs=("stack", "steps"))
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    py = trace.python
    if not len(py):
        raise Skip("no python_function events (the legacy Call stack has no frame durations)")
    q = quiet_frames(trace)
    q = q[(q["end_ns"] - q["ts_ns"]).to_numpy() >= ctx.t("host_preprocessing.min_frame_ms") * 1e6]
    q = _recurring(trace, q)
    if not len(q):
        return []
    al_s, al_e = allowed_spans(trace)
    dev = main_device(trace) if trace.has_gpu else None
    if dev is not None:
        busy = busy_by_device(trace)[dev]
        al_s, al_e = subtract(al_s, al_e, busy.starts, busy.ends)
    ts, end = q["ts_ns"].to_numpy(), q["end_ns"].to_numpy()
    idle = covered_by(al_s, al_e, ts, end)  # per frame
    fs, fe = union(ts, end)  # frames of several threads at once count once
    steps = n_steps(trace)
    per_step_ms = float(covered_by(al_s, al_e, fs, fe).sum()) / 1e6 / steps
    step_ms = ctx.step_ms_median
    share = 100.0 * per_step_ms / step_ms if step_ms > 0 else 0.0
    if share < ctx.t("host_preprocessing.min_pct"):
        return []

    keep = ctx.t("host_preprocessing.keep")
    tids = q["tid"].to_numpy()
    rep = ctx.whatif(
        ShrinkHost(ts, end, tids, keep=keep, low=0.5, high=0.0, label="preprocessing off the step")
    )
    if rep.replayed and dev is not None:
        fields = rep.draft_fields()
        how = rep.assumption
    else:
        mid = per_step_ms * (1 - keep)
        fields = {
            "est_savings_ms": round(mid, 3),
            "est_savings_range_ms": (round(per_step_ms * 0.5, 3), round(per_step_ms, 3)),
        }
        how = (
            f"Not replayed (no GPU work the replay can place): {1 - keep:g} of the frames' time "
            f"per step ({fmt_ms(per_step_ms)}) is the saving (range: half of it to all of it)."
        )
    groups, evidence, locs = _groups(trace, ctx, q, idle, steps, step_ms)
    what = (
        "host work that launches nothing while the GPU idles"
        if dev is not None
        else "host work outside the model (no model operator runs meanwhile)"
    )
    summary = f"{fmt_ms(per_step_ms)} per step ({share:.0f}% of the step) is {what}: {groups}."
    return [
        Draft(
            id=ID,
            title=TITLE,
            **{k: v for k, v in fields.items() if k != "extra"},
            confidence="medium" if dev is not None else "low",
            summary=summary,
            recommendation=(
                "Take the preprocessing out of the step: run it in DataLoader workers "
                "(num_workers > 0, persistent_workers, prefetch_factor) so it overlaps the GPU; "
                "or preprocess on the GPU (torchvision.transforms.v2 on device tensors, a fast "
                'image processor with use_fast=True and device="cuda", GPU video decoding); '
                "batch requests so one call prepares many items; or prepare the next item on a "
                "background thread while the GPU runs the current one."
            ),
            snippet=SNIPPET,
            evidence=evidence,
            locations=locs,
            assumptions=(
                "Counted: the outermost Python frames of at least "
                f"{ctx.t('host_preprocessing.min_frame_ms'):g} ms inside the steps that start no "
                "kernel launch, copy, memset or sync (on a CPU run: no model operator), outside "
                "DataLoader fetches"
                + (", while the main GPU ran nothing." if dev is not None else "."),
                f"Moved to workers or overlapped, {keep:g} of their host time stays on the step's "
                "thread (receiving and collating the batch); range: none to half. " + how,
            ),
            extra={**fields.get("extra", {}), "host_ms_per_step": round(per_step_ms, 3)},
        )
    ]


def _recurring(trace: Trace, q: pd.DataFrame) -> pd.DataFrame:
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
        (_brief(names[r]), names[p] if p >= 0 else "")
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


def _groups(
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
    kids = _children(py)
    groups: dict[tuple[str, str], dict] = {}
    for key, r, ns in zip(keys, rows, idle, strict=True):
        g = groups.setdefault(key, {"ns": 0, "n": 0, "ts": int(pts[r]), "parts": {}})
        g["ns"] += int(ns)
        g["n"] += 1
        for p in _parts(py, kids, int(r)):
            part = g["parts"].setdefault(names[p], [0, int(pts[p]), 0])
            part[0] += int(dur[p])
            part[2] += 1
    order = sorted(groups.items(), key=lambda kv: -kv[1]["ns"])
    words, evidence = [], []
    for (user, frame), g in order[:4]:
        ms = g["ns"] / 1e6 / steps
        pct = 100.0 * ms / step_ms if step_ms > 0 else 0.0
        parts = sorted(g["parts"].items(), key=lambda kv: -kv[1][0])
        inner = ", ".join(f"{_brief(n)} {fmt_ms(v[0] / 1e6 / steps)}" for n, v in parts)
        words.append(f"{_brief(frame)} from {user} {fmt_ms(ms)}" + (f" ({inner})" if inner else ""))
        evidence.append(
            Evidence(
                f"{_short(frame)}, called from {user}: {pct:.0f}% of the step",
                g["n"],
                round(g["ns"] / 1e6, 3),
                trace.to_trace_us(g["ts"]),
            )
        )
        evidence += [
            Evidence(
                f"  inside it: {_short(n)}", v[2], round(v[0] / 1e6, 3), trace.to_trace_us(v[1])
            )
            for n, v in parts
        ]
    best: dict[tuple[str, int], tuple[int, Location]] = {}
    for c, ns in zip(locs, idle, strict=True):
        if c is not None:
            prev = best.get((c.file, c.line), (0, c))[0]
            best[(c.file, c.line)] = (prev + int(ns), c)
    top = sorted(best.values(), key=lambda v: -v[0])
    return "; ".join(words), tuple(evidence[:8]), tuple(c for _, c in top[:5])
