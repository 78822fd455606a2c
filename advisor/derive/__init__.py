"""Domain concepts derived from the normalized trace tables (steps and steady state, trace
quality, ...): one module per concept, importing only :mod:`advisor.trace` and :mod:`advisor.derive.timeline`.

Private: not an API (a detector imports :mod:`advisor.detect` only).
"""
