"""The replay by scans along chains (advisor.replay.scan) gives the event loop's times exactly.

Built traces of every bottleneck shape in test_replay.py, each with every kind of fix (whole
steps' worth of kernels faster or gone, host time shrunk, syncs dropped, copies made
asynchronous, CUDA graphs, hidden communication, all at once), full and one-step replays; and,
as a slow test, every fix the detectors replay on every shared trace.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from advisor.replay import engine, whatif
from advisor.replay.engine import Mods, Replayed, replay, replay_loop
from advisor.replay.fixes import (
    AsyncCopies,
    Combined,
    DropSyncs,
    Fix,
    GraphLaunch,
    HideComm,
    ScaleGpu,
    ShrinkHost,
)
from advisor.replay.model import Graph, graph
from advisor.replay.scan import scan
from advisor.replay.scanplan import plan
from advisor.trace.model import Trace
from tests import test_replay as shapes
from tests.conftest import SHARED

BUILT: dict[str, Callable[[], Any]] = {
    "host_bound": shapes.host_bound,
    "gpu_bound": shapes.gpu_bound,
    "sync_bound": shapes.sync_bound,
    "input_bound": shapes.input_bound,
    "unlinked_kernels": shapes.unlinked_kernels,
    "launch_bound": shapes.launch_bound,
    "comm_bound": lambda: shapes.comm_bound(False),
    "comm_bound_late_peer": lambda: shapes.comm_bound(True),
    "draining_copy": shapes.gpu_bound_with_a_draining_copy,
    "opening_sync": shapes.opening_sync_waits_for_the_previous_step,
    "full_launch_queue": shapes.full_launch_queue,
    "item_at_the_end": shapes.item_at_the_end_of_a_gpu_bound_step,
    "short_wait": shapes.host_bound_with_a_short_wait,
}


def _fixes(tr: Trace) -> list[Fix]:
    k = np.arange(len(tr.kernels))
    mc = np.arange(len(tr.memcpy))
    rt = np.arange(len(tr.runtime))
    st = tr.steps
    starts = st["ts_ns"].to_numpy(np.int64)
    ends = starts + (st["dur_ns"].to_numpy(np.int64) // 2)
    fixes: list[Fix] = [
        ScaleGpu(kernels=k, speedup=2.0, low=1.5, high=3.0),
        ScaleGpu(kernels=k[::2], memcpy=mc, speedup=float("inf")),
        ShrinkHost(starts, ends, keep=0.0, low=0.5),
        ShrinkHost(starts + 1000, ends, keep=0.25),
        DropSyncs(rt),
        AsyncCopies(mc, speedup=2.0),
        GraphLaunch(k, host_keep=0.5, low=0.8),
        HideComm(k),
    ]
    return [*fixes, Combined(fixes[:3]), Combined(fixes[3:])]


def _same(a: Replayed, b: Replayed) -> bool:
    return (
        np.array_equal(a.bounds_ns, b.bounds_ns)
        and np.array_equal(a.carried_ns, b.carried_ns)
        and np.array_equal(a.gpu_cycle_ns, b.gpu_cycle_ns)
        and all(
            np.array_equal(np.asarray(x), np.asarray(y))
            for x, y in zip(a.nodes(), b.nodes(), strict=True)
        )
    )


def _check(gr: Graph, mods: Mods, one_step: bool) -> bool:
    """The scan gives the loop's times (True: the scan was used, not the loop)."""
    assert _same(replay(gr, mods, one_step), replay_loop(gr, mods, one_step))
    pl = plan(gr, gr.order_one if one_step else gr.order)
    return pl is not None and scan(gr, pl, mods) is not None


@pytest.mark.parametrize("shape", sorted(BUILT))
def test_scan_gives_the_loops_times_for_every_kind_of_fix(shape: str) -> None:
    tr = shapes._load(BUILT[shape]())
    gr = graph(tr)
    assert gr.n_h and gr.n_g
    scanned = 0
    for one_step in (False, True):
        scanned += _check(gr, Mods.of(gr), one_step)
        scanned += _check(gr, Mods.of(gr, calibrated=False), one_step)
        for fix in _fixes(tr):
            for level in ("mid", "low", "high"):
                mods = Mods.of(gr)
                fix.apply(tr, gr, mods, level)  # type: ignore[arg-type]
                scanned += _check(gr, mods, one_step)
    assert scanned > 0


def test_a_fix_that_adds_an_edge_is_replayed_by_the_loop() -> None:
    tr = shapes._load(shapes.launch_bound())
    gr = graph(tr)
    mods = Mods.of(gr)
    j = int(np.flatnonzero(gr.gpu.launch >= 0)[-1])
    mods.launch[j] = int(gr.gpu.launch[0])  # launched by another call: an edge the graph lacks
    pl = plan(gr, gr.order)
    assert pl is not None and scan(gr, pl, mods) is None
    assert _same(replay(gr, mods), replay_loop(gr, mods))


def _shared_traces() -> list[Path]:
    root = SHARED
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*.json*") if p.name.endswith((".json", ".json.gz")))


@pytest.mark.slow
@pytest.mark.parametrize(
    "path",
    _shared_traces() or [pytest.param(None, marks=pytest.mark.skip("no shared traces"))],
    ids=lambda p: str(p.relative_to(SHARED)) if isinstance(p, Path) else "none",
)
def test_every_fix_the_detectors_replay_on_a_shared_trace_scans_to_the_loops_times(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from advisor.analysis.pipeline import analyze_trace
    from advisor.errors import AdvisorError
    from advisor.trace import load_trace

    seen: list[tuple[Graph, Mods, bool]] = []

    def recording(gr: Graph, mods: Mods, one_step: bool = False) -> Replayed:
        seen.append((gr, copy.deepcopy(mods), one_step))
        return engine.replay(gr, mods, one_step)

    monkeypatch.setattr(whatif, "replay", recording)
    try:
        analyze_trace(load_trace(path), None)
    except AdvisorError:
        pytest.skip("not a trace the advisor analyses")
    for gr, mods, one_step in seen:
        _check(gr, mods, one_step)
