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
# advisor's children (the decoder, advisor.trace.prefetch; the detectors' helper,
# advisor.analysis.sharing) have their own peaks: the parent prints the largest too ("child_hwm":
# getrusage(RUSAGE_CHILDREN), the largest child it collected), and the figures add the two (an
# upper bound: a forked helper shares most of its pages with the parent; the PSS figure does not
# count them twice).
HWM = """
import atexit as _atexit, sys as _sys
def _hwm():
    try:
        for _line in open("/proc/self/status"):
            if _line.startswith("VmHWM:"):
                _sys.stderr.write(f"\\nhwm {int(_line.split()[1]) * 1024}\\n")
    except OSError:
        pass
    import resource as _res  # the largest child's own peak: advisor collects each with waitpid
    _child = _res.getrusage(_res.RUSAGE_CHILDREN).ru_maxrss * 1024
    if _child and "advisor.trace.prefetch" in _sys.modules:
        _sys.stderr.write(f"\\nchild_hwm {_child}\\n")
    _sys.stderr.flush()
_atexit.register(_hwm)
"""

# The parse floor: read the file, gunzip it in one call and orjson.loads it, nothing else; then
# end the way ``advisor analyze`` does (advisor.cli.app.quick_exit: flush, the atexit handlers,
# no interpreter teardown), so the floor does not pay for freeing the parsed document either.
FLOOR_CODE = (
    HWM
    + """
import atexit, os, sys, time, zlib
import orjson
t = time.perf_counter()
data = open(sys.argv[1], "rb").read()
if data[:2] == b"\\x1f\\x8b":
    data = zlib.decompress(data, wbits=31)
doc = orjson.loads(data)
print(f"inner {time.perf_counter() - t:.4f}")
sys.stdout.flush()
atexit._run_exitfuncs()
os._exit(0)
"""
)

# ``advisor ARGS`` exactly as the console script runs it, plus the exit-time peak RSS line.
ADVISOR_CODE = (
    HWM
    + """
import sys
sys.argv[0] = "advisor"
from advisor.cli.entry import main
main()
"""
)


@dataclass(frozen=True)
class Sample:
    wall_s: float
    cpu_s: float  # user + sys of the process
    peak_rss_bytes: int  # the measured process's own peak
    child_rss_bytes: int  # peak of advisor's largest child (0: none); not in peak_rss_bytes
    inner_s: float | None  # what the process itself reported ("inner <seconds>"), if any
    rc: int
    output: str


def run(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> Sample:
    """Run ``cmd`` to completion in a fresh process. CPU time (wait4) includes the children it
    collected, e.g. the decoding child; peak RSS is the process's own (VmHWM, else wait4)."""
    full_env = {**os.environ, **(env or {})}
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=full_env, cwd=cwd
    )
    assert proc.stdout is not None
    out = proc.stdout.read().decode("utf-8", "replace")
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    inner = None
    peak = ru.ru_maxrss * 1024
    child = 0
    for line in out.splitlines():
        if line.startswith("inner "):
            inner = float(line.split()[1])
        elif line.startswith("hwm "):
            peak = int(line.split()[1])
        elif line.startswith("child_hwm "):
            child = int(line.split()[1])
    return Sample(wall, ru.ru_utime + ru.ru_stime, peak, child, inner, proc.returncode, out)


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


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (from /proc/<pid>/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
        except OSError:
            pass
    return out


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def peak_tree_pss(cmd: list[str], env: dict[str, str] | None = None, every_s: float = 0.003) -> int:
    """Run ``cmd`` and sample the proportional set size (PSS: shared pages split between the
    processes sharing them) of it and all its descendants together; the largest sum seen.

    This is the memory the whole command holds at once, counting pages that a forked child
    shares with its parent once. The polling costs CPU, so time a command in other runs."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})}
    )
    peak = 0
    while proc.poll() is None:
        peak = max(peak, sum(_pss(p) for p in _tree(proc.pid)))
        time.sleep(every_s)
    return peak


def installed() -> tuple[dict[str, str], str]:
    """The advisor as installed for this python (``pip install``: a wheel in site-packages, or
    an editable install of a checkout), its bytecode written as ``pip install`` writes it; the
    environment that runs it (none of this checkout's paths added) and where it is."""
    import compileall

    code = (
        "import advisor, advisor.detectors as d\n"
        "print('\\n'.join([*advisor.__path__, *d.__path__]))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    found = subprocess.run(
        [python(), "-c", code], capture_output=True, text=True, env=env, cwd="/", check=True
    ).stdout.split()
    for d in dict.fromkeys(found):
        compileall.compile_dir(d, quiet=1)
    return {"PYTHONPATH": ""}, found[0] if found else "?"


def compile_checkout() -> bool:
    """Write the bytecode of this checkout's modules, as ``pip install`` does for users: with
    PYTHONDONTWRITEBYTECODE set (or stale .pyc files after an edit) every run would otherwise
    recompile the sources it imports and measure that (``tests.run_all`` does it before pytest
    for the same reason). Whether every module compiled."""
    import compileall

    ok = True
    for pkg in ("advisor", "heuristics"):  # heuristics/: the advisor.detectors modules
        ok = bool(compileall.compile_dir(str(REPO / pkg), quiet=1)) and ok
    return ok
