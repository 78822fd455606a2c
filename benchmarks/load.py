"""Loader speed and memory, side by side with the bare parse floor, in one run.

For each trace: ``load_trace`` in a fresh process (time inside the process, after imports, and
the process's peak RSS) next to the floor (gunzip + ``orjson.loads`` in a fresh process), runs
alternating, medians printed. Targets: load <= 1.5x the floor, peak RSS <= 3x the raw JSON.

    python benchmarks/load.py [TRACE ...] [--repeat 5]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import (  # noqa: E402
    DEFAULT_TRACE,
    FLOOR_CODE,
    HWM,
    Sample,
    advisor_env,
    compile_checkout,
    mb,
    median,
    python,
    raw_size,
    run,
)

LOAD_CODE = (
    HWM
    + """
import sys, time
from advisor.trace import load_trace
t = time.perf_counter()
trace = load_trace(sys.argv[1])
print(f"inner {time.perf_counter() - t:.4f}")
"""
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="*", type=Path, default=[DEFAULT_TRACE])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    env = advisor_env()
    compile_checkout()
    print(
        f"{'trace':<34} {'raw':>7} | {'load':>7} {'floor':>7} {'ratio':>6} | "
        f"{'load RSS':>9} {'x raw':>6} | {'floor RSS':>9} {'x raw':>6}"
    )
    ok = True
    for trace in args.traces:
        if not trace.is_file():
            print(f"load: {trace}: no such trace file", file=sys.stderr)
            return 1
        raw = raw_size(trace)
        loads: list[Sample] = []
        floors: list[Sample] = []
        for i in range(args.repeat):
            pair = [("load", LOAD_CODE, env), ("floor", FLOOR_CODE, None)]
            for name, code, e in pair if i % 2 == 0 else pair[::-1]:
                s = run([python(), "-c", code, str(trace)], env=e)
                if s.rc != 0:
                    print(f"{name} failed:\n{s.output[-2000:]}", file=sys.stderr)
                    return 1
                (loads if name == "load" else floors).append(s)
        lt = median([s.inner_s or s.wall_s for s in loads])
        ft = median([s.inner_s or s.wall_s for s in floors])
        lr = median([s.peak_rss_bytes for s in loads])
        fr = median([s.peak_rss_bytes for s in floors])
        ok &= lt <= 1.5 * ft and lr <= 3 * raw
        print(
            f"{trace.name[:34]:<34} {mb(raw):>7} | {lt:6.2f}s {ft:6.2f}s {lt / ft:5.2f}x | "
            f"{mb(lr):>9} {lr / raw:5.2f}x | {mb(fr):>9} {fr / raw:5.2f}x"
        )
    print("targets (load <= 1.5x floor, RSS <= 3x raw): " + ("met" if ok else "NOT met"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
