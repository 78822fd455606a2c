"""How fast ``advisor analyze`` is, against the bare parse floor and HTA 0.5.0.

Each figure is a fresh process, run alternating (advisor, floor, HTA, then rotated) and repeated;
the medians are printed, one line per figure with its ratios, in wall time and in CPU time (user +
system of every process: on a shared machine the wall clock says more about the neighbours):

- ``advisor analyze TRACE``: start-up, load, every detector, findings.json and report.html; the
  advisor installed for this python (as ``pip install`` leaves it: bytecode written; an editable
  install is this checkout), or with ``--checkout`` this checkout whatever is installed;
- the parse floor: gunzip + ``orjson.loads`` of the same file, nothing else, ending as
  ``advisor analyze`` does (no interpreter teardown);
- HTA 0.5.0 (``--hta-python``: a python with ``HolisticTraceAnalysis==0.5.0`` installed, or the
  ``HTA_PYTHON`` variable): load the trace and run the temporal, idle-time and kernel breakdowns;
- start-up: ``advisor --help``, and whether ``advisor --help`` / ``advisor analyze`` import torch.

    python benchmarks/analyze_speed.py [TRACE] [--repeat 5] [--hta-python /work/hta-venv/bin/python]

Big traces: ``--no-floor`` (orjson needs about 7x the file in memory) and no ``--hta-python``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import (  # noqa: E402
    ADVISOR_CODE,
    DEFAULT_TRACE,
    FLOOR_CODE,
    HWM,
    Sample,
    advisor_env,
    compile_checkout,
    installed,
    mb,
    median,
    peak_tree_pss,
    python,
    raw_size,
    run,
)

HTA_CODE = (
    HWM
    + """
import sys, time
t = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
ranks = sorted(ta.t.traces.keys())
ta.get_temporal_breakdown(visualize=False)
ta.get_idle_time_breakdown(ranks=ranks, visualize=False)
ta.get_gpu_kernel_breakdown(visualize=False)
print(f"inner {time.perf_counter() - t:.4f}")
"""
)

TORCH_CHECK = (
    HWM
    + """
import sys
from advisor.cli.entry import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("torch imported" if "torch" in sys.modules else "torch not imported")
"""
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--repeat", type=int, default=5, help="runs of each figure (median)")
    ap.add_argument(
        "--hta-python",
        default=os.environ.get("HTA_PYTHON"),
        help="python of a venv with HolisticTraceAnalysis==0.5.0 (or $HTA_PYTHON)",
    )
    ap.add_argument("--no-floor", action="store_true", help="skip the parse floor")
    ap.add_argument(
        "--checkout", action="store_true", help="run this checkout, not the installed advisor"
    )
    args = ap.parse_args(argv)
    trace: Path = args.trace.resolve()
    if not trace.is_file():
        print(f"analyze_speed: {trace}: no such trace file", file=sys.stderr)
        return 1
    raw = raw_size(trace)
    work = Path(tempfile.mkdtemp(prefix="advisor-bench-"))
    try:
        hta_dir = None
        hta = args.hta_python
        if hta and not shutil.which(hta) and not Path(hta).is_file():
            print(f"HTA: {hta} not found: skipping the HTA figure")
            hta = None
        elif not hta:
            print("HTA: no --hta-python (or HTA_PYTHON) given: skipping the HTA figure")
        if hta:
            hta_dir = work / "hta"
            hta_dir.mkdir()
            (hta_dir / trace.name).symlink_to(trace)
        figures: dict[str, list[Sample]] = {"advisor": [], "floor": [], "hta": []}
        if args.checkout:
            env, where = advisor_env(), str(Path(__file__).resolve().parents[1] / "advisor")
            compile_checkout()
        else:
            env, where = installed()
        print(f"advisor: {where}")

        def advisor() -> Sample:
            return run(
                [
                    python(),
                    "-c",
                    ADVISOR_CODE,
                    "analyze",
                    str(trace),
                    "--out",
                    str(work / "out"),
                    "--force",
                ],
                env=env,
            )

        def floor() -> Sample:
            return run([python(), "-c", FLOOR_CODE, str(trace)])

        def hta_run() -> Sample:
            return run([str(hta), "-c", HTA_CODE, str(hta_dir)])

        order = [("advisor", advisor)]
        if not args.no_floor:
            order.append(("floor", floor))
        if hta:
            order.append(("hta", hta_run))
        for i in range(args.repeat):
            k = i % len(order)
            for name, fn in order[k:] + order[:k]:  # alternate who goes first
                s = fn()
                if s.rc != 0:
                    print(f"{name} failed (exit {s.rc}):\n{s.output[-2000:]}", file=sys.stderr)
                    return 1
                figures[name].append(s)
        _report(trace, raw, figures, args.repeat)
        tree = [
            peak_tree_pss(
                [
                    python(),
                    "-c",
                    ADVISOR_CODE,
                    "analyze",
                    str(trace),
                    "--out",
                    str(work / "out"),
                    "--force",
                ],
                env=env,
            )
            for _ in range(3)
        ]
        pss = median([float(x) for x in tree])
        print(
            f"advisor analyze, memory of all its processes at once (PSS sampled every 3 ms, "
            f"3 separate runs): peak {mb(pss)} ({pss / raw:.2f}x raw)"
        )
        _startup(env, trace, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _med(samples: list[Sample], attr: str) -> float:
    return median([float(getattr(s, attr)) for s in samples])


def _report(trace: Path, raw: int, fig: dict[str, list[Sample]], repeat: int) -> None:
    print(
        f"trace: {trace} ({mb(trace.stat().st_size)} on disk, {mb(raw)} raw JSON); "
        f"medians of {repeat} fresh processes"
    )
    a = fig["advisor"]
    aw, ac, ar = _med(a, "wall_s"), _med(a, "cpu_s"), _med(a, "peak_rss_bytes")
    achild = _med(a, "child_rss_bytes")
    fw = fc = fr = float("nan")
    if fig["floor"]:
        f = fig["floor"]
        fw, fc, fr = _med(f, "wall_s"), _med(f, "cpu_s"), _med(f, "peak_rss_bytes")
        print(
            f"parse floor (gunzip + orjson.loads): {fw:.2f} s wall, {fc:.2f} s CPU, "
            f"peak RSS {mb(fr)} ({fr / raw:.1f}x raw)"
        )
    floor_part = f" = {aw / fw:.2f}x the floor (CPU {ac / fc:.2f}x)" if fig["floor"] else ""
    rss = f"peak RSS {mb(ar)} ({ar / raw:.2f}x raw)"
    if achild:
        both = ar + achild
        rss = (
            f"peak RSS {mb(ar)} ({ar / raw:.2f}x raw) + its largest child (the decoder or "
            f"the detectors' helper) {mb(achild)}: together at most {mb(both)} "
            f"({both / raw:.2f}x raw; shared pages counted twice: see the PSS line)"
        )
    print(
        f"advisor analyze (end to end): {aw:.2f} s wall{floor_part}, {ac:.2f} s CPU "
        f"(all processes), {rss}"
    )
    if fig["hta"]:
        h = fig["hta"]
        hw, hc, hr = _med(h, "wall_s"), _med(h, "cpu_s"), _med(h, "peak_rss_bytes")
        print(
            f"HTA 0.5.0 (load + temporal, idle-time, kernel breakdowns): {hw:.2f} s wall, "
            f"{hc:.2f} s CPU, peak RSS {mb(hr)}; advisor is {hw / aw:.1f}x faster "
            f"(CPU {hc / ac:.1f}x)"
        )


def _startup(env: dict[str, str], trace: Path, work: Path) -> None:
    helps = [run([python(), "-c", ADVISOR_CODE, "--help"], env=env) for _ in range(3)]
    checks = []
    for argv in (["--help"], ["analyze", str(trace), "--out", str(work / "t"), "--force"]):
        out = run([python(), "-c", TORCH_CHECK, *argv], env=env).output.strip().splitlines()
        said = [x for x in out if x.startswith("torch")]
        checks.append(f"advisor {argv[0]}: {said[-1] if said else '?'}")
    print(
        f"start-up: advisor --help {_med(helps, 'wall_s'):.2f} s, peak RSS "
        f"{mb(_med(helps, 'peak_rss_bytes'))}; " + "; ".join(checks)
    )


if __name__ == "__main__":
    sys.exit(main())
