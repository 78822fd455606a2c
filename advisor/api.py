"""The Python API, for notebooks and scripts: ``advisor.analyze(path)`` gives a :class:`Report`.

    import advisor
    r = advisor.analyze("trace.json.gz")   # a trace, a run folder, or a folder of rank traces
    r                                      # in Jupyter: the ranked findings as a table
    r.findings                             # pandas DataFrame, one row per finding
    r.steps, r.kernels, r.ops              # per-step breakdown, top kernels, top operators
    r.to_html("report.html")               # the same report.html as ``advisor analyze``

The analysis is the one ``advisor analyze`` runs (same detectors, thresholds and figures);
only the presentation differs. See docs/api.md for the columns.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from advisor import record
from advisor.errors import AdvisorError
from advisor.runfolder import REPORT_NAME

if TYPE_CHECKING:
    import pandas as pd

    from advisor.report import Report as RawReport

# stable columns of Report.findings, in this order (docs/api.md)
FINDING_COLUMNS = (
    "rank",
    "id",
    "title",
    "severity",
    "est_savings_ms",
    "est_savings_pct",
    "est_savings_low_ms",
    "est_savings_high_ms",
    "confidence",
    "location",
    "summary",
    "recommendation",
    "snippet",
    "evidence_rows",
    "line_is",
    "phase",
)
STEP_COLUMNS = (
    "step",
    "total_ms",
    "compute_ms",
    "communication_ms",
    "memcpy_ms",
    "dataloader_ms",
    "idle_ms",
    "host_only_ms",
    "ts_us",
)
KERNEL_COLUMNS = (
    "name",
    "count",
    "total_ms",
    "mean_us",
    "share_pct",
    "op",
    "source",
    "limit_pct",
    "bound",
    "cause",
)
OP_COLUMNS = ("name", "count", "total_ms", "self_ms", "mean_us", "share_pct", "gpu_ms", "source")
COLLECTIVE_COLUMNS = (
    "collective",
    "ranks",
    "calls",
    "dtype",
    "bytes_per_call",
    "time_ms",
    "wait_ms",
    "algbw_gbs",
    "busbw_gbs",
    "link",
    "link_gbs",
    "link_pct",
    "note",
)
RANK_COLUMNS = (
    "rank",
    "trace",
    "steps",
    "step_ms_median",
    "gpu_busy_pct",
    "comm_pct",
    "comm_overlap_pct",
    "exposed_comm_ms_per_step",
    "lag_ms_per_step",
    "findings",
    "error",
)


def _frame(rows: Iterable[Mapping[str, Any]], columns: tuple[str, ...]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame([{c: r.get(c) for c in columns} for r in rows], columns=list(columns))


class Report:
    """One analysis: a single trace, or several ranks merged (``run["ranks"]``)."""

    def __init__(self, raw: RawReport) -> None:
        self.raw = raw  #: the underlying :class:`advisor.report.Report` (findings.json's data)

    # ---- data ----------------------------------------------------------------------
    @property
    def run(self) -> dict[str, Any]:
        """The ``run`` block of findings.json: device, steps, median step, GPU busy, ranks..."""
        out: dict[str, Any] = record.dump(self.raw.run)
        return out

    @property
    def findings(self) -> pd.DataFrame:
        """One row per finding, best saving first (columns: ``FINDING_COLUMNS``)."""
        rows = []
        for i, f in enumerate(self.raw.findings, 1):
            loc = f.locations[0] if f.locations else None
            rng = f.est_savings_range_ms
            rows.append(
                {
                    "rank": i,
                    "id": f.id,
                    "title": f.title,
                    "severity": f.severity,
                    "est_savings_ms": f.est_savings_ms,
                    "est_savings_pct": f.est_savings_pct,
                    "est_savings_low_ms": rng[0] if rng else None,
                    "est_savings_high_ms": rng[1] if rng else None,
                    "confidence": f.confidence,
                    "location": f"{loc.file}:{loc.line}" if loc else None,
                    "line_is": loc.line_is if loc else None,
                    "summary": f.summary,
                    "recommendation": f.recommendation,
                    "snippet": f.snippet,
                    "evidence_rows": len(f.evidence),
                    "phase": f.phase,
                }
            )
        return _frame(rows, FINDING_COLUMNS)

    @property
    def steps(self) -> pd.DataFrame:
        """Per captured step, where its wall time went, in ms (``STEP_COLUMNS``)."""
        one = self.raw.views.one_trace
        return _frame(record.dump(one.steps) if one is not None else (), STEP_COLUMNS)

    @property
    def kernels(self) -> pd.DataFrame:
        """Top GPU kernels of the profiled steps (``KERNEL_COLUMNS``)."""
        return _frame(record.dump(self.raw.views.kernels), KERNEL_COLUMNS)

    @property
    def ops(self) -> pd.DataFrame:
        """Top CPU operators of the profiled steps (``OP_COLUMNS``)."""
        return _frame(record.dump(self.raw.views.ops), OP_COLUMNS)

    @property
    def collectives(self) -> pd.DataFrame:
        """Each collective kind's effective bandwidth against its link (``COLLECTIVE_COLUMNS``;
        empty without collectives)."""
        return _frame(record.dump(self.raw.views.collectives), COLLECTIVE_COLUMNS)

    @property
    def ranks(self) -> pd.DataFrame:
        """Per rank of a multi-rank analysis (empty for one trace; ``RANK_COLUMNS``)."""
        group = self.raw.run.ranks
        return _frame(record.dump(group.ranks) if group is not None else (), RANK_COLUMNS)

    # ---- output --------------------------------------------------------------------
    def to_json(self) -> str:
        """findings.json's text (stable schema, sorted keys)."""
        return self.raw.to_json().decode("utf-8")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(self.to_json())
        return out

    def to_html(self, path: str | Path, force: bool = False) -> Path:
        """Write the self-contained report.html to ``path`` (a file name, or a folder to write
        ``report.html`` into). An existing file is kept unless ``force``."""
        from advisor.output.html import render_html
        from advisor.output.outfiles import atomic_write

        p = Path(path)
        if p.is_dir():
            p = p / REPORT_NAME
        if p.exists() and not force:
            raise AdvisorError("exists; pass force=True to replace it", p)
        try:
            atomic_write(p, render_html(self.raw).encode("utf-8"))
        except OSError as err:
            raise AdvisorError(f"cannot write: {err.strerror or err}", p) from None
        return p

    def _repr_html_(self) -> str:
        """Jupyter: the headline and the ranked findings."""
        from advisor.output.terminal import headline

        e = html.escape
        rows = "".join(
            f"<tr><td>{i}</td><td>{e(f.severity)}</td>"
            f"<td style='text-align:right'>{f.est_savings_ms:.2f} ms</td>"
            f"<td style='text-align:right'>{f.est_savings_pct:.1f}%</td>"
            f"<td>{e(f.title)} <code>{e(f.id)}</code></td>"
            f"<td><code>{e(_where(f))}</code></td></tr>"
            for i, f in enumerate(self.raw.findings, 1)
        )
        head = (
            "<tr><th>#</th><th>severity</th><th>saves/step</th><th>%</th><th>finding</th>"
            "<th>where</th></tr>"
        )
        body = f"<table>{head}{rows}</table>" if rows else "<p>No problems found.</p>"
        return (
            f"<div class='torch-advisor'><p><b>torch-advisor</b>: "
            f"{e(headline(self.raw))}</p>{body}</div>"
        )

    def __repr__(self) -> str:
        from advisor.output.terminal import headline

        return f"<advisor.Report {headline(self.raw)}; {len(self.raw.findings)} finding(s)>"


# how an approximate line is marked where only ``file:line`` is shown (Location.line_is)
APPROXIMATE = {"last-call": " (last call before it)", "frame-start": " (frame start)"}


def _where(f: Any) -> str:
    if not f.locations:
        return ""
    loc = f.locations[0]
    return f"{Path(loc.file).name}:{loc.line}{APPROXIMATE.get(loc.line_is, '')}"


def analyze(
    path: str | Path,
    *,
    only: Iterable[str] = (),
    skip: Iterable[str] = (),
    thresholds: Mapping[str, float] | None = None,
    no_source: bool = False,
    jobs: int | None = None,
    scheduler: str | None = None,
    device: str | None = None,
) -> Report:
    """Analyze a trace, a run folder or a folder of per-rank traces, as ``advisor analyze``.

    ``only``/``skip``: finding ids; ``thresholds``: overrides (``advisor analyze
    --list-thresholds`` lists the keys); ``jobs``/``scheduler``: workers for per-rank traces
    (see docs/multirank.md); ``device``: the GPU the trace ran on (as ``--device``). Raises
    :class:`advisor.errors.AdvisorError` for unreadable input.
    """
    from advisor.analysis.pipeline import options_from_cli
    from advisor.trace import find_traces
    from advisor.trace.source import DEFAULT_MAX_TRACE_BYTES

    sets = [f"{k}={v}" for k, v in (thresholds or {}).items()]
    opts = options_from_cli(
        list(only), list(skip), sets, False, no_source, DEFAULT_MAX_TRACE_BYTES, (), device
    )
    p = Path(path)
    files = find_traces(p)
    if len(files) == 1:  # one process, or the ranks of a job merged into one file
        from advisor.multirank.analyze import analyze_file

        raw = analyze_file(files[0], opts)
    else:
        from advisor.multirank.analyze import analyze_files

        raw, _ = analyze_files(files, opts, p, jobs=jobs, scheduler=scheduler)
    return Report(raw)
