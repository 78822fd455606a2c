"""``trace.annotated.json.gz``: the user's trace plus the findings on their own timeline track.

The original file is never modified. The findings go on one process named
``torch-advisor findings`` (a pid no event of the trace uses, sorted to the top), one thread
per finding (``#1 title``), with an ``X`` slice at each evidence timestamp (the file's own
clock) lasting the evidence's mean duration; args hold the title, saving, evidence and the
user's source line. A finding without timestamps gets one slice over the captured window.
Slices use the category ``advisor_finding``, which the loader ignores, so analyzing the
annotated trace gives the same tables (and findings) as the original. Re-annotating an
annotated trace replaces the old track.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import orjson

from advisor.findings import Finding
from advisor.jsontext import compact
from advisor.output.tail import CATEGORY, FINDINGS_PID, taken
from advisor.output.tail import splice_at as _splice_at
from advisor.report import Report
from advisor.trace.decode import DEFAULT_MAX_TRACE_BYTES, read_bytes

PROCESS_NAME = "torch-advisor findings"
MAX_NAME_CHARS = 160
GZIP_LEVEL = 3  # the copy is a convenience: fast beats the last 20% of size


def _saving(f: Finding) -> str:
    if f.severity == "info" and f.est_savings_ms <= 0:
        return "no measured saving here (info)"
    s = f"{f.est_savings_ms:.3f} ms/step ({f.est_savings_pct:.1f}% of the median step)"
    r = f.est_savings_range_ms
    return s + (f", range {r[0]:.3f}-{r[1]:.3f} ms" if r else "")


def _args(rank: int, f: Finding) -> dict[str, Any]:
    loc = f.locations[0] if f.locations else None
    return {
        "finding": f.id,
        "rank": rank,
        "title": f.title,
        "severity": f.severity,
        "confidence": f.confidence,
        "estimated saving": _saving(f),
        "summary": f.summary,
        "source": f"{loc.file}:{loc.line} ({loc.function})" if loc else "",
        "fix": f.recommendation,
    }


def finding_events(report: Report, pid: int) -> list[dict[str, Any]]:
    """The metadata and slice events of the findings track."""

    def meta(name: str, tid: int, args: dict[str, Any]) -> dict[str, Any]:
        return {"ph": "M", "name": name, "pid": pid, "tid": tid, "ts": 0, "args": args}

    evs = [
        meta("process_name", 0, {"name": PROCESS_NAME}),
        meta("process_sort_index", 0, {"sort_index": -1000000}),
    ]
    one = report.views.one_trace
    window = one.trace.window_us if one is not None else None
    for rank, f in enumerate(report.findings, 1):
        tid = rank
        label = f"#{rank} {f.title}"[:MAX_NAME_CHARS]
        evs.append(meta("thread_name", tid, {"name": label}))
        evs.append(meta("thread_sort_index", tid, {"sort_index": rank}))
        base = _args(rank, f)
        rows = sorted(
            (e for e in f.evidence if e.example_ts_us is not None),
            key=lambda e: float(e.example_ts_us or 0.0),
        )
        slices: list[dict[str, Any]] = []
        for e in rows:
            ts = float(e.example_ts_us or 0.0)
            if slices and ts <= slices[-1]["ts"]:
                continue  # same moment as the previous row: one slice is enough
            mean_us = 1000.0 * e.total_ms / e.count if e.count else 0.0
            ev = {
                "ph": "X",
                "cat": CATEGORY,
                "name": f"#{rank} {f.id}: {e.what}"[:MAX_NAME_CHARS],
                "pid": pid,
                "tid": tid,
                "ts": ts,
                "dur": round(max(mean_us, 1.0), 3),
                "args": {**base, "evidence": e.what, "count": e.count, "total ms": e.total_ms},
            }
            if slices:  # slices on one track must not overlap (Perfetto nests or drops them)
                prev = slices[-1]
                prev["dur"] = round(min(prev["dur"], ts - prev["ts"]), 3)
            slices.append(ev)
        if not slices and window and window[1] > window[0]:
            slices.append(
                {
                    "ph": "X",
                    "cat": CATEGORY,
                    "name": label,
                    "pid": pid,
                    "tid": tid,
                    "ts": window[0],
                    "dur": round(window[1] - window[0], 3),
                    "args": {**base, "evidence": "no example timestamp: whole window"},
                }
            )
        evs.extend(slices)
    return evs


def _strip_old(events: list[Any]) -> list[Any]:
    """Drop a findings track left by an earlier annotation."""
    ours = {
        e.get("pid")
        for e in events
        if isinstance(e, dict)
        and e.get("ph") == "M"
        and e.get("name") == "process_name"
        and (e.get("args") or {}).get("name") == PROCESS_NAME
    }
    return [
        e
        for e in events
        if not (
            isinstance(e, dict) and (e.get("cat") == CATEGORY or (ours and e.get("pid") in ours))
        )
    ]


def _free_pid(events: list[Any]) -> int:
    pids = [e.get("pid") for e in events if isinstance(e, dict)]
    ints = [p for p in pids if isinstance(p, int) and not isinstance(p, bool)]
    return max(ints, default=0) + 1


def _gzip(parts: list[bytes]) -> bytes:
    z = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # wbits 31: gzip container
    return b"".join([*(z.compress(p) for p in parts), z.flush()])


def annotate(trace_path: Path, report: Report, max_bytes: int = DEFAULT_MAX_TRACE_BYTES) -> bytes:
    """The gzipped annotated trace (raises TraceError/ValueError when the trace is unusable).

    Fast path: the findings events are spliced in front of the trace's own events, so the
    trace is never re-encoded (the loader already proved it valid JSON). A trace that already
    holds a findings track, or whose layout is unexpected, is parsed and rewritten instead.
    """
    raw = read_bytes(trace_path, max_bytes)
    at = _splice_at(raw)
    if at is not None and not taken(raw):
        ours = b",".join(compact(e) for e in finding_events(report, FINDINGS_PID))
        empty = raw[at:].lstrip()[:1] == b"]"
        return _gzip([raw[:at], ours, b"" if empty else b",", raw[at:]])
    try:
        doc: Any = orjson.loads(raw)
    except orjson.JSONDecodeError:
        doc = json.loads(raw)  # NaN/Infinity or integers beyond 64 bits
    del raw
    if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events = _strip_old(doc["traceEvents"])
        doc["traceEvents"] = events
    elif isinstance(doc, list):
        events = doc = _strip_old(doc)
    else:
        raise ValueError("not a trace (no traceEvents list)")
    events.extend(finding_events(report, _free_pid(events)))
    return _gzip([compact(doc)])
