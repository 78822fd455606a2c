"""How well the step replay explains each shared trace, and what every finding saves by it.

For each trace: the measured median steady step, the step replayed by the graph alone (no
measured delay the graph cannot explain: ``calibrated=False``; from boundary to boundary of the
replayed timeline) and its error, the steady-state step the savings are read against (the
longer of its host and GPU cycles, :mod:`advisor.replay.steptime`, as replayed unchanged),
whether the trace is complete (no ``run.trace_quality`` hole), what bounds the step
(``run.bound``), the combined replayed saving of all findings, and each finding's replayed
saving.

    python benchmarks/whatif_accuracy.py [TRACES_DIR] [--only SUBSTRING]

TRACES_DIR defaults to ../shared/traces. The replay must match the measured step within 5% on
complete traces (docs/savings.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.analysis.pipeline import analyze_trace  # noqa: E402
from advisor.derive.quality import trace_quality  # noqa: E402
from advisor.derive.steps import steady_trace  # noqa: E402
from advisor.errors import AdvisorError  # noqa: E402
from advisor.replay.engine import Mods, replay  # noqa: E402
from advisor.replay.model import graph  # noqa: E402
from advisor.trace import find_traces, load_trace  # noqa: E402

TOLERANCE_PCT = 5.0


def traces(root: Path) -> list[Path]:
    out = []
    for p in sorted(root.rglob("*.json*")):
        if "tb_plugin_test" in p.parts or p.name.endswith((".txt", ".md")):
            continue
        try:
            out.extend(find_traces(p))
        except AdvisorError:
            continue
    return sorted(set(out))


def one(path: Path) -> dict[str, object]:
    t0 = time.perf_counter()
    raw = load_trace(path)
    rep = analyze_trace(raw, None)
    tr = steady_trace(raw)
    gr = graph(tr)
    row: dict[str, object] = {"trace": str(path), "secs": time.perf_counter() - t0}
    if not len(gr.steps.chosen) or not gr.steps.chosen.any() or not gr.n_h:
        row["note"] = "nothing to replay (no host calls, GPU work or steps)"
        return row
    meas = np.diff(gr.steps.bounds_ns)[gr.steps.chosen] / 1e6
    pure = np.diff(replay(gr, Mods.of(gr, calibrated=False)).bounds_ns)[gr.steps.chosen] / 1e6
    steady = replay(gr, Mods.of(gr)).step_ns[gr.steps.chosen] / 1e6
    m, r = float(np.median(meas)), float(np.median(pure))
    holes = [i.kind for i in trace_quality(tr) if i.kind in ("graph", "lost-launch")]
    b = rep.run.bound
    row.update(
        measured_ms=m,
        replayed_ms=r,
        steady_ms=float(np.median(steady)),
        error_pct=100.0 * (r - m) / m if m else 0.0,
        complete=not holes,
        holes=holes,
        bound=b.by if b is not None else None,
        shares=dict(b.shares_pct) if b is not None else None,
        together_ms=rep.run.est_savings_bound_ms,
        together_how=rep.run.est_savings_bound_how,
        findings=[(f.id, f.est_savings_ms, f.est_savings_range_ms) for f in rep.findings],
    )
    return row


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default=str(ROOT.parent / "shared" / "traces"))
    ap.add_argument("--only", default="")
    a = ap.parse_args(argv)
    root = Path(a.root)
    if not root.is_dir():
        print(f"{root}: no such folder", file=sys.stderr)
        return 2
    bad = 0
    for p in traces(root):
        if a.only and a.only not in str(p):
            continue
        rel = p.relative_to(root)
        try:
            row = one(p)
        except AdvisorError as err:
            print(f"{rel}: cannot analyze ({err})")
            continue
        if "note" in row:
            print(f"{rel}: {row['note']}")
            continue
        err = float(row["error_pct"])  # type: ignore[arg-type]
        ok = abs(err) <= TOLERANCE_PCT
        if row["complete"] and not ok:
            bad += 1
        shares = row["shares"] or {}
        sh = " ".join(f"{k} {v:.0f}%" for k, v in shares.items() if v >= 1)  # type: ignore[union-attr]
        print(
            f"{rel}\n  measured {row['measured_ms']:.2f} ms  replayed {row['replayed_ms']:.2f} ms"
            f"  error {err:+.1f}%{'' if ok else ' (over 5%)'}  steady {row['steady_ms']:.2f} ms"
            f"  {'complete' if row['complete'] else 'incomplete: ' + ', '.join(row['holes'])}"  # type: ignore[arg-type]
            f"  bound by {row['bound']} ({sh})  together {row['together_ms']} ms"
            f" ({row['together_how']})  [{row['secs']:.1f} s]"
        )
        for fid, ms, rng in row["findings"]:  # type: ignore[attr-defined]
            r = f" [{rng[0]:.2f}-{rng[1]:.2f}]" if rng else ""
            print(f"    {fid:28s} {ms:9.3f} ms{r}")
    print(f"complete traces off by more than {TOLERANCE_PCT:g}%: {bad}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
