"""Several traces at once: the ranks of one job (``analyze``, in a process pool or on Dask),
which ranks stand out (``rankstats``), and ``advisor diff`` between two runs (``diff``).

Private: not an API (a detector imports :mod:`advisor.detect` only).
"""
