"""From a loaded trace to a :class:`~advisor.report.Report`: the detector registry, the
thresholds, ranking, the report's views and tables, phases, and the pipeline that runs them.

Private: not an API (a detector imports :mod:`advisor.detect` only).
"""
