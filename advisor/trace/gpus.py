"""The GPUs the advisor knows: one table of datasheet peaks and per-SM limits, one row a GPU.

The one home of hardware figures: the loader names a device from it (:mod:`advisor.trace.identity`)
and the detectors read its peaks (``kernel-efficiency``'s roofline) and limits through
:func:`spec_for`. Figures are the vendors' datasheet numbers for **dense** math in TFLOP/s:
where a datasheet quotes "with sparsity" (NVIDIA's Tensor Core figures since Ampere, AMD's
sparse matrix figures) the dense figure, half of it, is used. FP16 figures are with FP32
accumulation (what PyTorch's matmuls use; GeForce cards run FP16 accumulation twice as fast).
Figures are per device as PyTorch sees it: an MI250/MI250X is two devices, one per GCD, so its
rows are half the card. Limits per SM (NVIDIA) or CU (AMD): resident threads, shared memory
(LDS), 32-bit registers; L2 is the whole device's (AMD: the sum over XCDs, 4 MB each on CDNA3/4).
A figure a datasheet does not give is None.

Columns: ``fp32`` FP32 on CUDA cores / vector units; ``tf32`` FP32 inputs on Tensor Cores (TF32)
or on AMD matrix cores (XF32 on CDNA3, else FP32 MFMA), 0 where there is none; ``bf16``, ``fp16``
on Tensor / matrix cores, 0 where the format has no tensor math (BF16 before Ampere); ``fp8``,
0 where there is none; ``fp64`` vector FP64; ``mem_gbs`` memory bandwidth in GB/s.

Sources (the document each row cites by its key):

- ``v100``: NVIDIA Tesla V100 GPU Accelerator datasheet (SXM2 and PCIe columns),
  https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf;
  SMs, L2, per-SM limits: NVIDIA Tesla V100 GPU Architecture whitepaper (table 1, 3).
- ``t4``: NVIDIA T4 Tensor Core GPU datasheet,
  https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf;
  SMs, L2, limits: NVIDIA Turing GPU Architecture whitepaper (appendix A).
- ``a100``: NVIDIA A100 Tensor Core GPU datasheet (SXM and PCIe, 40 and 80 GB),
  https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf;
  SMs, L2, limits: NVIDIA A100 Tensor Core GPU Architecture whitepaper (table 3).
- ``a10``: NVIDIA A10 Tensor Core GPU datasheet,
  https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/datasheet-new/nvidia-a10-datasheet.pdf.
  The A10G (AWS EC2 G5) has no datasheet of its own: the A10's figures are used (the same GA102
  die; the A10G reports 80 SMs to the A10's 72, so its true peaks are at least these, and an
  efficiency against them errs high).
- ``ga102``: NVIDIA Ampere GA102 GPU Architecture whitepaper, appendix A (GeForce RTX 3090),
  https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf.
- ``ada``: NVIDIA Ada GPU Architecture whitepaper, appendix A (GeForce RTX 4090),
  https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf.
- ``l4``: NVIDIA L4 Tensor Core GPU datasheet,
  https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet.
- ``l40``: NVIDIA L40 and L40S datasheets,
  https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413.
- ``h100``: NVIDIA H100 Tensor Core GPU datasheet (SXM, PCIe, NVL columns),
  https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet;
  SMs, L2, limits: NVIDIA H100 Tensor Core GPU Architecture whitepaper (table 3).
- ``h200``: NVIDIA H200 Tensor Core GPU datasheet (SXM and NVL columns),
  https://resources.nvidia.com/en-us-data-center-overview-mc/en-us-data-center-overview/hpc-datasheet-sc23-h200.
- ``gh200``: NVIDIA GH200 Grace Hopper Superchip datasheet (the 96 GB HBM3 variant's 4 TB/s;
  the HBM3e variant has 4.9 TB/s),
  https://resources.nvidia.com/en-us-grace-cpu/grace-hopper-superchip.
- ``b200``: NVIDIA HGX B200 / DGX B200 datasheets (eight-GPU totals divided by eight: FP32
  600 TF, TF32 18 PF, FP16/BF16 36 PF, FP8 72 PF sparse, FP64 296 TF, 64 TB/s),
  https://resources.nvidia.com/en-us-dgx-systems/dgx-b200-datasheet; 148 SMs as the GPU
  reports them (``deviceProperties`` of a B200 trace).
- ``b300``: NVIDIA HGX B300 datasheet (eight-GPU totals divided by eight: FP32 600 TF, TF32
  18 PF, FP16/BF16 36 PF, FP8 72 PF sparse, FP64 10 TF, 8 TB/s per GPU),
  https://www.nvidia.com/en-us/data-center/hgx/; 148 SMs as the GPU reports them.
- ``mi2``: AMD Instinct MI250X, MI250 and MI210 datasheets (per OAM module of two GCDs for the
  MI250/MI250X, halved here), https://www.amd.com/en/products/accelerators/instinct/mi200.html;
  CUs, L2, LDS, VGPRs: AMD ROCm documentation, "AMD GPU specifications",
  https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html.
- ``mi3``: AMD Instinct MI300X, MI300A and MI325X datasheets,
  https://www.amd.com/en/products/accelerators/instinct/mi300.html; CUs, L2, LDS, VGPRs:
  ROCm "AMD GPU specifications" (as above).
- ``mi35``: AMD Instinct MI350X and MI355X datasheets,
  https://www.amd.com/en/products/accelerators/instinct/mi350.html (no TF32: the FP32 matrix
  figure stands in the ``tf32`` column); CUs, L2, LDS: ROCm "AMD GPU specifications".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from advisor.trace.model import Device


@dataclass(frozen=True)
class GpuSpec:
    """One GPU: dense peaks (TFLOP/s), memory bandwidth (GB/s) and per-SM/CU limits."""

    name: str  # the table row, e.g. "H100 SXM"
    vendor: str  # "nvidia" or "amd"
    arch: str  # "sm_90", "gfx942": the instruction set the GPU runs
    fp32: float
    tf32: float
    bf16: float
    fp16: float
    fp8: float
    fp64: float
    mem_gbs: float
    units: int  # SMs (NVIDIA) or CUs (AMD)
    memory_gb: float  # on-board memory (tells variants of one GPU apart)
    l2_mib: float | None
    threads_per_unit: int  # resident threads per SM/CU
    smem_per_unit_kib: int | None  # shared memory / LDS per SM/CU
    regs_per_unit: int | None  # 32-bit registers per SM/CU
    source: str  # key of the module docstring's source list
    names: str  # regular expression over the upper-cased device name

    @property
    def unit(self) -> str:
        return "CUs" if self.vendor == "amd" else "SMs"

    def tflops(self, dtype: str | None, tensor_core: bool) -> float:
        """Peak for a kernel of ``dtype`` (float32 counts as TF32 when on Tensor/matrix cores);
        a format without tensor math runs at the FP32 rate."""
        if dtype == "float16":
            return self.fp16 or self.fp32
        if dtype == "bfloat16":
            return self.bf16 or self.fp32
        if dtype == "float8":
            return self.fp8 or self.bf16 or self.fp16 or self.fp32
        if dtype == "float64":
            return self.fp64
        return self.tf32 if tensor_core and self.tf32 else self.fp32


# One row a GPU, in matching order (a more specific name before a more general one): name |
# vendor | arch | dense TFLOP/s: fp32, tf32, bf16, fp16, fp8, fp64 | memory GB/s | SMs or CUs |
# memory GB | L2 MiB (- unknown) | threads per SM/CU | shared memory (LDS) KiB per SM/CU |
# source | regular expression over the upper-cased device name ("AMD Instinct MI300X VF",
# "NVIDIA A100-SXM4-80GB", "Tesla V100-PCIE-16GB"...).
_ROWS = r"""
V100 PCIe        | nvidia | sm_70  |  14.0 |     0 |      0 |    112 |      0 |  7.0 |  900 |  80 |  32 |  6 | 2048 |  96 | v100  | V100.*PCIE
V100 SXM2        | nvidia | sm_70  |  15.7 |     0 |      0 |    125 |      0 |  7.8 |  900 |  80 |  32 |  6 | 2048 |  96 | v100  | V100
T4               | nvidia | sm_75  |   8.1 |     0 |      0 |     65 |      0 | 0.25 |  320 |  40 |  16 |  4 | 1024 |  64 | t4    | \bT4\b
A100 PCIe 40GB   | nvidia | sm_80  |  19.5 |   156 |    312 |    312 |      0 |  9.7 | 1555 | 108 |  40 | 40 | 2048 | 164 | a100  | A100.*PCIE
A100 PCIe 80GB   | nvidia | sm_80  |  19.5 |   156 |    312 |    312 |      0 |  9.7 | 1935 | 108 |  80 | 40 | 2048 | 164 | a100  | A100.*PCIE
A100 SXM 40GB    | nvidia | sm_80  |  19.5 |   156 |    312 |    312 |      0 |  9.7 | 1555 | 108 |  40 | 40 | 2048 | 164 | a100  | A100
A100 SXM 80GB    | nvidia | sm_80  |  19.5 |   156 |    312 |    312 |      0 |  9.7 | 2039 | 108 |  80 | 40 | 2048 | 164 | a100  | A100
A10G             | nvidia | sm_86  |  31.2 |  62.5 |    125 |    125 |      0 | 0.98 |  600 |  80 |  24 |  6 | 1536 | 100 | a10   | \bA10G\b
A10              | nvidia | sm_86  |  31.2 |  62.5 |    125 |    125 |      0 | 0.98 |  600 |  72 |  24 |  6 | 1536 | 100 | a10   | \bA10\b
RTX 3090         | nvidia | sm_86  |  35.6 |  35.6 |     71 |     71 |      0 | 0.56 |  936 |  82 |  24 |  6 | 1536 | 100 | ga102 | RTX 3090
RTX 4090         | nvidia | sm_89  |  82.6 |  82.6 |  165.2 |  165.2 |  330.3 | 1.29 | 1008 | 128 |  24 | 72 | 1536 | 100 | ada   | RTX 4090
L4               | nvidia | sm_89  |  30.3 |    60 |    121 |    121 |  242.5 | 0.49 |  300 |  58 |  24 | 48 | 1536 | 100 | l4    | \bL4\b
L40S             | nvidia | sm_89  |  91.6 |   183 | 362.05 | 362.05 |    733 | 1.43 |  864 | 142 |  48 |  - | 1536 | 100 | l40   | \bL40S\b
L40              | nvidia | sm_89  |  90.5 |  90.5 | 181.05 | 181.05 |    362 | 1.41 |  864 | 142 |  48 |  - | 1536 | 100 | l40   | \bL40\b
H100 PCIe        | nvidia | sm_90  |    51 |   378 |  756.5 |  756.5 |   1513 |   26 | 2000 | 114 |  80 | 50 | 2048 | 228 | h100  | H100.*PCIE
H100 NVL         | nvidia | sm_90  |    60 | 417.5 |  835.5 |  835.5 |   1671 |   30 | 3900 | 132 |  94 | 50 | 2048 | 228 | h100  | H100.*NVL
H100 SXM         | nvidia | sm_90  |    67 | 494.5 |  989.5 |  989.5 |   1979 |   34 | 3350 | 132 |  80 | 50 | 2048 | 228 | h100  | H100
GH200            | nvidia | sm_90  |    67 | 494.5 |  989.5 |  989.5 |   1979 |   34 | 4000 | 132 |  96 | 50 | 2048 | 228 | gh200 | GH200
H200 NVL         | nvidia | sm_90  |    60 | 417.5 |  835.5 |  835.5 |   1671 |   30 | 4800 | 132 | 141 | 50 | 2048 | 228 | h200  | (?<!G)H200.*NVL
H200 SXM         | nvidia | sm_90  |    67 | 494.5 |  989.5 |  989.5 |   1979 |   34 | 4800 | 132 | 141 | 50 | 2048 | 228 | h200  | (?<!G)H200
B300             | nvidia | sm_103 |    75 |  1125 |   2250 |   2250 |   4500 | 1.25 | 8000 | 148 | 288 |  - | 2048 | 228 | b300  | B300
B200             | nvidia | sm_100 |    75 |  1125 |   2250 |   2250 |   4500 |   37 | 8000 | 148 | 180 |  - | 2048 | 228 | b200  | B200
MI250X (one GCD) | amd    | gfx90a | 23.95 | 47.85 |  191.5 |  191.5 |      0 |23.95 | 1600 | 110 |  64 |  8 | 2048 |  64 | mi2   | MI250X
MI250 (one GCD)  | amd    | gfx90a | 22.65 | 45.25 | 181.05 | 181.05 |      0 |22.65 | 1600 | 104 |  64 |  8 | 2048 |  64 | mi2   | MI250
MI210            | amd    | gfx90a | 22.6  |  45.3 |    181 |    181 |      0 | 22.6 | 1638 | 104 |  64 |  8 | 2048 |  64 | mi2   | MI210
MI300A           | amd    | gfx942 | 122.6 | 490.3 |  980.6 |  980.6 | 1961.2 | 61.3 | 5300 | 228 | 128 | 24 | 2048 |  64 | mi3   | MI300A
MI325X           | amd    | gfx942 | 163.4 | 653.7 | 1307.4 | 1307.4 | 2614.9 | 81.7 | 6000 | 304 | 256 | 32 | 2048 |  64 | mi3   | MI325X
MI300X           | amd    | gfx942 | 163.4 | 653.7 | 1307.4 | 1307.4 | 2614.9 | 81.7 | 5300 | 304 | 192 | 32 | 2048 |  64 | mi3   | MI300X
MI350X           | amd    | gfx950 | 144.2 | 144.2 | 2307.2 | 2307.2 | 4614.4 | 72.1 | 8000 | 256 | 288 | 32 | 2048 | 160 | mi35  | MI350X
MI355X           | amd    | gfx950 | 157.3 | 157.3 | 2516.6 | 2516.6 | 5033.2 | 78.6 | 8000 | 256 | 288 | 32 | 2048 | 160 | mi35  | MI355X
"""


def _parse(text: str) -> tuple[GpuSpec, ...]:
    rows = []
    for line in text.strip().splitlines():
        c = [x.strip() for x in line.split("|")]
        peaks = [float(x) for x in c[3:9]]
        rows.append(
            GpuSpec(
                name=c[0],
                vendor=c[1],
                arch=c[2],
                fp32=peaks[0],
                tf32=peaks[1],
                bf16=peaks[2],
                fp16=peaks[3],
                fp8=peaks[4],
                fp64=peaks[5],
                mem_gbs=float(c[9]),
                units=int(c[10]),
                memory_gb=float(c[11]),
                l2_mib=None if c[12] == "-" else float(c[12]),
                threads_per_unit=int(c[13]),
                smem_per_unit_kib=int(c[14]),
                regs_per_unit=131072 if c[1] == "amd" else 65536,
                source=c[15],
                names=c[16],
            )
        )
    return tuple(rows)


GPUS: tuple[GpuSpec, ...] = _parse(_ROWS)
_BY_NAME = {g.name: g for g in GPUS}


def gpu(name: str) -> GpuSpec:
    """The row named ``name`` exactly (KeyError otherwise)."""
    return _BY_NAME[name]


def match_name(device_name: str, memory_bytes: int | None = None) -> GpuSpec | None:
    """The row for a device name as a trace or a user writes it ("NVIDIA H100 80GB HBM3",
    "h100", "AMD Instinct MI300X VF"); None for a GPU not in the table. Rows of one GPU that
    differ only in memory (A100 40/80 GB) are told apart by ``memory_bytes`` when given, else
    by the size written in the name."""
    n = device_name.upper().replace("_", " ")
    hits = [g for g in GPUS if re.search(g.names, n)]
    if not hits:
        return None
    same = [g for g in hits if g.names == hits[0].names]
    if len(same) == 1:
        return same[0]
    gib = memory_bytes / 1024**3 if memory_bytes else None
    if gib is None:
        m = re.search(r"(\d+)\s*GB", n)
        gib = float(m.group(1)) if m else None
    if gib is None:
        return same[0]
    return min(same, key=lambda g: abs(g.memory_gb - gib))


# deviceProperties' compute capability of AMD GPUs (HIP's major.minor of the gfx target)
_AMD_ARCH = {(9, 0): "gfx90a", (9, 4): "gfx942", (9, 5): "gfx950"}


def arch_of(vendor: str, cc: tuple[int, int] | None) -> str | None:
    """The instruction-set name of a compute capability: sm_90, gfx942 (None when unknown)."""
    if cc is None:
        return None
    if vendor == "amd":
        return _AMD_ARCH.get(cc)
    return f"sm_{cc[0]}{cc[1]}"


def spec_for(dev: Device | None) -> GpuSpec | None:
    """The table row of a device: by its name; a device listed without a usable name (ROCm
    writes "AMD Radeon Graphics" or "") by its architecture, SM/CU count and memory. None for a
    GPU not in the table."""
    if dev is None:
        return None
    hit = match_name(dev.name, dev.total_memory_bytes) if dev.name else None
    if hit is not None or not dev.num_sms:
        return hit
    arch = dev.arch or arch_of(dev.vendor, dev.compute_capability)
    same = [
        g
        for g in GPUS
        if g.units == dev.num_sms and (arch is None or g.arch == arch) and g.vendor == dev.vendor
    ]
    if not same:
        return None
    gib = (dev.total_memory_bytes or 0) / 1024**3
    return min(same, key=lambda g: abs(g.memory_gb - gib)) if gib else same[0]
