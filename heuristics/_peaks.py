"""Peak throughput of the GPUs the advisor knows: dense TFLOP/s per math mode and memory GB/s.

Used by ``kernel-efficiency`` for its roofline. Figures are the vendors' datasheet numbers for
*dense* math (NVIDIA quotes Hopper Tensor Core figures "with sparsity": those are halved here),
per device as PyTorch sees it (an MI250/MI250X is two devices, one per GCD: half the card).

Sources (vendor datasheets):

- V100: NVIDIA Tesla V100 datasheet (SXM2): FP32 15.7, FP64 7.8, Tensor 125 TFLOP/s;
  HBM2 900 GB/s.
- A100: NVIDIA A100 Tensor Core GPU datasheet (SXM): FP32 19.5, FP64 9.7 (Tensor 19.5),
  TF32 156, BF16/FP16 312 TFLOP/s; 1,555 GB/s (40 GB), 2,039 GB/s (80 GB).
- H100: NVIDIA H100 Tensor Core GPU datasheet (SXM): FP32 67, FP64 34 (Tensor 67), TF32 989,
  BF16/FP16 1,979, FP8 3,958 TFLOP/s with sparsity (halved here); 3.35 TB/s. PCIe: FP32 51,
  TF32 756, BF16 1,513, FP8 3,026 (sparse); 2 TB/s.
- H200: NVIDIA H200 Tensor Core GPU datasheet (SXM): FP32 67, FP64 34, TF32 989, BF16/FP16
  1,979, FP8 3,958 TFLOP/s with sparsity (halved here); HBM3e 4.8 TB/s.
- MI250 / MI250X: AMD Instinct MI250 and MI250X datasheets: FP32 vector 45.3 / 47.9, FP32 matrix
  90.5 / 95.7, FP64 vector 45.3 / 47.9, FP16/BF16 362.1 / 383 TFLOP/s; 3.2 TB/s; per OAM module
  of two GCDs (halved here).
- MI300X: AMD Instinct MI300X datasheet: FP32 vector 163.4, FP32 matrix 163.4, FP64 vector 81.7,
  TF32 653.7, FP16/BF16 1,307.4, FP8 2,614.9 TFLOP/s (dense); 5.3 TB/s.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.trace.model import Device


@dataclass(frozen=True)
class Peak:
    name: str  # the table row, e.g. "A100 SXM 80GB"
    fp32: float  # TFLOP/s on CUDA cores / vector units
    tf32: float  # FP32 inputs on Tensor Cores / matrix cores (0: none)
    fp16: float  # FP16/BF16 on Tensor Cores / matrix cores
    fp8: float  # 0 where the GPU has no FP8 math
    fp64: float
    mem_gbs: float
    units: int  # SMs or CUs, when the trace does not say

    @property
    def unit(self) -> str:
        return "CUs" if self.name.startswith("MI") else "SMs"

    def tflops(self, dtype: str | None, tensor_core: bool) -> float:
        """Peak for a kernel of ``dtype`` (float32 counts as TF32 when on Tensor Cores)."""
        if dtype in ("float16", "bfloat16"):
            return self.fp16
        if dtype == "float8":
            return self.fp8 or self.fp16
        if dtype == "float64":
            return self.fp64
        return self.tf32 if tensor_core and self.tf32 else self.fp32


V100 = Peak("V100 SXM2", 15.7, 0.0, 125.0, 0.0, 7.8, 900.0, 80)
A100_40 = Peak("A100 SXM 40GB", 19.5, 156.0, 312.0, 0.0, 9.7, 1555.0, 108)
A100_80 = Peak("A100 SXM 80GB", 19.5, 156.0, 312.0, 0.0, 9.7, 2039.0, 108)
H100_SXM = Peak("H100 SXM", 67.0, 494.5, 989.5, 1979.0, 34.0, 3350.0, 132)
H100_PCIE = Peak("H100 PCIe", 51.0, 378.0, 756.5, 1513.0, 26.0, 2000.0, 114)
H200 = Peak("H200 SXM", 67.0, 494.5, 989.5, 1979.0, 34.0, 4800.0, 132)
MI250_GCD = Peak("MI250 (one GCD)", 22.65, 45.25, 181.05, 0.0, 22.65, 1600.0, 104)
MI250X_GCD = Peak("MI250X (one GCD)", 23.95, 47.85, 191.5, 0.0, 23.95, 1600.0, 110)
MI300X = Peak("MI300X", 163.4, 653.7, 1307.4, 2614.9, 81.7, 5300.0, 304)


def peak_for(dev: Device | None) -> Peak | None:
    """The table row for a device from its name (and, for AMD GCDs reported under a generic
    name, its compute-unit count); None for a GPU not in the table."""
    if dev is None:
        return None
    n = dev.name.upper()
    if "V100" in n:
        return V100
    if "A100" in n:
        mem = dev.total_memory_bytes or 0
        return A100_80 if mem > 60 * 1024**3 else A100_40
    if "H200" in n:
        return H200
    if "H100" in n:
        return H100_PCIE if "PCIE" in n else H100_SXM
    if "MI300X" in n:
        return MI300X
    if "MI250X" in n or (dev.vendor == "amd" and dev.num_sms == 110 and "MI" not in n):
        return MI250X_GCD
    if "MI250" in n or (dev.vendor == "amd" and dev.num_sms == 104 and "MI" not in n):
        return MI250_GCD
    return None
