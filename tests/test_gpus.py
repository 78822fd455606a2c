"""The table of GPUs (advisor/trace/gpus.py): rows found from the names traces write, dense
peaks per dtype, and the rows' own consistency."""

from __future__ import annotations

import pytest

from advisor.trace import gputable
from advisor.trace.gpus import GPUS, gpu, match_name, spec_for
from advisor.trace.model import Device


def dev(name: str, mem_gib: int = 80, sms: int | None = None, vendor: str = "nvidia") -> Device:
    return Device(0, name, None, mem_gib * 1024**3, sms, vendor)


@pytest.mark.parametrize(
    ("name", "mem_gib", "row"),
    [
        ("Tesla V100-SXM2-32GB", 32, "V100 SXM2"),
        ("Tesla V100-DGXS-32GB", 32, "V100 SXM2"),
        ("Tesla V100-PCIE-16GB", 16, "V100 PCIe"),
        ("Tesla T4", 16, "T4"),
        ("NVIDIA A100-PG509-200", 40, "A100 SXM 40GB"),
        ("NVIDIA A100-SXM4-80GB", 80, "A100 SXM 80GB"),
        ("NVIDIA A100-PCIE-40GB", 40, "A100 PCIe 40GB"),
        ("NVIDIA A100 80GB PCIe", 80, "A100 PCIe 80GB"),
        ("NVIDIA A10G", 24, "A10G"),
        ("NVIDIA A10", 24, "A10"),
        ("NVIDIA GeForce RTX 3090", 24, "RTX 3090"),
        ("NVIDIA GeForce RTX 4090", 24, "RTX 4090"),
        ("NVIDIA L4", 24, "L4"),
        ("NVIDIA L40S", 48, "L40S"),
        ("NVIDIA H100 80GB HBM3", 80, "H100 SXM"),
        ("NVIDIA H100 PCIe", 80, "H100 PCIe"),
        ("NVIDIA H100 NVL", 94, "H100 NVL"),
        ("NVIDIA H200", 141, "H200 SXM"),
        ("NVIDIA GH200 480GB", 96, "GH200"),
        ("NVIDIA B200", 180, "B200"),
        ("NVIDIA B300 SXM6 AC", 268, "B300"),
        ("AMD Instinct MI250X/MI250", 64, "MI250X (one GCD)"),
        ("AMD Instinct MI300X VF", 192, "MI300X"),
        ("AMD Instinct MI300X", 192, "MI300X"),
        ("AMD Instinct MI325X", 256, "MI325X"),
        ("AMD Instinct MI355X", 288, "MI355X"),
    ],
)
def test_rows_from_trace_names(name: str, mem_gib: int, row: str) -> None:
    assert spec_for(dev(name, mem_gib)) is gpu(row)


def test_unnamed_and_unknown_devices() -> None:
    # ROCm lists some GPUs under a generic name: the CU count, architecture and memory name it
    radeon = Device(0, "AMD Radeon Graphics", (9, 0), 64 * 1024**3, 104, "amd")
    assert spec_for(radeon) is gpu("MI250 (one GCD)")
    blank = Device(0, "", (9, 4), 192 * 1024**3, 304, "amd")
    assert spec_for(blank) is gpu("MI300X")
    assert spec_for(Device(0, "", (9, 4), 256 * 1024**3, 304, "amd")) is gpu("MI325X")
    assert spec_for(dev("NVIDIA GeForce GTX 1080")) is None and spec_for(None) is None
    assert match_name("h100") is gpu("H100 SXM") and match_name("mi300x") is gpu("MI300X")


def test_dense_peaks_per_dtype() -> None:
    h100, a100, v100, mi300 = gpu("H100 SXM"), gpu("A100 SXM 40GB"), gpu("V100 SXM2"), gpu("MI300X")
    # the datasheet's 1,979 TFLOP/s BF16 is with sparsity: dense is half
    assert h100.tflops("bfloat16", True) == 989.5 and h100.tflops("float32", False) == 67
    assert h100.tflops("float8", True) == 1979
    assert a100.tflops("float32", True) == 156.0 and v100.tflops("float32", True) == 15.7
    assert v100.tflops("bfloat16", True) == 15.7  # no BF16 tensor math before Ampere
    assert mi300.tflops("bfloat16", True) == 1307.4 and mi300.unit == "CUs"
    assert v100.unit == "SMs" and gpu("MI355X").tflops("float32", True) == 157.3


def test_table_is_consistent() -> None:
    names = [g.name for g in GPUS]
    assert len(names) == len(set(names))
    for g in GPUS:
        assert g.vendor in ("nvidia", "amd") and g.units > 0 and g.mem_gbs > 0
        # no tensor math in a format (Pascal): 0, and the FP32 rate is used
        assert g.fp32 > 0 and (g.fp16 >= g.fp32 or g.fp16 == 0)
        assert g.tflops("float16", True) >= g.fp32
        assert g.arch.startswith("sm_" if g.vendor == "nvidia" else "gfx")
        # every row cites a document of the source list
        assert g.source and f"- ``{g.source}``:" in (gputable.__doc__ or "")
        assert g.link_gbs is None or g.link_gbs > 0


@pytest.mark.parametrize(
    ("name", "mem_gib", "row", "link"),
    [
        # the GPUs people profile on beyond the data centre's newest (issue 37 item 6)
        ("Quadro GP100", 16, "Quadro GP100", "PCIe 3.0 x16"),
        ("Tesla P100-SXM2-16GB", 16, "P100 SXM2", "NVLink"),
        ("Tesla P100-PCIE-12GB", 12, "P100 PCIe 12GB", "PCIe 3.0 x16"),
        ("Tesla P40", 24, "P40", "PCIe 3.0 x16"),
        ("NVIDIA GeForce RTX 2080 Ti", 11, "RTX 2080 Ti", "PCIe 3.0 x16"),
        ("NVIDIA GeForce RTX 2080", 8, "RTX 2080", "PCIe 3.0 x16"),
        ("Quadro RTX 6000", 24, "Quadro RTX 6000", "PCIe 3.0 x16"),
        ("Tesla V100S-PCIE-32GB", 32, "V100S PCIe", "PCIe 3.0 x16"),
        ("NVIDIA A30", 24, "A30", "PCIe 4.0 x16"),
        ("NVIDIA A40", 48, "A40", "PCIe 4.0 x16"),
        ("NVIDIA A2", 16, "A2", "PCIe 4.0 x16"),
        ("NVIDIA RTX A6000", 48, "RTX A6000", "PCIe 4.0 x16"),
        ("NVIDIA GeForce RTX 3080 Ti", 12, "RTX 3080 Ti", "PCIe 4.0 x16"),
        ("NVIDIA GeForce RTX 3090 Ti", 24, "RTX 3090 Ti", "PCIe 4.0 x16"),
        ("NVIDIA RTX 6000 Ada Generation", 48, "RTX 6000 Ada", "PCIe 4.0 x16"),
        ("NVIDIA GeForce RTX 5090", 32, "RTX 5090", "PCIe 5.0 x16"),
        ("NVIDIA A800-SXM4-80GB", 80, "A800 SXM 80GB", "NVLink"),
        ("NVIDIA H800", 80, "H800 SXM", "NVLink"),
        ("NVIDIA GB10", 128, "GB10", ""),
        ("AMD Instinct MI100", 32, "MI100", "PCIe 4.0 x16"),
        ("AMD Instinct MI210", 64, "MI210", "PCIe 4.0 x16"),
        ("AMD Radeon RX 7900 XTX", 24, "RX 7900 XTX", "PCIe 4.0 x16"),
        ("NVIDIA A100-SXM4-80GB", 80, "A100 SXM 80GB", "NVLink"),
    ],
)
def test_more_rows_and_their_links(name: str, mem_gib: int, row: str, link: str) -> None:
    g = spec_for(dev(name, mem_gib))
    assert g is gpu(row) and g.link == link


def test_links_per_direction() -> None:
    # NVLink per direction: A100 600 GB/s both ways -> 300; V100 SXM2 300 -> 150; H100 900 -> 450
    assert gpu("A100 SXM 40GB").link_gbs == 300 and gpu("V100 SXM2").link_gbs == 150
    assert gpu("H100 SXM").link_gbs == 450 and gpu("T4").link_gbs == 15.75
    assert gpu("MI300X").link == "xGMI (Infinity Fabric)" and gpu("GB10").link_gbs is None


@pytest.mark.parametrize(
    ("gpu_name", "cc", "kernel", "types", "row"),
    [
        ("Quadro GP100", (6, 0), "maxwell_sgemm_128x64_nn", ["float", "float"], "Quadro GP100"),
        (
            "NVIDIA GeForce RTX 2080 Ti",
            (7, 5),
            "turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_nn",
            ["c10::Half", "c10::Half"],
            "RTX 2080 Ti",
        ),
    ],
)
@pytest.mark.parametrize("kineto_2021", [False, True])
def test_kernel_efficiency_runs_on_more_gpus(
    gpu_name: str, cc: tuple[int, int], kernel: str, types: list[str], row: str, kineto_2021: bool
) -> None:
    # 2048^3: 17.2 GFLOP; at 10.3 TFLOP/s FP32 (GP100) 1.7 ms, at 53.8 FP16 (2080 Ti) 0.32 ms;
    # each call takes 40 ms: a few % of the peak, reported (was: "no peak figures")
    from advisor.analysis.pipeline import Options, analyze_trace
    from tests.tracebuilder import TraceBuilder

    b = TraceBuilder(cc=cc, gpu_name=gpu_name, total_mem=16 * 1024**3)
    for s in range(3):
        t0 = s * 50_000.0
        b.step(s + 1, t0, 50_000)
        o = b.op("aten::mm", t0 + 10, 20, dims=[[2048, 2048], [2048, 2048]], types=types)
        b.launch(o, "cudaLaunchKernel", t0 + 12, 5, kernel=kernel, gpu_ts=t0 + 30, gpu_dur=40_000)
        b.runtime("cudaDeviceSynchronize", t0 + 40, 40_000)
    from tests.kineto2021 import load_2021

    trace = load_2021(b) if kineto_2021 else b.load()
    rep = analyze_trace(trace, None, Options(only=frozenset({"kernel-efficiency"})))
    assert not rep.skipped, rep.skipped
    (f,) = rep.findings
    assert f"the {row}'s compute limit" in f.summary
