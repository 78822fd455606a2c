"""Which host-device syncs a fix can remove. Shared by sync-point and blocking-copy; not a
detector.

Each sync event of :func:`._syncs.sync_events` gets a role:

- ``harness``: made by the measuring harness, not by the program (see
  :mod:`advisor.derive.harness`): inside torch.profiler's own start/stop frames, or an explicit
  ``synchronize()`` that comes before the first GPU work launched in the steady steps or after
  the last one (the timing syncs a benchmark puts around the repeated call). Left out of every
  saving, with a note.
- ``result``: the read of a call's result, which the host needs. Evidence, all of it: the event
  reads data back (``.cpu()``/``.item()``/``.tolist()``..., not a bare ``synchronize()``); it is
  the last sync of its step; no GPU work is launched after it in that step (the GPU work it
  waited for is the step's last); and the step is an inference call (no backward, no optimizer
  step: a training step's product stays on the GPU, so a read there is a metric that can be
  read less often). Removing the wait is not a fix here: the host needs the values. What a fix
  can realise is overlap: launch the next call's GPU work before working on this result, so the
  host work after the read (``post_ns``: from the read's end to the step's end) runs while the
  GPU computes. Its value is ``overlap_ns = min(post_ns, wait_ns)``, and it needs a next call:
  it is claimed only when such reads end at least two steady steps.
- ``remove``: every other sync: the wait a fix removes (replayed with the sync dropped).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from advisor.arrays import unique_ints
from advisor.derive.harness import harness_syncs, in_harness, launch_calls
from advisor.findings import MIN_STEPS_SEEN
from advisor.trace.model import Trace

from ._ops import in_backward
from ._per_step import fmt_ms
from ._syncs import sync_events

DATA_KINDS = ("to_cpu", "item")  # syncs that read values back for the host to use


def sync_roles(trace: Trace) -> pd.DataFrame:
    """Per row of :func:`sync_events` (same index): ``role``, ``post_ns``, ``overlap_ns``."""
    return trace.memo("sync_roles.roles", lambda: _roles(trace))


def training_steps(trace: Trace) -> set[int]:
    """Steps holding backward work or an optimizer step."""
    ops = trace.cpu_ops
    out: set[int] = set()
    if len(ops):
        step = ops["step"].to_numpy()
        out |= set(unique_ints(step[in_backward(trace) & (step >= 0)]).tolist())
    ann = trace.annotations
    if len(ann) and "step" in ann:
        opt = ann["name"].astype(str).str.startswith("Optimizer.").to_numpy()
        out |= set(unique_ints(ann["step"].to_numpy()[opt]).tolist())
    return {int(s) for s in out if s >= 0}


def _roles(trace: Trace) -> pd.DataFrame:
    ev = sync_events(trace)
    out = pd.DataFrame(
        {"role": "remove", "post_ns": 0, "overlap_ns": 0}, index=ev.index, dtype=object
    )
    if not len(ev):
        return out.astype({"post_ns": np.int64, "overlap_ns": np.int64})
    start, end = ev["start_ns"].to_numpy(), ev["end_ns"].to_numpy()
    kind = ev["kind"].astype(str).to_numpy()
    harness = in_harness(trace, ev["tid"].to_numpy(), start)
    harness |= harness_syncs(trace)[ev["rt_idx"].to_numpy(np.int64)] & np.char.startswith(
        kind.astype(str), "explicit"
    )
    l_ts = trace.runtime["ts_ns"].to_numpy()[launch_calls(trace)]
    role = np.where(harness, "harness", "remove").astype(object)

    steps = trace.steps.set_index("step")["end_ns"] if len(trace.steps) else pd.Series()
    train = training_steps(trace)
    step = ev["step"].to_numpy()
    post = np.zeros(len(ev), dtype=np.int64)
    live = ~harness
    for s in unique_ints(step[live]):
        if s < 0 or int(s) in train or int(s) not in steps.index:
            continue
        idx = np.flatnonzero(live & (step == s))
        last = idx[np.argmax(start[idx])]
        if kind[last] not in DATA_KINDS:
            continue
        s_end = int(steps.loc[int(s)])
        later = (l_ts >= end[last]) & (l_ts < s_end)
        if later.any():
            continue  # the host goes on to queue GPU work: not the call's final read
        role[last] = "result"
        post[last] = max(0, s_end - int(end[last]))
    out["role"] = role
    out["post_ns"] = post
    out["overlap_ns"] = np.minimum(post, ev["wait_ns"].to_numpy(np.int64))
    return out.astype({"post_ns": np.int64, "overlap_ns": np.int64})


def event_runtime_rows(trace: Trace, ev: pd.DataFrame) -> list[np.ndarray]:
    """Per sync event: the rows of ``trace.runtime`` inside it (same thread, within its span)."""
    rt = trace.runtime
    ts, tid = rt["ts_ns"].to_numpy(), rt["tid"].to_numpy()
    order = np.argsort(ts, kind="stable")
    sts = ts[order]
    out = []
    for s, e, t in zip(
        ev["start_ns"].to_numpy(), ev["end_ns"].to_numpy(), ev["tid"].to_numpy(), strict=True
    ):
        rows = order[np.searchsorted(sts, s, "left") : np.searchsorted(sts, e, "right")]
        out.append(rows[tid[rows] == t])
    return out


@dataclass(frozen=True)
class ResultReads:
    """The reads of a call's result among some sync events: how many, what is claimed for
    them per step (their overlap; 0 with fewer than two steps holding one), and the words."""

    n: int
    claimed_ms: float
    sentence: str
    assumption: str


def result_reads(trace: Trace, ev: pd.DataFrame) -> ResultReads:
    """:class:`ResultReads` of the ``result`` events ``ev`` (rows of :func:`sync_events`)."""
    if not len(ev):
        return ResultReads(0, 0.0, "", "")
    roles = sync_roles(trace).loc[ev.index]
    steps = max(1, len(trace.steps))
    wait_ms = float(ev["wait_ns"].sum()) / 1e6 / steps
    post_ms = float(roles["post_ns"].sum()) / 1e6 / steps
    over_ms = float(roles["overlap_ns"].sum()) / 1e6 / steps
    seen = int(ev["step"].nunique())
    recurs = seen >= MIN_STEPS_SEEN
    claimed = over_ms if recurs else 0.0
    n = len(ev)
    head = (
        f"The read that ends {'each call' if n > 1 else 'the call'} waits "
        f"{fmt_ms(wait_ms)} per step for the call's GPU work and returns its result, which "
        f"the host uses next: that wait is necessary."
    )
    if recurs:
        tail = (
            f" Launching the next call before working on the result would overlap the "
            f"{fmt_ms(post_ms)} of host work after the read with the next call's GPU work: "
            f"{fmt_ms(claimed)} per step counted."
        )
    else:
        tail = (
            f" The {fmt_ms(post_ms)} of host work after it could overlap a next call's GPU "
            f"work, but the window holds one call: cannot tell whether it recurs, so no "
            f"saving is claimed for it."
        )
    assumption = (
        "A read of values back to the host (.cpu(), .item(), .tolist()...) that is the last "
        "sync of an inference step (no backward, no optimizer step), with no GPU work launched "
        "after it in the step, returns the call's result: it is kept as necessary and valued "
        "only at what could overlap, min(host time from the read to the step's end, its "
        f"wait), and only when such reads end at least {MIN_STEPS_SEEN} steady steps (here "
        f"{seen})."
    )
    return ResultReads(n, round(claimed, 3), head + tail, assumption)


def harness_note(n: int, wait_ms: float) -> str:
    """The assumption line for the harness's syncs left out of a finding."""
    return (
        f"{n} sync(s) made by the measuring harness (torch.profiler starting or stopping, or "
        f"timing syncs before the first or after the last GPU work of the window; "
        f"{fmt_ms(wait_ms)} per step) are left out: removing them changes the measurement, "
        "not the program."
    )
