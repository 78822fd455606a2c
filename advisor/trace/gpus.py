"""The GPUs the advisor knows: one table of datasheet peaks, per-SM limits and the link between
the GPUs of one machine, one row a GPU (the rows and the documents they cite:
:mod:`advisor.trace.gputable`).

The one home of hardware figures: the loader names a device from it (:mod:`advisor.trace.identity`)
and the detectors read its peaks (``kernel-efficiency``'s roofline) and limits through
:func:`spec_for`; the collectives' bandwidth (:mod:`advisor.derive.commbw`) reads its link.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from advisor.trace.gputable import ROWS

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
    source: str  # key of advisor.trace.gputable's source list
    names: str  # regular expression over the upper-cased device name
    link: str = ""  # what joins the GPUs of one machine: "NVLink", "PCIe 4.0 x16", "xGMI", ""
    link_gbs: float | None = None  # its peak per direction, GB/s (None: not known)

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
                source=c[16],
                names=c[17],
                **_link(c[15]),
            )
        )
    return tuple(rows)


_PCIE_GBS = {
    "pcie3": ("PCIe 3.0 x16", 15.75),
    "pcie4": ("PCIe 4.0 x16", 31.5),
    "pcie5": ("PCIe 5.0 x16", 63.0),
}
_LINK_NAMES = {"nvlink": "NVLink", "xgmi": "xGMI (Infinity Fabric)"}


def _link(cell: str) -> dict[str, Any]:
    """The link column (``nvlink:300``, ``pcie4``, ``xgmi:448``, ``-``) as GpuSpec fields."""
    if cell in _PCIE_GBS:
        name, peak = _PCIE_GBS[cell]
        return {"link": name, "link_gbs": peak}
    kind, _, gbs = cell.partition(":")
    if kind in _LINK_NAMES and gbs:
        return {"link": _LINK_NAMES[kind], "link_gbs": float(gbs)}
    return {}


GPUS: tuple[GpuSpec, ...] = _parse(ROWS)
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
_AMD_ARCH = {(9, 0): "gfx90a", (9, 4): "gfx942", (9, 5): "gfx950", (11, 0): "gfx1100"}


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
