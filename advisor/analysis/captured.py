"""Launch-overhead advice in a window that captures CUDA/HIP graphs: one rule, applied once
after the detectors ran (``analyze``, ``profile``, the API).

A window that holds a stream-capture range (``*StreamBeginCapture`` .. ``*StreamEndCapture``,
:func:`advisor.derive.runtime.capture_spans`; the launch calls inside it, when the trace records
them, :func:`advisor.derive.kind.captured_launches`) is recording graphs: the run already uses
CUDA graphs, and its launch timing is capture and graph set-up, not the steady launch rate. The
findings that value launch overhead and advise fewer launches or CUDA graphs (``gpu-idle``'s
host-launch share, ``tiny-kernels``) are kept as information there: no per-step saving, the
reason in their assumptions. A window mostly made of capture (trace kind ``capture``) is
handled before this, by :func:`advisor.analysis.pipeline.for_capture`.
"""

from __future__ import annotations

from dataclasses import replace

from advisor.derive.kind import captured_launches
from advisor.derive.runtime import capture_spans
from advisor.detect.draft import Draft
from advisor.trace.model import Trace

LAUNCH_ADVICE = frozenset({"gpu-idle", "tiny-kernels"})


def launch_advice_under_capture(drafts: list[Draft], trace: Trace) -> list[Draft]:
    """``drafts`` with the launch-overhead findings made information when the window captures
    graphs."""
    ranges = len(capture_spans(trace)[0])
    if not ranges:
        return drafts
    captured, launches = captured_launches(trace)
    n = f"{ranges:,} stream-capture range(s), " + (
        f"{captured:,} of {launches:,} launch calls inside them"
        if captured
        else "their launch calls not recorded"
    )
    why = (
        f"The window records CUDA/HIP graphs ({n}): the run already uses CUDA graphs and its "
        "launch timing here is capture and graph set-up, not steady state, so no saving is "
        "claimed from launch overhead."
    )
    return [
        replace(
            d,
            latent=True,
            est_savings_ms=0.0,
            est_savings_range_ms=None,
            assumptions=d.assumptions + (why,),
        )
        if d.id in LAUNCH_ADVICE
        else d
        for d in drafts
    ]
