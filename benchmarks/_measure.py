"""Run a command in a fresh process and measure it: wall time, CPU time and peak RSS.

Shared by the benchmark scripts (``python benchmarks/<script>.py``). POSIX only (os.wait4).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = (
    REPO.parent / "shared" / "traces" / "hta" / "df_index_resolver" / ("df_index_resolver.json.gz")
)

# Printed by every measured process at exit: its own peak RSS since exec (VmHWM). wait4's
# ru_maxrss would also count the measuring parent's pages that a fork/vfork child starts with.
HWM = """
import atexit as _atexit, sys as _sys
def _hwm():
    try:
        for _line in open("/proc/self/status"):
            if _line.startswith("VmHWM:"):
                _sys.stderr.write(f"\\nhwm {int(_line.split()[1]) * 1024}\\n")
                _sys.stderr.flush()
    except OSError:
        pass
_atexit.register(_hwm)
"""

# The parse floor: read the file, gunzip it in one call and orjson.loads it, nothing else.
FLOOR_CODE = (
    HWM
    + """
import sys, time, gzip, zlib
import orjson
t = time.perf_counter()
data = open(sys.argv[1], "rb").read()
if data[:2] == b"\\x1f\\x8b":
    data = zlib.decompress(data, wbits=31)
doc = orjson.loads(data)
print(f"inner {time.perf_counter() - t:.4f}")
"""
)

# ``advisor ARGS`` exactly as the console script runs it, plus the exit-time peak RSS line.
ADVISOR_CODE = (
    HWM
    + """
import sys
sys.argv[0] = "advisor"
from advisor.entry import main
main()
"""
)


@dataclass(frozen=True)
class Sample:
    wall_s: float
    cpu_s: float  # user + sys of the process
    peak_rss_bytes: int
    inner_s: float | None  # what the process itself reported ("inner <seconds>"), if any
    rc: int
    output: str


def run(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> Sample:
    """Run ``cmd`` to completion in a fresh process; its own peak RSS comes from wait4."""
    full_env = {**os.environ, **(env or {})}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=full_env,
                            cwd=cwd)  # fmt: skip
    assert proc.stdout is not None
    out = proc.stdout.read().decode("utf-8", "replace")
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    inner = None
    peak = ru.ru_maxrss * 1024
    for line in out.splitlines():
        if line.startswith("inner "):
            inner = float(line.split()[1])
        elif line.startswith("hwm "):
            peak = int(line.split()[1])
    return Sample(wall, ru.ru_utime + ru.ru_stime, peak, inner, proc.returncode, out)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def raw_size(trace: Path) -> int:
    """Decompressed size of a (possibly gzipped) trace, streamed."""
    import zlib

    with open(trace, "rb") as fh:
        head = fh.read(2)
        fh.seek(0)
        if head != b"\x1f\x8b":
            return os.fstat(fh.fileno()).st_size
        d = zlib.decompressobj(wbits=31)
        total = 0
        while block := fh.read(1 << 20):
            total += len(d.decompress(block))
            while d.unconsumed_tail:
                total += len(d.decompress(d.unconsumed_tail))
        return total


def mb(n: float) -> str:
    return f"{n / 1e6:.0f} MB"


def advisor_env() -> dict[str, str]:
    """Run the advisor of this checkout (even when another copy is installed)."""
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": str(REPO) + (os.pathsep + path if path else "")}


def python() -> str:
    return sys.executable
