"""advisor diff pairs a renamed kernel only within one kernel family and launching op: two
kernels of one family that different ops launch are different work, not a rename."""

from __future__ import annotations

from pathlib import Path

from advisor.analysis.pipeline import Options
from advisor.multirank.diff import diff_sides, load_side
from tests.tracebuilder import TraceBuilder

GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn"


def _run(path: Path, kernels: list[tuple[str, str, float]], steps: int = 3) -> Path:
    b = TraceBuilder()
    for s in range(steps):
        t0 = s * 1_000.0
        b.step(s + 1, t0, 1_000.0)
        host, gpu = t0 + 5, t0 + 50
        for op_name, kname, dur in kernels:
            op = b.op(op_name, host, 4)
            b.launch(op, "cudaLaunchKernel", host + 1, 2, kernel=kname, gpu_ts=gpu, gpu_dur=dur)
            host += 5
            gpu += dur
    return b.write(path)


def test_kernels_of_one_family_launched_by_different_ops_do_not_pair(tmp_path: Path) -> None:
    """A writes the KV cache (``reshape_and_cache_flash``: "flash" makes it an attention-family
    name) where B runs paged attention, as often: not a rename."""
    a = _run(
        tmp_path / "a.json",
        [
            ("aten::mm", GEMM, 100.0),
            ("_C_cache_ops::reshape_and_cache_flash", "reshape_and_cache_flash_kernel", 20.0),
        ],
    )
    b = _run(
        tmp_path / "b.json",
        [
            ("aten::mm", GEMM, 100.0),
            ("_rocm_C::paged_attention", "paged_attention_ll4mi_QKV_kernel", 60.0),
        ],
    )
    e = diff_sides(load_side(a, Options()), load_side(b, Options()))["explain"]
    assert e["renamed"] == []
    labels = {x["label"] for x in e["lines"]}
    assert "attention kernels, paired (1 per step)" not in labels
    assert any(x["kind"] == "added" for x in e["lines"])


def test_a_renamed_kernel_under_a_renamed_compiled_graph_pairs(tmp_path: Path) -> None:
    """The launching op compares by its words: a compiled graph's new hash still matches."""
    a = _run(
        tmp_path / "a.json",
        [("## Call CompiledFxGraph f3kq2z7 ##", "aiter::fmha_fwd_hd128_bf16", 200.0)],
    )
    b = _run(tmp_path / "b.json", [("## Call CompiledFxGraph p9x4m1c ##", "sage_fwd", 210.0)])
    e = diff_sides(load_side(a, Options()), load_side(b, Options()))["explain"]
    assert [(r["a"], r["b"]) for r in e["renamed"]] == [("aiter::fmha_fwd_hd128_bf16", "sage_fwd")]
