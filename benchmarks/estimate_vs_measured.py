"""How close are the advisor's estimates to what the fixes really save? Runs ``advisor try``
over the examples (each problem script with the fix for its finding) and prints, per pair, the
estimated and the measured saving per step and their ratio.

    python benchmarks/estimate_vs_measured.py [--repeat R] [--steps N] [--threads T]
                                              [--only ID,...] [--keep DIR] [--json FILE]

Fixes that cannot act on this machine (GPU-only ones on a CPU box) are listed with the reason,
not measured. Timings on a shared CPU are noisy: read the verdict column (a saving inside the
noise band of the two medians is "within noise") and use --repeat for steadier figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

PAIRS = [  # (example script, fix id)
    ("dataloader_stall.py", "dataloader-stall"),
    ("zero_grad.py", "zero-grad-not-none"),
    ("inference_no_grad.py", "inference-without-no-grad"),
    ("single_tensor_optimizer.py", "single-tensor-optimizer"),
    ("channels_last.py", "channels-last"),
    ("cudnn_benchmark.py", "cudnn-benchmark"),
    ("fp32_matmul.py", "fp32-matmul"),
    ("fp32_matmul.py", "amp"),
    ("pageable_memcpy.py", "pageable-memcpy"),
    ("blocking_copy.py", "blocking-copy"),
]


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "–" if x is None else format(x, spec)


def run_pair(script: str, fix: str, out: Path, args: argparse.Namespace) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["NO_COLOR"] = "1"
    if args.threads > 0:  # on a shared machine, torch's thread pools oversubscribe the cores
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(args.threads)
    cmd = [
        sys.executable,
        "-m",
        "advisor",
        "try",
        "--fix",
        fix,
        "--out",
        str(out),
        "--force",
        "--repeat",
        str(args.repeat),
        str(REPO / "examples" / script),
        "--steps",
        str(args.steps),
    ]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, check=False)
    wall = time.perf_counter() - t0
    try:
        doc = json.loads((out / "try.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return {"script": script, "fix": fix, "error": last, "wall_s": wall}
    return {"script": script, "fix": fix, "doc": doc, "wall_s": wall}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=2, help="rounds per try (default 2)")
    ap.add_argument("--steps", type=int, default=14, help="--steps for each example")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="OMP/MKL threads of every run (default 1: steadier on a shared machine; "
        "0 keeps the environment's)",
    )
    ap.add_argument("--only", default="", help="fix ids to run (comma-separated)")
    ap.add_argument("--keep", type=Path, help="keep the try folders here (default: a temp dir)")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON to this file")
    args = ap.parse_args()
    only = {s for s in args.only.split(",") if s}
    pairs = [p for p in PAIRS if not only or p[1] in only]
    root = args.keep or Path(tempfile.mkdtemp(prefix="advisor-est-vs-meas-"))
    rows = []
    for script, fix in pairs:
        print(f"... {script} --fix {fix}", file=sys.stderr, flush=True)
        rows.append(run_pair(script, fix, root / f"{Path(script).stem}--{fix}", args))
    print(
        f"advisor try over the examples (CPU: {os.cpu_count()} cores, {args.repeat} round(s), "
        f"--steps {args.steps}, threads {args.threads or 'default'}); step ms = median of the "
        "steady window steps; CPU timings are noisy, read the verdict"
    )
    head = f"{'example':<28}{'fix':<27}{'before':>9}{'after':>9}{'measured':>10}{'estimate':>10}{'ratio':>7}  verdict"
    print(head)
    out_rows = []
    for row in rows:
        name, fix = row["script"], row["fix"]
        if "error" in row:
            print(f"{name:<28}{fix:<27}  error: {row['error']}")
            out_rows.append({"script": name, "fix": fix, "error": row["error"]})
            continue
        doc = row["doc"]
        if doc["before"].get("failed"):
            print(f"{name:<28}{fix:<27}  the unchanged run failed: {doc['before']['failed']}")
            out_rows.append({"script": name, "fix": fix, "error": doc["before"]["failed"]})
            continue
        for e in doc["skipped"] + doc["not_applicable"]:
            print(f"{name:<28}{fix:<27}  not applied: {e['reason']}")
            out_rows.append({"script": name, "fix": fix, "not_applied": e["reason"]})
        for r in doc["results"]:
            b, a = r["before"].get("median_ms"), r["after"].get("median_ms")
            verdict = r.get("verdict") or f"failed: {r.get('failed')}"
            num = (r.get("numerics") or {}).get("status")
            if num not in (None, "same"):
                verdict += f", numerics {num}"
            print(
                f"{name:<28}{fix:<27}{_fmt(b):>9}{_fmt(a):>9}{_fmt(r['measured_saving_ms']):>10}"
                f"{_fmt(r['estimated_saving_ms']):>10}{_fmt(r['ratio']):>7}  {verdict}"
            )
            out_rows.append(
                {
                    "script": name,
                    "fix": fix,
                    "before_ms": b,
                    "after_ms": a,
                    "measured_ms": r["measured_saving_ms"],
                    "estimated_ms": r["estimated_saving_ms"],
                    "ratio": r["ratio"],
                    "verdict": r.get("verdict"),
                    "noise_ms": r.get("noise_ms"),
                    "numerics": num,
                    "failed": r.get("failed"),
                }
            )
    print(f"try folders: {root}")
    if args.json:
        args.json.write_text(json.dumps(out_rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
