"""What the user gets: report.html, the terminal summary, the annotated trace, and the output
folder with its atomic, never-overwrite-the-user's-files writes. Renderers read a
:class:`~advisor.report.Report` and never compute findings.

Private: not an API (a detector imports :mod:`advisor.detect` only).
"""
