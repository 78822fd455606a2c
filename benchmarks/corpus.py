"""The shared traces at a glance: what bounds each step, the evidence for it, and what ranks first.

For every trace file under TRACES_DIR (default ../shared/traces; nothing to do when it is
absent), one line: the GPU busy share of the steady steps (``run.gpu_busy_pct``), the host's own
work (``run.host_own_pct``: the steps less the host's waits for the device), the median launch
lead (how far launch calls run ahead of their kernels) against the launch latency,
``run.bound``, whether the bound agrees with that evidence by the rule of
:func:`advisor.replay.evidence.consistent`, the #1 finding and its saving; then the ranked rows
whose fixes claim the same time (their fixes change the same host calls or GPU activities of the
step graph), each pair with the nodes they share; then the step unit (``run.step_unit``: the
range that carries the iterations, :mod:`advisor.derive.steps`), the steady steps and their
median.

    python benchmarks/corpus.py [TRACES_DIR] [--only SUBSTRING]

Exit status 1 when a trace's bound disagrees with its evidence.
"""

from __future__ import annotations

import argparse
import sys
from itertools import combinations
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.analysis.detection import all_detectors, run_detectors  # noqa: E402
from advisor.analysis.pipeline import lower_confidence, run_summary  # noqa: E402
from advisor.analysis.ranking import rank  # noqa: E402
from advisor.derive.locate import Locator  # noqa: E402
from advisor.derive.quality import trace_quality  # noqa: E402
from advisor.derive.steps import steady_trace  # noqa: E402
from advisor.detect.draft import Draft  # noqa: E402
from advisor.detect.registry import Context  # noqa: E402
from advisor.detect.thresholds import Thresholds  # noqa: E402
from advisor.errors import AdvisorError  # noqa: E402
from advisor.replay.bound import step_bound  # noqa: E402
from advisor.replay.engine import Mods  # noqa: E402
from advisor.replay.evidence import consistent, evidence  # noqa: E402
from advisor.replay.fixes import Fix  # noqa: E402
from advisor.replay.model import graph  # noqa: E402
from advisor.runfacts import RunFacts  # noqa: E402
from advisor.trace import Trace, load_trace  # noqa: E402


def trace_files(root: Path) -> list[Path]:
    """Every trace file under ``root`` (``*.json``, ``*.json.gz``), sorted."""
    return sorted(p for p in root.rglob("*.json*") if p.name.endswith((".json", ".json.gz")))


def claimed_nodes(trace: Trace, fix: Fix) -> tuple[set[int], set[int]]:
    """The host calls and GPU activities whose replay ``fix`` changes (at its estimate)."""
    gr = graph(trace)
    before, after = Mods.of(gr), Mods.of(gr)
    fix.apply(trace, gr, after, "mid")
    host = np.zeros(gr.n_h, dtype=bool)
    for k in ("host_dur_ns", "gap_ns", "handoff_ns", "own_ns", "return_ns", "awaited"):
        host |= getattr(before, k) != getattr(after, k)
    gpu = np.zeros(gr.n_g, dtype=bool)
    for k in ("gpu_dur_ns", "launch", "launch_ns", "prev_ns", "dep_ns"):
        gpu |= getattr(before, k) != getattr(after, k)
    return set(np.flatnonzero(host).tolist()), set(np.flatnonzero(gpu).tolist())


def shared_rows(trace: Trace, drafts: list[Draft], shown: set[str]) -> list[str]:
    """Pairs of shown findings whose fixes change the same nodes: ``a+b (N host, M GPU)``."""
    claims = {
        d.id: claimed_nodes(trace, fix)
        for d in drafts
        if d.id in shown and (fix := d.fix) is not None
    }
    out = []
    for a, b in combinations(sorted(claims), 2):
        h, g = len(claims[a][0] & claims[b][0]), len(claims[a][1] & claims[b][1])
        if h or g:
            out.append(f"{a}+{b} ({h} host, {g} GPU)")
    return out


def one(path: Path) -> str:
    trace = steady_trace(load_trace(path))
    th = Thresholds({})
    step_ms = trace.median_step_ms()
    ctx = Context(
        run=None, thresholds=th, step_ms_median=step_ms, locator=Locator(trace), trace=trace
    )
    drafts = run_detectors(trace, ctx).drafts
    findings = rank(lower_confidence(drafts, trace_quality(trace)), trace.mean_step_ms(), th)
    run = run_summary(trace, None)
    bound = step_bound(trace)
    busy_pct = run.gpu_busy_pct
    ev = evidence(trace, float(busy_pct) if isinstance(busy_pct, (int, float)) else None)
    busy = f"{ev.gpu_busy_pct:5.1f}%" if ev.gpu_busy_pct is not None else "    -"
    own = f"{ev.host_own_pct:5.1f}%" if ev.host_own_pct is not None else "    -"
    lead = f"{ev.launch_lead_ms:8.3f}" if ev.launch_lead_ms is not None else "       -"
    if bound:
        sh = bound["shares_pct"]
        b = f"{bound['by']} {sh[bound['by']]:.0f}%"
        why = consistent(bound, ev)
        verdict = "ok" if why is None else f"DISAGREES: {why}"
        verdict = verdict if ev.complete else "timeline incomplete: not checked"
    else:
        b, verdict = "-", "-"
    ranked = [f for f in findings if f.est_savings_ms > 0]
    top = f"{ranked[0].id} {ranked[0].est_savings_ms:.2f} ms" if ranked else "-"
    shared = shared_rows(trace, drafts, {f.id for f in ranked})
    return (
        f"busy {busy}  host own {own}  lead {lead} ms (latency {ev.launch_latency_ms:.3f})  "
        f"bound {b:10s}"
        f"  {verdict}  #1 {top}"
        + (f"\n    same time claimed: {'; '.join(shared)}" if shared else "")
        + step_unit(run)
    )


def step_unit(run: RunFacts) -> str:
    """The step unit line: the unit, how many steady steps, their median."""
    unit = printable_unit(run.step_unit or "-")
    n = run.steps_profiled
    return (
        f"\n    step unit: {unit} ({n} step{'' if n == 1 else 's'}, median {run.step_ms_median} ms)"
    )


def printable_unit(unit: str) -> str:
    return unit if len(unit) <= 70 else unit[:67] + "..."


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default=str(ROOT.parent / "shared" / "traces"))
    ap.add_argument("--only", default="")
    a = ap.parse_args(argv)
    root = Path(a.root)
    if not root.is_dir():
        print(f"{root}: no shared traces here: nothing to do")
        return 0
    all_detectors()
    bad = 0
    for p in trace_files(root):
        if a.only and a.only not in str(p):
            continue
        rel = p.relative_to(root)
        try:
            line = one(p)
        except AdvisorError as err:
            print(f"{rel}: cannot analyze ({err})")
            continue
        bad += "DISAGREES" in line
        print(f"{rel}\n  {line}", flush=True)
    print(f"traces whose bound disagrees with the evidence: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
