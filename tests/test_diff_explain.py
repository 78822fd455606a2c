"""advisor diff explains: kernels paired through renames, changes grouped by family and by the
kernel they run before, an attribution whose lines add up to the change; and the folders
advisor writes accepted as sides."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.analysis.pipeline import Options
from advisor.multirank.diff import diff_sides, load_side
from advisor.trace.kernelnames import kernel_family, name_key, name_tokens, pair_renamed
from tests.conftest import HANG_S, SAMPLES, shared_trace
from tests.tracebuilder import TraceBuilder

GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn"


def test_name_key_and_tokens() -> None:
    # Triton's numeric suffix and the order of its fused parts do not count
    assert name_key("triton_poi_fused_add_mul_25") == name_key("triton_poi_fused_mul_add_26")
    assert name_key("triton_red_fused_sum_3") != name_key("triton_poi_fused_sum_3")
    assert name_key("void foo<int>(int)") == "foo<int>(int)"
    # template arguments, parameter lists and words holding digits are not words of the name
    assert name_tokens("void gemm_kernel<128, 64>(float*, int)") == {"gemm", "kernel"}
    assert name_tokens("## Call CompiledFxGraph fmoq6b7 ##") == {"call", "compiled", "fx", "graph"}
    assert name_tokens("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__") == {
        "enumerate",
        "multi",
        "processing",
        "data",
        "loader",
        "iter",
        "next",
    }


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("triton_poi_fused_add_fmha_fwd_mul_3", "elementwise"),  # Triton's kind first
        ("triton_red_fused_native_layer_norm_7", "reduction"),
        ("aiter::fmha_fwd_hd128_bf16_rtz", "attention"),
        ("flash_fwd_kernel<Flash_fwd_kernel_traits<128>>", "attention"),
        ("Cijk_Alik_Bljk_BBS_BH_MT256x192x64_MI16x16x1", "GEMM"),
        (GEMM, "GEMM"),
        ("igemm_fwd_gtcx3_nhwc_bf16_bx0", "convolution"),
        ("sage_quant_kernel", "quantization"),
        ("void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float>>()", "reduction"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>>()",
            "fill",
        ),
        ("void at::native::vectorized_elementwise_kernel<4, AbsFunctor<float>>()", "elementwise"),
        ("void at::native::bfloat16_copy_kernel_cuda()", "copy"),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "communication"),
        # a name a dedicated-stream rule of commroles would take is computation here
        ("void groupnorm_kernel_dispatch_up<float>()", "normalization"),
        ("some_custom_kernel", "other"),
    ],
)
def test_kernel_family(name: str, family: str) -> None:
    assert kernel_family(name) == family


def test_pair_renamed() -> None:
    a = {"fmha_fwd_hd128": (4.0, "attention"), "old_gemm_a": (8.0, "GEMM")}
    b = {"sage_fwd": (4.0, "attention"), "new_gemm_b": (7.0, "GEMM"), "x_fwd": (3.0, "attention")}
    # same family and count: paired; a count that changed is not a rename
    assert pair_renamed(a, b) == [("fmha_fwd_hd128", "sage_fwd")]
    assert pair_renamed(a, b, min_similarity=0.5) == []  # they share one word of two


def _run(path: Path, sage: bool, steps: int = 3) -> Path:
    """Each step: two layers of GEMM, a Triton kernel and attention on one stream; ``sage``:
    the GEMM 10 us faster, a quantization and a reduction kernel before a renamed attention
    kernel, the Triton kernel renamed by Inductor (suffix and part order)."""
    b = TraceBuilder()
    step_us = 1000.0
    for s in range(steps):
        t0 = 10_000.0 + s * step_us
        b.step(s + 1, t0, step_us)
        gpu = t0 + 50
        host = t0 + 5
        kernels = []
        for _ in range(2):
            kernels.append(("aten::mm", GEMM, 90.0 if sage else 100.0))
            tri = "triton_poi_fused_mul_add_26" if sage else "triton_poi_fused_add_mul_25"
            kernels.append(("Torch-Compiled Region", tri, 20.0))
            if sage:
                kernels.append(("sage_quant", "sage_quant_kernel", 30.0))
                kernels.append(
                    ("aten::amax", "void at::native::reduce_kernel<128, 4, MaxOps<float>>()", 15.0)
                )
            attn = "sage_fwd" if sage else "aiter::fmha_fwd_hd128_bf16"
            kernels.append(("attention", attn, 201.0 if sage else 200.0))
        for op_name, kname, dur in kernels:
            op = b.op(op_name, host, 4)
            b.launch(op, "cudaLaunchKernel", host + 1, 2, kernel=kname, gpu_ts=gpu, gpu_dur=dur)
            host += 5
            gpu += dur
    return b.write(path)


@pytest.fixture()
def pair(tmp_path: Path) -> tuple[Path, Path]:
    return _run(tmp_path / "a.json", False), _run(tmp_path / "b.json", True)


def test_explain_pairs_renames_and_groups_added_work(pair: tuple[Path, Path]) -> None:
    d = diff_sides(load_side(pair[0], Options()), load_side(pair[1], Options()))
    e = d["explain"]
    assert e is not None and e["steps_compared"] >= 1
    renamed = {(r["a"], r["b"]) for r in e["renamed"]}
    assert ("aiter::fmha_fwd_hd128_bf16", "sage_fwd") in renamed
    # the Triton kernel kept its key: paired without a rename
    assert not any(r["a"].startswith("triton") for r in e["renamed"])
    lines = {x["label"]: x for x in e["lines"]}
    added = lines["added/removed before sage_fwd (was aiter::fmha_fwd_hd128_bf16)"]
    assert added["delta_ms"] == pytest.approx(2 * 0.045, abs=1e-3)
    assert added["families"] == {"quantization": 0.06, "reduction": 0.03}
    assert lines["GEMM kernels, paired (2 per step)"]["delta_ms"] == pytest.approx(-0.02)
    assert lines["attention kernels, paired (2 per step)"]["delta_ms"] == pytest.approx(0.002)
    assert "elementwise kernels, paired (2 per step)" not in lines  # unchanged: no line
    # the lines add up to the change of the mean step (idle absorbs the rest of the step)
    assert e["lines_sum_ms"] == pytest.approx(d["step_ms_median"]["delta_ms"], abs=0.002)
    assert e["lines_sum_ms"] == pytest.approx(e["mean_step_delta_ms"], abs=0.002)
    fam = {x["family"]: x["delta_ms"] for x in e["by_family"]}
    assert fam["quantization"] == pytest.approx(0.06) and fam["GEMM"] == pytest.approx(-0.02)
    ops = {x["op"]: x["delta_ms"] for x in e["by_op"]}
    assert ops["sage_quant"] == pytest.approx(0.06) and ops["aten::mm"] == pytest.approx(-0.02)
    # the kernel list pairs the renamed kernels: no row for a rename alone
    rows = {r["name"]: r for r in d["kernels"]}
    assert rows["sage_fwd"]["a_name"] == "aiter::fmha_fwd_hd128_bf16"
    assert rows["sage_fwd"]["delta_ms"] == pytest.approx(0.002)
    assert "triton_poi_fused_mul_add_26" not in rows  # same key, same time


def test_explain_of_a_run_with_itself_is_empty(pair: tuple[Path, Path]) -> None:
    side = load_side(pair[0], Options())
    e = diff_sides(side, side)["explain"]
    assert e["lines"] == [] and e["renamed"] == [] and e["lines_sum_ms"] == 0.0


def test_diff_accepts_analysis_output_folders(pair: tuple[Path, Path], tmp_path: Path) -> None:
    outs = []
    for p in pair:
        out = tmp_path / f"out-{p.stem}"
        cmd = [sys.executable, "-m", "advisor", "analyze", str(p), "--out", str(out)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_S)
        assert r.returncode == 0, r.stderr
        outs.append(out)
    cmd = [sys.executable, "-m", "advisor", "diff", str(outs[0]), str(outs[1])]
    r = subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["explain"]["renamed"][0]["b"] == "sage_fwd"
    t = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_S)
    assert t.returncode == 0 and "Why the step changed" in t.stdout
    assert "added/removed before sage_fwd" in t.stdout
    # without its annotated copy, the trace its findings.json names (as written)
    (outs[0] / "trace.annotated.json.gz").unlink()
    assert load_side(outs[0], Options()).digests[0].path == str(pair[0])
    # neither: one line naming the folder and what is missing
    (outs[1] / "trace.annotated.json.gz").unlink()
    pair[1].unlink()
    bad = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_S)
    assert bad.returncode == 1 and str(outs[1]) in bad.stderr
    assert "trace.annotated.json.gz is missing" in bad.stderr and "Traceback" not in bad.stderr


def test_v100_with_itself_through_its_output_folder(tmp_path: Path) -> None:
    """The breakdown read from an analyze --out folder is the report's (the same function)."""
    out = tmp_path / "out"
    path = SAMPLES / "resnet50_v100.kineto.json.gz"
    cmd = [sys.executable, "-m", "advisor", "analyze", str(path), "--out", str(out)]
    assert subprocess.run(cmd, capture_output=True, timeout=HANG_S).returncode == 0
    side = load_side(out, Options())
    d = diff_sides(side, side)
    steps = json.loads((out / "findings.json").read_text())["views"]["steps"]
    for cat in ("compute", "dataloader", "idle", "memcpy"):
        mean = sum(r[f"{cat}_ms"] for r in steps) / len(steps)
        assert d["categories_ms"][cat]["a"] == pytest.approx(mean, abs=0.002)
    assert d["explain"]["lines"] == []


@pytest.mark.shared
def test_flux_attention_backends() -> None:
    """xDiT Flux, aiter attention vs Sage attention (742.4 vs 783.8 ms per step)."""
    xdit = "tracelens/xdit/flux_aiter"
    a = load_side(shared_trace(f"{xdit}_profile_trace_rank_0.json.gz"), Options())
    b = load_side(shared_trace(f"{xdit}_sage_profile_trace_rank_0.json.gz"), Options())
    d = diff_sides(a, b)
    e = d["explain"]
    step = d["step_ms_median"]["delta_ms"]
    assert step == pytest.approx(41.4, abs=0.1)
    assert abs(e["lines_sum_ms"] - step) <= 0.1 * abs(step)
    top = e["lines"][:2]
    # the quantization pre-pass before the attention kernel: ~+46 ms
    assert top[0]["before"] == "sage_fwd" and top[0]["was"] == "aiter::fmha_fwd_hd128_bf16_rtz"
    assert top[0]["delta_ms"] == pytest.approx(46.0, rel=0.2)
    assert {"quantization", "reduction", "fill", "elementwise"} <= set(top[0]["families"])
    assert top[1]["family"] == "GEMM" and top[1]["delta_ms"] == pytest.approx(-10.4, rel=0.2)
    attn = next(x for x in e["lines"] if x.get("family") == "attention")
    assert attn["delta_ms"] == pytest.approx(1.5, rel=0.2)
    renamed = {(r["a"], r["b"]) for r in e["renamed"]}
    assert ("aiter::fmha_fwd_hd128_bf16_rtz", "sage_fwd") in renamed
    assert (
        "triton_poi_fused_addmm_cat_gelu_view_25",
        "triton_poi_fused__unsafe_view_addmm_cat_clone_gelu_transpose_view_26",
    ) in renamed
    # renamed kernels are not listed as changes of their own; nor the annotation only A has
    assert all(r["name"] != "aiter::fmha_fwd_hd128_bf16_rtz" for r in d["kernels"])
    assert all(not r["name"].startswith("triton_poi_fused_addmm_cat") for r in d["kernels"])
    assert d["ops"][0]["name"] == "model_inference"


def test_diff_of_rank_folders_and_their_analysis(tmp_path: Path) -> None:
    """Folders of per-rank traces, and the folder an analysis of them wrote (its findings.json
    names the rank folder), compare rank by rank."""
    from tests.mr_helpers import rank_builder

    ranks_a, ranks_b = tmp_path / "a", tmp_path / "b"
    for folder, compute_end in ((ranks_a, 6_000.0), (ranks_b, 5_000.0)):
        folder.mkdir()
        for r in range(2):
            b = rank_builder(r, 2, compute_end_us=compute_end, sync=True)
            b.write(folder / f"rank{r}.trace.json")
    out = tmp_path / "out-a"
    cmd = [sys.executable, "-m", "advisor", "analyze", str(ranks_a), "--out", str(out)]
    assert subprocess.run(cmd, capture_output=True, timeout=HANG_S).returncode == 0
    assert not (out / "trace.annotated.json.gz").exists()
    sa = load_side(out, Options())
    assert [d.rank for d in sa.digests] == [0, 1]
    d = diff_sides(sa, load_side(ranks_b, Options()))
    e = d["explain"]
    (gemm,) = [x for x in e["lines"] if x["kind"] == "changed"]
    assert gemm["delta_ms"] == pytest.approx(-1.0, abs=0.01)  # the compute kernel, 1 ms shorter
    assert e["lines_sum_ms"] == pytest.approx(e["mean_step_delta_ms"], abs=0.002)
