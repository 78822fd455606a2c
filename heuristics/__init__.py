"""Detectors: one module per finding id, each registered with ``advisor.registry.detector``.

Every module here is imported by ``advisor.registry.all_detectors()``; a module's docstring is
the user-facing explanation shown in the report (what it detects, why it costs time, how the
saving is estimated, how to fix it, known false positives).
"""
