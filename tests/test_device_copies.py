"""device-copies: storms of device-to-device copies (built traces, then real ones)."""

from __future__ import annotations

import pytest

from advisor.analysis.pipeline import Options, analyze_trace
from advisor.trace import load_trace
from tests.conftest import SAMPLES, shared_trace
from tests.tracebuilder import TraceBuilder

ID = "device-copies"
ONLY = Options(only=frozenset({ID}))
COPY_KERNEL = (
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda"
    "(at::TensorIteratorBase&)::{lambda(float)#1}>(int)"
)


def _copies(
    n: int = 150,
    context: str = "CompiledFunctionBackward",
    dur: float = 20.0,
    steps: int = 3,
    kernel: bool = False,
) -> TraceBuilder:
    """Each 10 ms step: a 2 ms matmul, then ``n`` clones (copy_ under clone under ``context``),
    each a DtoD memcpy (or a copy kernel) of ``dur`` us, 30 us apart."""
    b = TraceBuilder()
    for s in range(steps):
        t0 = s * 10_000
        b.step(s + 1, t0, 10_000)
        mm = b.op("aten::mm", t0 + 10, 60)
        b.launch(
            mm,
            "cudaLaunchKernel",
            t0 + 20,
            5,
            kernel="volta_sgemm_128x64_nn",
            gpu_ts=t0 + 100,
            gpu_dur=2_000,
        )
        b.op(context, t0 + 2_200, n * 30 + 50)
        for i in range(n):
            ts = t0 + 2_210 + i * 30
            b.op("aten::clone", ts, 25)
            cp = b.op("aten::copy_", ts + 2, 20)
            if kernel:
                b.launch(
                    cp,
                    "cudaLaunchKernel",
                    ts + 5,
                    5,
                    kernel=COPY_KERNEL,
                    gpu_ts=ts + 10,
                    gpu_dur=dur,
                )
            else:
                b.launch(
                    cp,
                    "cudaMemcpyAsync",
                    ts + 5,
                    5,
                    gpu_ts=ts + 10,
                    gpu_dur=dur,
                    memcpy=("Memcpy DtoD (Device -> Device)", 1 << 20),
                )
    return b


def test_compiled_clone_storm_is_reported() -> None:
    (f,) = analyze_trace(_copies().load(), None, ONLY).findings
    # 150 x 20 us = 3 ms of a 10 ms step; half claimed
    assert "150 device-to-device copies per step (150 DtoD memcpys, 0 copy kernels)" in f.summary
    assert "3.00 ms of GPU time per step (30.0% of the 10.0 ms step)" in f.summary
    assert "aten::clone in CompiledFunctionBackward" in f.summary
    # replayed: half the copies' GPU time and half their ops' host time (3.75 ms) gone
    assert 0.5 < f.est_savings_ms <= 3.0 + 3.75
    lo, hi = f.est_savings_range_ms or (0.0, 0.0)
    assert lo < f.est_savings_ms < hi
    assert any(a.startswith("Replayed:") for a in f.assumptions)
    assert "aot_graphs" in f.recommendation and "aot_graphs" in f.snippet
    assert f.evidence[0].what == (
        "aten::clone in CompiledFunctionBackward (compiled): 150 per step, 157.3 MB per step"
    )
    assert f.evidence[0].count == 450


def test_cause_follows_the_op_chain() -> None:
    (f,) = analyze_trace(
        _copies(context="torch.distributed.ddp.reducer::copy_bucket_to_grad", kernel=True).load(),
        None,
        ONLY,
    ).findings
    assert "gradient_as_bucket_view=True" in f.recommendation
    assert "gradient_as_bucket_view=True" in f.snippet
    assert "0 DtoD memcpys, 150 copy kernels" in f.summary
    (g,) = analyze_trace(_copies(context="aten::contiguous").load(), None, ONLY).findings
    assert "(contiguous)" in g.evidence[0].what and "memory format" in g.recommendation


def test_few_or_cheap_copies_are_not_reported() -> None:
    assert analyze_trace(_copies(n=60).load(), None, ONLY).findings == ()
    # 150 x 0.5 us = 0.075 ms: 0.75% of the step, under the 1% floor
    assert analyze_trace(_copies(dur=0.5).load(), None, ONLY).findings == ()
    over = Options(only=ONLY.only, overrides={"device_copies.min_per_step": 50.0})
    assert len(analyze_trace(_copies(n=60).load(), None, over).findings) == 1


def test_missing_data() -> None:
    cpu = TraceBuilder(cc=None)
    cpu.step(1, 0, 1000)
    for i in range(200):
        cpu.op("aten::clone", 10 + i * 4, 3)
    rep = analyze_trace(cpu.load(), None, ONLY)
    assert rep.findings == () and rep.skipped[0].reason == "no GPU activity in this trace"
    # copies launched outside any op: still counted, named as such, no source line; they queue
    # (40 us each, launched every 30 us) and the step ends with a synchronize that waits for
    # them, so fewer copies shorten the step
    b = TraceBuilder()
    for s in range(3):
        b.step(s + 1, s * 5_000, 5_000)
        for i in range(120):
            b.launch(
                None,
                "cudaMemcpyAsync",
                s * 5_000 + 10 + i * 30,
                5,
                gpu_ts=s * 5_000 + 15 + i * 40,
                gpu_dur=40,
                memcpy=("Memcpy DtoD (Device -> Device)", 4096),
            )
        b.runtime("cudaDeviceSynchronize", s * 5_000 + 3_700, 1_120)
    (f,) = analyze_trace(b.load(), None, ONLY).findings
    assert "(no launching op)" in f.summary and f.locations == ()
    assert 0 < f.est_savings_ms <= 2.4  # at most half of 120 x 40 us


# ---- real traces


@pytest.mark.shared
def test_df_index_resolver_gradient_clones_in_compiled_backward() -> None:
    trace = load_trace(shared_trace("hta/df_index_resolver/df_index_resolver.json.gz"))
    (f,) = analyze_trace(trace, None, ONLY).findings
    # 408 DtoD memcpys + 69 copy kernels per step, 5.27 ms of the 346 ms step, 441 per step from
    # aten::clone inside CompiledFunctionBackward (one per gradient)
    assert "477 device-to-device copies per step (408 DtoD memcpys, 69 copy kernels)" in f.summary
    assert "5.27 ms of GPU time per step (1.5% of the 346 ms step)" in f.summary
    assert "aten::clone in autograd::engine::evaluate_function: CompiledFunctionBackward" in (
        f.summary
    )
    assert f.evidence[0].count == 2205 and "(compiled)" in f.evidence[0].what
    # their ops take 31.6 ms of host time per step on a host-bound step: the replay finds
    # more than the GPU time, never more than GPU and host time together
    assert "their ops 31.6 ms of host time" in f.summary
    assert 5.27 < f.est_savings_ms < 5.27 + 31.6


@pytest.mark.shared
def test_negative_queue_accumulate_grad_and_compiled_copies() -> None:
    trace = load_trace(shared_trace("hta/negative_queue_length_values_check/rank0.json.gz"))
    (f,) = analyze_trace(trace, None, ONLY).findings
    assert "285 device-to-device copies per step" in f.summary
    assert "AccumulateGrad" in f.evidence[0].what and "(compiled)" in f.evidence[1].what
    assert "set_to_none=True" in f.recommendation and "aot_graphs" in f.recommendation


QUIET = [
    "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
    "kineto/resnet50_num_workers_4/worker0.1623213129365.pt.trace.json.gz",
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",  # 320/step, 0.8%
    "hta/trace_diff/control/control.json.gz",
]


@pytest.mark.shared
@pytest.mark.parametrize("rel", QUIET)
def test_quiet_on_traces_without_copy_storms(rel: str) -> None:
    rep = analyze_trace(load_trace(shared_trace(rel)), None, ONLY)
    assert rep.findings == () and not rep.errored


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.json.gz")), ids=lambda p: p.name)
def test_quiet_on_cpu_sample_traces(path) -> None:  # type: ignore[no-untyped-def]
    rep = analyze_trace(load_trace(path), None, ONLY)
    assert rep.findings == () and not rep.errored
