"""attention-materialized: matmul -> scale -> softmax -> matmul on one attention's shapes."""

from __future__ import annotations

import pytest
from advisor.detectors._attention import chains

from advisor.analysis.pipeline import Options, analyze_trace
from advisor.trace import load_trace
from tests.conftest import shared_trace
from tests.tracebuilder import TraceBuilder

ID = "attention-materialized"
ONLY = Options(only=frozenset({ID}))
H100 = "NVIDIA H100 80GB HBM3"
BF16 = ["c10::BFloat16", "c10::BFloat16"]
GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_128x128_32x3_nn_align8>"
MUL = "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<c10::BFloat16>>"
SOFTMAX = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16>"


def _trace(L: int = 1024, S: int = 1024, fused: bool = False, linked: bool = True):  # type: ignore[no-untyped-def]
    """3 GPU-bound steps of one attention over 8 x 12 heads, head dim 64: as matmul, mul,
    softmax, matmul (300, 150, 300, 300 us), or as one SDPA call (``fused``). ``linked``:
    False makes the softmax read a tensor the first matmul did not produce."""
    b = TraceBuilder(cc=(9, 0), gpu_name=H100)
    span = 1400.0
    q, k = [8, 12, L, 64], [8, 12, 64, S]
    scores = [8, 12, L, S] if linked else [8, 12, L, S + 1]
    for s in range(3):
        t0 = s * span
        b.step(s + 1, t0, span)
        g = t0 + 100
        if fused:
            o = b.op(
                "aten::scaled_dot_product_attention",
                t0 + 10,
                40,
                dims=[q, [8, 12, S, 64], [8, 12, S, 64]],
                types=BF16,
            )
            i = b.op(
                "aten::_scaled_dot_product_flash_attention",
                t0 + 12,
                30,
                dims=[q, [8, 12, S, 64], [8, 12, S, 64]],
                types=BF16,
            )
            assert o
            b.launch(
                i, "cudaLaunchKernel", t0 + 20, 5, kernel="flash_fwd_kernel", gpu_ts=g, gpu_dur=200
            )
            g += 200
        else:
            steps = [
                ("aten::matmul", "aten::bmm", [q, k], [[96, L, 64], [96, 64, S]], GEMM, 300),
                ("aten::mul", None, [scores, []], None, MUL, 150),
                ("aten::softmax", "aten::_softmax", [scores, [], []], None, SOFTMAX, 300),
                (
                    "aten::matmul",
                    "aten::bmm",
                    [scores, [8, 12, S, 64]],
                    [[96, L, S], [96, S, 64]],
                    GEMM,
                    300,
                ),
            ]
            for j, (outer, inner, dims, idims, kern, dur) in enumerate(steps):
                ts = t0 + 10 + 40 * j
                o = b.op(outer, ts, 30, dims=dims, types=BF16)
                if inner:
                    o = b.op(inner, ts + 2, 25, dims=idims or dims, types=BF16)
                b.launch(o, "cudaLaunchKernel", ts + 10, 5, kernel=kern, gpu_ts=g, gpu_dur=dur)
                g += dur
        b.runtime("cudaDeviceSynchronize", t0 + 200, g + 10 - t0 - 200)
    return b.load()


def test_chain_found_and_valued_against_a_fused_kernel() -> None:
    tr = _trace()
    (c,) = {(x.bh, x.L, x.S, x.E, x.Ev) for x in chains(tr, 128)}
    assert c == (96, 1024, 1024, 64, 64)
    (f,) = analyze_trace(tr, None, ONLY).findings
    assert "largest: 96 heads x 1024 x 1024 scores, head dim 64" in f.summary
    # fused kernel: 25.8 GFLOP at 40% of 989.5 TFLOP/s = 65.1 us, against 1050 us of kernels
    assert "take 1.05 ms per step" in f.summary and "would take 65 us" in f.summary
    # replayed: 985 us of kernel time less, of which the later kernels' launches keep ~75 us
    assert 0.85 < f.est_savings_ms <= 0.985
    assert "scaled_dot_product_attention" in f.snippet and 'attn_implementation="sdpa"' in f.snippet
    claimed = {e.what for e in f.evidence if e.what.startswith("claimed kernel")}
    assert len(claimed) == 3  # the two GEMMs (one name), the mul and the softmax
    # kernel-efficiency leaves these kernels to this finding
    both = analyze_trace(tr, None, Options(only=frozenset({ID, "kernel-efficiency"})))
    assert [f.id for f in both.findings] == [ID]


def test_fused_unlinked_and_short_attention_is_not_reported() -> None:
    assert analyze_trace(_trace(fused=True), None, ONLY).findings == ()
    assert analyze_trace(_trace(linked=False), None, ONLY).findings == ()
    assert chains(_trace(L=64, S=64), 128) == []


@pytest.mark.shared
def test_timesformer_h100() -> None:
    rel = "tracelens/h100/facebook_timesformer-base-finetuned-k400__1016002.json.gz"
    rep = analyze_trace(load_trace(shared_trace(rel)), None)
    (f,) = [f for f in rep.findings if f.id == ID]
    # softmax over [8, 12, 3137, 3137] (68.7 ms) between two bmm (43.2 ms) and a scale (15.5
    # ms): one fused kernel would take 7.3 ms for the 12 layers
    assert "96 heads x 3137 x 3137 scores, head dim 64" in f.summary
    assert "would take 7.33 ms" in f.summary
    assert f.est_savings_ms >= 80
    claimed = [e.what for e in f.evidence if e.what.startswith("claimed kernel")]
    assert any("SoftMaxForward" in c for c in claimed) and any("s1688gemm" in c for c in claimed)
    # the three kernels are claimed once: not by kernel-efficiency nor misaligned-dims
    others = {f.id for f in rep.findings}
    assert "kernel-efficiency" not in others
    mis = [f for f in rep.findings if f.id == "misaligned-dims"]
    assert not mis or all("3137" not in e.what for f in mis for e in f.evidence)
    # nor are the chains' operand copies (36 clones in aten::matmul per step) device-copies';
    # the 86 copies per step left are under device_copies.min_per_step (100)
    assert any("direct_copy" in c for c in claimed) and "device-copies" not in others
