"""``advisor profile``: run a script under torch.profiler, capture the run context, report.

The command is :func:`advisor.profile.run.run_profile`. Importing this package imports nothing
(the command line imports it for the ``profile`` command's defaults, which ``advisor analyze``
does not need); the runner never imports torch itself, the script's run does.
Private: not an API (the command line and :mod:`advisor` are).
"""
