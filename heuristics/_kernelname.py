"""What a kernel's name says about it: the library or generator that made it, what kind of work
it does, its tile size, split-K factor, alignment variant and (attention) compiled head dim.
Used by ``kernel-efficiency``, ``attention-materialized`` and the compiled-regions view. Not a
detector.

Names read (vendor libraries and generators encode their configuration in kernel names):

- **hipBLASLt / rocBLAS (Tensile)** ``Cijk_Ailk_Bljk_..._MT256x128x64_..._GSU2_...``: ``MT``
  the macro tile (M x N x K), ``GSU`` the global split-U (split-K) factor, ``AF0EM``/``AF1EM``/
  ``ASEM`` the element multiples the kernel assumes (1: compiled for any size; rocBLAS picks
  these for unaligned shapes). hipBLASLt names carry ``UserArgs``.
- **cuBLAS** ``sm90_xmma_gemm_..._tilesize128x128x64...``, ``ampere_bf16_s16816gemm_..._128x128_
  ...``, ``nvjet_hsh_128x256_...``; **CUTLASS** ``cutlass_..._128x128_32x3_nn_align8``
  (``align``: elements per vector load; 1 or 2 for 16-bit data means unaligned operands).
- **Attention**: FlashAttention-2 ``flash_fwd_kernel<Flash_fwd_kernel_traits<HEADDIM, BLOCK_M,
  BLOCK_N...``; FlashAttention-3 (``Sm90`` flash kernels); memory-efficient ``fmha_cutlassF``;
  cuDNN ``cudnn_generated_fort_native_sdpa``; AOTriton ``attn_fwd`` (PyTorch's ROCm flash and
  memory-efficient backends); aiter ``aiter::fmha_fwd_hd128...``; Composable Kernel
  ``ck_tile``/``FmhaFwd`` (``_d128_``).
- **Convolutions**: a kernel is a convolution when :func:`advisor.trace.kernelnames.is_convolution`
  says so (``convertTensor`` layout kernels, cuDNN's BatchNorm and a ``_typeConvert`` template
  argument are not).
- **Triton** (Inductor): ``triton_poi_`` pointwise, ``triton_red_`` reduction, ``triton_per_``
  persistent reduction, ``triton_tem_`` template (GEMM/conv/attention), other ``triton_``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from advisor.trace.kernelnames import is_convolution

_TENSILE_TILE = re.compile(r"_MT(\d+)x(\d+)x(\d+)_")
_TENSILE_GSU = re.compile(r"_GSU(\d+)(?=_|$)")
_TENSILE_EM = re.compile(r"_(?:AF0EM|AF1EM|ASEM)(\d+)(?=_)")
_CUBLAS_TILE = re.compile(r"tilesize(\d+)x(\d+)x(\d+)")
_PLAIN_TILE = re.compile(r"_(\d{2,3})x(\d{2,3})(?:x(\d{2,3}))?_")
_ALIGN = re.compile(r"align(\d+)")
_FA2_TRAITS = re.compile(r"Flash_(?:fwd|bwd)_kernel_traits<\s*(\d+),\s*(\d+),\s*(\d+)")
_HD = re.compile(r"(?:_hd|hdim|_d)(\d{2,3})(?=_|\b|[a-z])")
_MIOPEN_TILE = re.compile(r"_bt(\d+)x(\d+)x(\d+)_")
_GENERIC = frozenset(
    "void at native detail gpu_kernel_impl gpu_kernel_impl_nocast BinaryFunctor AUnaryFunctor "
    "BUnaryFunctor UnaryFunctor Array OffsetCalculator TrivialOffsetCalculator LoadWithoutCast "
    "StoreWithoutCast LoadWithCast StoreWithCast float double long int operator lambda c10 Half "
    "BFloat16 complex unsigned char bool short anonymous namespace binary_internal OpaqueType "
    "true false const TensorIteratorBase TensorIterator".split()
)
_TOKEN = re.compile(r"[A-Za-z_]\w*")
_TRITON_KIND = {
    "poi": "pointwise",
    "red": "reduction",
    "per": "persistent reduction",
    "tem": "template",
}


@dataclass(frozen=True)
class KernelName:
    family: str  # the library or generator: "hipBLASLt", "cuBLAS", "CUTLASS", "Triton", ...
    kind: str  # "gemm", "attention", "conv", "pointwise", "reduction", "persistent reduction",
    # "template", "elementwise", "other"
    tile: tuple[int, int, int] | None = None  # M x N x K of the output tile
    split_k: int = 1
    unaligned: bool = False  # the name shows a variant for unaligned operands
    head_dim: int | None = None  # the head dim the attention kernel was compiled for
    block_m: int | None = None  # query rows per attention block


def parse(name: str) -> KernelName:
    """What ``name`` says (see the module doc); family "other" when nothing is recognised."""
    n = name
    low = n.lower()
    if n.startswith("Cijk_"):
        t = _TENSILE_TILE.search(n)
        g = _TENSILE_GSU.search(n)
        ems = [int(x) for x in _TENSILE_EM.findall(n)]
        lt = "UserArgs" in n
        return KernelName(
            "hipBLASLt" if lt else "rocBLAS (Tensile)",
            "gemm",
            (int(t[1]), int(t[2]), int(t[3])) if t else None,
            int(g[1]) if g else 1,
            # hipBLASLt's kernels are all built for any size; rocBLAS picks these for
            # unaligned shapes only
            unaligned=bool(ems) and min(ems) == 1 and not lt,
        )
    attn = _attention(n, low)
    if attn is not None:
        return attn
    if low.startswith("triton_"):
        kind = _TRITON_KIND.get(low[7:10], "other")
        return KernelName("Triton", kind)
    if "igemm_" in low and ("fwd" in low or "bwd" in low or "wrw" in low):
        t = _MIOPEN_TILE.search(n)
        return KernelName("MIOpen", "conv", (int(t[1]), int(t[2]), int(t[3])) if t else None)
    conv = is_convolution(n)
    if "ck::tensor_operation" in n or "_ZN2ck16tensor_operation" in n:
        return KernelName("Composable Kernel", "conv" if conv else "gemm")
    if "cutlass" in low and ("gemm" in low or conv or "grad" in low):
        t = _PLAIN_TILE.search(n)
        a = _ALIGN.search(n)
        return KernelName(
            "CUTLASS",
            "conv" if conv else "gemm",
            _tile(t),
            unaligned=a is not None and int(a[1]) < 4,
        )
    if ("xmma_gemm" in low or "nvjet" in low or re.search(r"s\d{3,5}gemm|sgemm|hgemm", low)) and (
        not conv
    ):
        t = _CUBLAS_TILE.search(n) or _PLAIN_TILE.search(n)
        return KernelName("cuBLAS", "gemm", _tile(t), 2 if "splitk" in low else 1)
    if conv:
        return KernelName("cuDNN" if "cudnn" in low else "other", "conv")
    if "cudnn" in low:  # cuDNN's BatchNorm, layout and scaling kernels
        return KernelName("cuDNN", "other")
    if "elementwise_kernel" in low:
        return KernelName("ATen", "elementwise")
    if "reduce_kernel" in low or "softmax" in low or "norm" in low:
        return KernelName("ATen" if "at::native" in n else "other", "reduction")
    return KernelName("other", "other")


def _tile(m: re.Match[str] | None) -> tuple[int, int, int] | None:
    if m is None:
        return None
    k = m.group(3) if m.lastindex and m.lastindex >= 3 else None
    return (int(m[1]), int(m[2]), int(k) if k else 0)


def _attention(n: str, low: str) -> KernelName | None:
    if "flash" in low and ("fwd" in low or "bwd" in low) and "kernel" in low:
        t = _FA2_TRAITS.search(n)
        fa3 = "sm90" in low or "flashattnfwdsm90" in low or "flash::enable_sm90" in low
        return KernelName(
            "FlashAttention-3" if fa3 else "FlashAttention-2",
            "attention",
            head_dim=int(t[1]) if t else None,
            block_m=int(t[2]) if t else None,
        )
    if "fmha_cutlass" in low or "attentionkernel" in low or "attentionbackwardkernel" in low:
        t = _PLAIN_TILE.search(n)
        return KernelName(
            "memory-efficient (CUTLASS)",
            "attention",
            block_m=int(t[1]) if t else None,
            unaligned="notaligned" in low,
        )
    if "cudnn" in low and ("sdpa" in low or "fmha" in low or "flash" in low or "mha" in low):
        return KernelName("cuDNN attention", "attention")
    if "aiter" in low and ("fmha" in low or "attn" in low or "mha" in low):
        h = _HD.search(n)
        return KernelName("aiter", "attention", head_dim=int(h[1]) if h else None)
    if ("ck_tile" in low or "fmhafwd" in low or "fmhabwd" in low) and "fmha" in low:
        h = _HD.search(n)
        return KernelName("Composable Kernel", "attention", head_dim=int(h[1]) if h else None)
    base = low.removeprefix("void ").split("(")[0].split("<")[0].removesuffix(".kd")
    if base.split("::")[-1] in ("attn_fwd", "attn_bwd", "_attn_fwd", "_attn_bwd") or (
        "bwd_kernel_dk_dv" in low or "bwd_kernel_dq" in low
    ):
        return KernelName("AOTriton", "attention")
    return None


def padded_head_dim(k: KernelName, head_dim: int) -> int:
    """The head dim the kernel computes with: the one compiled into it when its name says so,
    the next power of two for Triton-generated kernels (AOTriton; ``tl.arange`` needs one),
    else the head dim itself (FlashAttention-2 and cuDNN pad only to a multiple of 8)."""
    if k.head_dim and k.head_dim >= head_dim:
        return k.head_dim
    if k.family in ("AOTriton", "Triton"):
        return max(16, 1 << (head_dim - 1).bit_length())
    return -(-head_dim // 8) * 8


def short(name: str, limit: int = 72) -> str:
    """A readable name: no ``void``, argument list or template arguments; a wrapper such as
    ``cutlass::Kernel2<cutlass_75_tensorop_..._align1>`` gives its inner kernel name."""
    n = name.removeprefix("void ").strip()
    head = n.split("(")[0]
    m = re.match(r"^[\w:]*Kernel\d*<(\w{12,})>", head)
    if m:
        head = m[1]
    elif "<" in head:
        head = head.split("<")[0]
    head = head.split("::")[-1].removesuffix(".kd") or n
    if "elementwise_kernel" in head:
        head = f"{head} ({functor_name(n)})"
    return head if len(head) <= limit else head[: limit - 3] + "..."


def functor_name(kernel: str) -> str:
    """``...vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>...`` -> ``add``."""
    i = kernel.find("elementwise_kernel")
    for tok in _TOKEN.findall(kernel[i + len("elementwise_kernel") :] if i >= 0 else kernel):
        if tok in _GENERIC or tok.startswith("_"):
            continue
        for pre in ("CUDAFunctorOnSelf_", "CUDAFunctorOnOther_", "CUDAFunctor_", "launch_"):
            tok = tok.removeprefix(pre)
        for suf in ("_kernel_cuda", "_kernel_impl", "_kernel", "Functor"):
            tok = tok.removesuffix(suf)
        return (tok[0].lower() + tok[1:]) if tok else "elementwise"
    return "elementwise"
