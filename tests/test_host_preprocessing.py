"""host-preprocessing: Python frames in the step that launch no GPU work while the GPU idles,
and gpu-idle no longer counting that time as waiting for launches.

Builder traces (a preprocessing frame before the forward's launches), the real timesformer
inference trace (video decode and image processor inside the step) and the CPU sample recorded
by ``advisor profile`` from examples/host_preprocessing.py.
"""

from __future__ import annotations

import pytest

from tests.conftest import SAMPLES, shared_trace
from tests.detector_helpers import analyze, finding
from tests.tracebuilder import TraceBuilder

ID = "host-preprocessing"


def pre_trace(
    pre_us: float = 6000.0, launch_inside: bool = False, dl: bool = False
) -> TraceBuilder:
    """3 steps of 10 ms: ``serve.py:12`` calls a library ``preprocess`` frame (``pre_us``, with
    a ``decode`` and a ``resize`` inside), then the model's op launches a 3 ms kernel and the
    host waits for it."""
    b = TraceBuilder()
    for s in range(3):
        t = s * 10000.0
        b.step(s + 1, t, 10000)
        top = b.frame("serve.py", 12, "handle", t + 1, 9998)
        if dl:
            b.annotation(
                "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t + 2, pre_us
            )
        pre = b.frame(
            "site-packages/hub/processing.py", 40, "preprocess", t + 2, pre_us, parent=top
        )
        b.frame("site-packages/hub/video.py", 7, "decode", t + 3, pre_us * 0.3, parent=pre)
        b.frame(
            "site-packages/hub/image.py",
            9,
            "resize",
            t + 4 + pre_us * 0.3,
            pre_us * 0.6,
            parent=pre,
        )
        if launch_inside:
            op = b.op("aten::copy_", t + 10, 5)
            b.launch(op, "cudaMemcpyAsync", t + 11, 2, memcpy=("Memcpy HtoD", 1024), gpu_dur=1)
        t1 = t + pre_us + 10
        op = b.op("aten::mm", t1, 10)
        b.launch(op, "cudaLaunchKernel", t1 + 1, 5, kernel="gemm", gpu_dur=3000)
        b.runtime("cudaDeviceSynchronize", t1 + 8, 3005)
    return b


def test_preprocessing_frame_is_reported_with_its_parts_and_the_users_line() -> None:
    rep = analyze(pre_trace().load(), ID)
    f = finding(rep, ID)
    assert f is not None
    assert "preprocess (processing.py:40)" in f.summary
    assert "decode" in f.summary and "resize" in f.summary
    assert f.locations[0].file == "serve.py"
    assert f.evidence[0].total_ms == pytest.approx(18.0, abs=0.1)  # 6 ms x 3 steps
    # replayed: the frame keeps host_preprocessing.keep (0.25) of itself: 4.5 ms per step
    assert f.est_savings_ms == pytest.approx(4.5, abs=0.1)
    lo, hi = f.est_savings_range_ms or (0, 0)
    assert lo == pytest.approx(3.0, abs=0.1) and hi == pytest.approx(6.0, abs=0.1)


def test_gpu_idle_names_preprocessing_instead_of_host_launch() -> None:
    from advisor.analysis.pipeline import Options, analyze_trace

    # run beside host-preprocessing: gpu-idle points only to checks that reported
    only = Options(only=frozenset({"gpu-idle", "host-preprocessing"}))
    rep = analyze_trace(pre_trace().load(), None, only)
    f = finding(rep, "gpu-idle")
    assert f is not None
    assert "preprocessing" in f.summary and "see host-preprocessing" in f.summary
    split = f.summary.split(":")[1]
    assert "host launch" not in split.split(",")[0]


def test_a_frame_that_launches_gpu_work_is_not_preprocessing_its_quiet_parts_are() -> None:
    # a copy launched inside decode: preprocess and decode launch GPU work, resize does not
    f = finding(analyze(pre_trace(launch_inside=True).load(), ID), ID)
    assert f is not None
    assert "idles: resize (image.py:9) from serve.py" in f.summary
    assert "preprocess (processing.py:40)" not in f.summary


def test_dataloader_fetch_time_is_left_to_dataloader_stall() -> None:
    assert finding(analyze(pre_trace(dl=True).load(), ID), ID) is None


def _quiet_under(outer: tuple[str, int, str], inner: list[tuple[str, int, str]]) -> TraceBuilder:
    """3 steps of 10 ms: ``train.py:30`` calls ``outer`` (6 ms, no launch) with ``inner``
    frames inside it, then the model's op launches a 3 ms kernel and the host waits for it."""
    b = TraceBuilder()
    for s in range(3):
        t = s * 10000.0
        b.step(s + 1, t, 10000)
        top = b.frame("train.py", 30, "<module>", t + 1, 9998)
        out = b.frame(*outer, t + 2, 6000, top)
        for k, fr in enumerate(inner):
            b.frame(*fr, t + 3 + k, 5900 - 900 * k, out)
        t1 = t + 6010
        op = b.op("aten::mm", t1, 10)
        b.launch(op, "cudaLaunchKernel", t1 + 1, 5, kernel="gemm", gpu_dur=3000)
        b.runtime("cudaDeviceSynchronize", t1 + 8, 3005)
    return b


def test_quiet_frames_of_torchs_own_machinery_are_not_preprocessing() -> None:
    # the same quiet frame as torch's optimizer/dynamo wrapper (a lazy import on the first
    # step) is framework overhead: neither it nor the library frames inside it are reported
    b = _quiet_under(
        ("site-packages/torch/optim/optimizer.py", 538, "wrapper"),
        [
            ("site-packages/torch/_dynamo/eval_frame.py", 1423, "_fn"),
            ("site-packages/hub/image.py", 9, "resize"),
        ],
    )
    assert finding(analyze(b.load(), ID), ID) is None


def test_what_the_advisor_or_the_profiler_calls_is_not_preprocessing() -> None:
    # a timer thread the advisor starts inside a step (threading.start waiting for it) is the
    # advisor's own time, as is anything else below its frames
    b = _quiet_under(
        ("site-packages/advisor/profile/quiet.py", 183, "after"), [("threading.py", 945, "start")]
    )
    assert finding(analyze(b.load(), ID), ID) is None
    # the same frames under a library of the user's: preprocessing, reported
    b = _quiet_under(("site-packages/hub/processing.py", 40, "preprocess"), [])
    assert finding(analyze(b.load(), ID), ID) is not None


def test_a_frame_in_one_step_of_several_is_a_one_off() -> None:
    # the same 6 ms frame in the first of three steps only: not preprocessing, which recurs
    b = TraceBuilder()
    for s in range(3):
        t = s * 10000.0
        b.step(s + 1, t, 10000)
        top = b.frame("serve.py", 12, "handle", t + 1, 9998)
        if s == 0:
            b.frame("site-packages/hub/processing.py", 40, "preprocess", t + 2, 6000, top)
        op = b.op("aten::mm", t + 6010, 10)
        b.launch(op, "cudaLaunchKernel", t + 6011, 5, kernel="gemm", gpu_dur=3000)
        b.runtime("cudaDeviceSynchronize", t + 6018, 3005)
    assert finding(analyze(b.load(), ID), ID) is None


def test_short_frames_are_not_reported() -> None:
    assert finding(analyze(pre_trace(pre_us=400).load(), ID), ID) is None


@pytest.mark.shared
def test_timesformer_video_decode_and_image_processor() -> None:
    from advisor.trace import load_trace

    rel = "tracelens/h100/facebook_timesformer-base-finetuned-k400__1016002.json.gz"
    trace = load_trace(shared_trace(rel))
    f = finding(analyze(trace, ID), ID)
    assert f is not None
    assert f.evidence[0].total_ms >= 200  # of the 383 ms step
    text = " ".join([f.summary] + [e.what for e in f.evidence])
    assert "read_video_pyav" in text and "image_processing_videomae" in text
    g = finding(analyze(trace, "gpu-idle"), "gpu-idle")
    assert g is not None
    host = [e for e in g.evidence if e.what.startswith("waiting for the host to launch")]
    assert not host or host[0].total_ms < 20  # the 217 ms are no longer "host launch"
    pre = [e for e in g.evidence if "preprocessing" in e.what]
    assert pre and pre[0].total_ms >= 200


def test_cpu_sample_names_the_image_processor_and_the_call() -> None:
    from advisor.trace import load_trace

    f = finding(analyze(load_trace(SAMPLES / "host_preprocessing.cpu.json.gz"), ID), ID)
    assert f is not None and f.est_savings_ms > 0
    assert ("host_preprocessing.py", 71) in {(loc.file, loc.line) for loc in f.locations}
    assert "__call__ (host_preprocessing.py:29)" in f.summary and "resize" in f.summary
