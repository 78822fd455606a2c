"""The files of a run folder, by name: what ``advisor profile`` writes (the trace and run.json,
per rank under torchrun, and the evaluation window's trace) and what every analysis writes
(findings.json, report.html, the annotated trace). Every layer that reads or writes them (the
trace finder, the analysis, the output folder rules, the commands) names them from here."""

from __future__ import annotations

import re

TRACE_NAME = "trace.json.gz"
RUN_NAME = "run.json"
FINDINGS_NAME = "findings.json"
REPORT_NAME = "report.html"
ANNOTATED_NAME = "trace.annotated.json.gz"
# what an analysis writes into its folder
ANALYZE_NAMES = (FINDINGS_NAME, REPORT_NAME, ANNOTATED_NAME)
# what an advisor profile run writes
PROFILE_NAMES = (TRACE_NAME, RUN_NAME, *ANALYZE_NAMES)

# the evaluation window of a profile run: trace.json.gz -> trace.eval.json.gz
# (trace.rank<R>.json.gz -> trace.rank<R>.eval.json.gz), read with the main window's trace
EVAL_SUFFIX = ".eval.json.gz"

# a rank's trace or run file under torchrun (group 1: which, group 2: the rank)
RANK_NAME_RE = re.compile(r"^(trace|run)\.rank(\d+)\.json(?:\.gz)?$")
# a rank's file, or the temporary file it is written through (.<name>.<random>.tmp)
RANK_FILE_RE = re.compile(r"^\.?(?:trace\.rank\d+\.json\.gz|run\.rank\d+\.json)(?:\..*)?$")
RANK_TRACE_PREFIX = "trace.rank"


def rank_trace_name(rank: int) -> str:
    """A rank's trace under torchrun."""
    return f"trace.rank{rank}.json.gz"


def rank_run_name(rank: int) -> str:
    """A rank's run file under torchrun."""
    return f"run.rank{rank}.json"


def eval_trace_name(trace_name: str) -> str:
    """The evaluation window's trace beside the main window's ``trace_name``."""
    return trace_name.removesuffix(".json.gz") + EVAL_SUFFIX


def is_eval_trace(name: str) -> bool:
    return name.endswith(EVAL_SUFFIX)
