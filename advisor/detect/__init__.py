"""The detector API, below the detectors: what a detector is given and returns, how it
registers (``registry``), and the thresholds it reads (``thresholds``)."""
