"""The command line: ``entry`` (the console script), ``app`` (the typer application), one
module per command (``*_cmd.py``), ``guard`` (one-line errors and exit codes).

Private: not an API (a detector imports :mod:`advisor.detect` only).
"""
