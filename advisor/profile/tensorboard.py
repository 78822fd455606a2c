"""``--tensorboard DIR``: the trace where TensorBoard's profiler plugin looks, plus the headline
figures as scalars.

The trace is copied to ``DIR/<host>_<pid>.<time_ns>.pt.trace.json.gz`` (the naming of
``torch.profiler.tensorboard_trace_handler``); ``SummaryWriter(DIR)`` logs ``advisor/step_ms``,
``advisor/gpu_busy_pct`` and ``advisor/est_savings_ms/<finding id>``. Nothing already in DIR is
overwritten.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import time
from pathlib import Path


def _copy_new(src: Path, dest: Path) -> None:
    """Copy ``src`` to the new file ``dest`` atomically (a temporary name, then a hard link,
    which never replaces an existing file); nothing is left under ``dest`` on failure."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        with open(src, "rb") as fin, open(tmp, "xb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
            fout.flush()
            os.fsync(fout.fileno())
        try:
            os.link(tmp, dest)
        except FileExistsError:
            raise
        except OSError:  # a filesystem without hard links
            if dest.exists():
                raise FileExistsError(errno.EEXIST, "exists", str(dest)) from None
            os.replace(tmp, dest)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def write_tensorboard(tb_dir: Path, trace_path: Path | None, findings_path: Path | None) -> Path:
    """Write the trace copy and scalars into ``tb_dir``; returns the trace copy's path."""
    tb_dir.mkdir(parents=True, exist_ok=True)
    worker = f"{socket.gethostname()}_{os.getpid()}"
    dest = tb_dir / f"{worker}.{time.time_ns()}.pt.trace.json.gz"
    if trace_path is not None and trace_path.is_file():
        _copy_new(trace_path, dest)
    from advisor.errors import AdvisorError
    from advisor.report import Report, read

    report: Report | None = None
    if findings_path is not None:
        try:
            report = read(findings_path)
        except AdvisorError:
            report = None
    from torch.utils.tensorboard import SummaryWriter

    run = report.run if report is not None else None
    findings = report.findings if report is not None else ()
    writer = SummaryWriter(log_dir=str(tb_dir))
    try:
        if run is not None and run.step_ms_median is not None:
            writer.add_scalar("advisor/step_ms", float(run.step_ms_median), 0)
        if run is not None and run.gpu_busy_pct is not None:
            writer.add_scalar("advisor/gpu_busy_pct", float(run.gpu_busy_pct), 0)
        for f in findings:
            writer.add_scalar(f"advisor/est_savings_ms/{f.id}", f.est_savings_ms, 0)
        lines = [f"- **{f.id}**: {f.summary}" for f in findings]
        writer.add_text("advisor/findings", "\n".join(lines) or "no problems found", 0)
    finally:
        writer.close()
    return dest
