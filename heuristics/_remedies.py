"""What to do about each cause ``kernel-efficiency`` names: the row's title, its advice (for
the GPU vendor at hand) and a snippet. Not a detector.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._efficiency import Analysis, KernelClass

TITLES = {
    "head-dim": "Attention head dim padded by the kernel",
    "align": "GEMMs on unaligned kernels: dims not multiples of the vector width",
    "tiles": "Too few tiles to fill the GPU (wave quantization)",
    "short": "Too little work per call: launch and setup dominate (short sequences, small K)",
    "memory": "Memory-bound kernels far below the memory bandwidth",
    "backend": "Slow attention backend for these shapes",
    "small": "Shapes too small for the GPU: one wave of tiles per call",
    "slow": "Kernels far below the GPU's roofline for their shapes",
}


def _amd(an: Analysis) -> bool:
    return an.peak.unit == "CUs"


def _head_dim(an: Analysis, kc: KernelClass) -> str:
    e = kc.work.dims.get("E")
    alt = (
        "aiter's or Composable Kernel's fmha (torch.backends.cuda.preferred_rocm_fa_library("
        '"ck"), or aiter.flash_attn_func) have kernels for more head dims'
        if _amd(an)
        else "FlashAttention-2/3 and cuDNN SDPA run head dims up to 256 in multiples of 8"
    )
    return (
        f"The kernel computes head dim {e} as a larger one. Use a head dim it is compiled for "
        f"(64 or 128) when designing the model, or a backend with native kernels for {e}: "
        f"{alt}."
    )


def _align(an: Analysis, kc: KernelClass) -> str:
    return (
        "Pad the listed dims to multiples of 8 (64 is better): vocabulary and output layers "
        "with unused rows (slice the result), hidden sizes in the config, batch sizes that "
        "are multiples of 8. The library then picks its kernels for aligned sizes, with full "
        "vector loads and no nearly empty edge tiles."
    )


def _tiles(an: Analysis, kc: KernelClass) -> str:
    tune = (
        "PYTORCH_TUNABLEOP_ENABLED=1 (TunableOp tries hipBLASLt/rocBLAS solutions with more "
        "split-K)"
        if _amd(an)
        else 'torch.compile(mode="max-autotune") (Triton templates with split-K/stream-K)'
    )
    return (
        "Give the GPU more tiles. A small output with a long K: split K (the library does "
        f"when tuned: {tune}; or by hand, a bmm over K chunks and a sum). Many small matmuls "
        "of one shape: batch them into one bmm or a larger batch per call."
    )


def _short(an: Analysis, kc: KernelClass) -> str:
    return (
        "Give each call more work: pack short sequences into one call (varlen attention, "
        "nested tensors) or batch requests; for small-K matmuls, fuse them with their "
        "neighbours (torch.compile). When calls stay small, capture them in a CUDA/HIP graph "
        '(torch.compile(mode="reduce-overhead")) so launches cost no host time.'
    )


def _memory(an: Analysis, kc: KernelClass) -> str:
    return (
        "These ops are memory-bound and run well under the GPU's bandwidth: fuse them with "
        "their neighbours (torch.compile generates one kernel per fused group), keep inputs "
        "contiguous (strided and broadcast reads are slow), move fewer bytes (bf16 instead of "
        "fp32 halves them); for tall-skinny matmuls, batch several into one."
    )


def _backend(an: Analysis, kc: KernelClass) -> str:
    if _amd(an):
        return (
            f"{kc.kernel.family} runs this shape well below the GPU's peak. On MI300-class "
            "GPUs the Composable Kernel and aiter attention kernels are faster: "
            'torch.backends.cuda.preferred_rocm_fa_library("ck") (or TORCH_ROCM_FA_PREFER_CK=1) '
            "for SDPA, or aiter.flash_attn_func directly."
        )
    return (
        f"{kc.kernel.family} runs this shape well below the GPU's peak. On Hopper GPUs the "
        "cuDNN backend (torch.nn.attention.sdpa_kernel(SDPBackend.CUDNN_ATTENTION)) and "
        "FlashAttention-3 reach far more of it; on Ampere, SDPA's flash backend "
        "(SDPBackend.FLASH_ATTENTION) with fp16/bf16 inputs."
    )


def _small(an: Analysis, kc: KernelClass) -> str:
    return (
        "Each call's work fills at most one wave of the GPU's SMs/CUs, so the setup and the "
        "last tiles of every call are not hidden behind other tiles. Give each call more work: "
        "batch requests or tokens (a larger M), run same-shape matmuls as one bmm or grouped "
        "GEMM, fuse neighbouring small ops (torch.compile); when the calls must stay small, "
        'capture them in a CUDA/HIP graph (torch.compile(mode="reduce-overhead")).'
    )


def _slow(an: Analysis, kc: KernelClass) -> str:
    tune = (
        "PYTORCH_TUNABLEOP_ENABLED=1 (tunes hipBLASLt/rocBLAS GEMMs for these shapes)"
        if _amd(an)
        else "a newer cuBLAS/cuDNN"
    )
    return (
        'For large shapes with slow kernels: torch.compile(mode="max-autotune"), '
        "torch.backends.cudnn.benchmark = True for convolutions, contiguous inputs, "
        f"{tune}."
    )


ADVICE: dict[str, Callable[[Analysis, KernelClass], str]] = {
    "head-dim": _head_dim,
    "align": _align,
    "tiles": _tiles,
    "short": _short,
    "memory": _memory,
    "backend": _backend,
    "small": _small,
    "slow": _slow,
}

SNIPPETS = {
    "head-dim": (
        "# a head dim the attention kernels run without padding\n"
        "n_heads = hidden // 128          # head_dim 128 (or 64)\n"
    ),
    "align": (
        "# pad the dimension, slice the result\n"
        "head = nn.Linear(hidden, (vocab + 63) // 64 * 64)\nlogits = head(x)[..., :vocab]\n"
    ),
    "tiles": (
        "# a small output with a long K: split K into chunks and sum (fills the GPU)\n"
        "s = 16\n"
        "out = torch.bmm(a.view(m, s, k // s).transpose(0, 1), b.view(s, k // s, n)).sum(0)\n"
        "# many small matmuls of one shape: one batched call\n"
        "y = torch.bmm(xs, ws)                      # [G, m, k] @ [G, k, n]\n"
    ),
    "short": (
        "# compile the block; reduce-overhead adds CUDA/HIP graphs for small calls\n"
        'block = torch.compile(block, mode="reduce-overhead")\n'
    ),
    "memory": (
        "model = torch.compile(model)   # fuses memory-bound ops into fewer kernels\n"
        "x = x.contiguous()             # strided inputs read slowly\n"
    ),
    "backend": (
        "from torch.nn.attention import SDPBackend, sdpa_kernel\n"
        "# NVIDIA Hopper: cuDNN attention\n"
        "with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):\n"
        "    out = F.scaled_dot_product_attention(q, k, v)\n"
        "# AMD MI300: Composable Kernel attention for SDPA\n"
        'torch.backends.cuda.preferred_rocm_fa_library("ck")\n'
    ),
    "small": (
        "# many small calls of one shape: one batched call\n"
        "y = torch.bmm(xs, ws)                      # [G, m, k] @ [G, k, n]\n"
        'model = torch.compile(model, mode="reduce-overhead")   # or capture the small calls\n'
    ),
    "slow": (
        'model = torch.compile(model, mode="max-autotune")   # autotuned GEMMs, fusion\n'
        "torch.backends.cudnn.benchmark = True                # convolutions: best algorithm\n"
    ),
}
