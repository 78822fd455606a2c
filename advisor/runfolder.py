"""The files of a run folder, by name: what ``advisor profile`` writes (the trace and run.json)
and what every analysis writes (findings.json, report.html, the annotated trace). Every layer
that reads or writes them (the trace finder, the analysis, the output folder rules, the
commands) names them from here. A multi-rank run's per-rank files are ``trace.rank<R>.json.gz``
and ``run.rank<R>.json`` (:mod:`advisor.profile.torchrun`); an evaluation window's trace is
``trace.eval.json.gz`` (:mod:`advisor.analysis.phases`)."""

from __future__ import annotations

TRACE_NAME = "trace.json.gz"
RUN_NAME = "run.json"
FINDINGS_NAME = "findings.json"
REPORT_NAME = "report.html"
ANNOTATED_NAME = "trace.annotated.json.gz"
# what an analysis writes into its folder
ANALYZE_NAMES = (FINDINGS_NAME, REPORT_NAME, ANNOTATED_NAME)
# what an advisor profile run writes
PROFILE_NAMES = (TRACE_NAME, RUN_NAME, *ANALYZE_NAMES)
