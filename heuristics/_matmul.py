"""Matmul and convolution: the op families, which op a kernel belongs to, its dtype, whether it
ran on Tensor Cores, whether the GPU has them, GEMM dimensions. Shared by fp32-matmul,
misaligned-dims, channels-last, cudnn-benchmark and conv-bias-before-bn. Not a detector.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from advisor.arrays import unique_ints
from advisor.derive.timeline import main_device
from advisor.trace.identity import cc_of, kernel_arch
from advisor.trace.kernelnames import CONV_WORD, LAYOUT
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

from ._ops import chain_match, kernel_op, op_names

GEMM_OPS = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::addbmm",
        "aten::_addmm_activation",
        "aten::_scaled_mm",
    }
)
CONV_FWD = frozenset(
    {
        "aten::conv1d",
        "aten::conv2d",
        "aten::conv3d",
        "aten::convolution",
        "aten::_convolution",
        "aten::cudnn_convolution",
        "aten::miopen_convolution",
        "aten::mkldnn_convolution",
        "aten::conv_transpose1d",
        "aten::conv_transpose2d",
        "aten::conv_transpose3d",
        "aten::cudnn_convolution_transpose",
    }
)
CONV_BWD = frozenset({"aten::convolution_backward", "aten::cudnn_convolution_backward"})
# forward convolutions whose Input Dims are (input, weight, bias, ...): the backend calls
# aten::cudnn_convolution(_transpose) take no bias (input, weight, padding, ...)
CONV_FWD_WITH_BIAS = CONV_FWD - {"aten::cudnn_convolution", "aten::cudnn_convolution_transpose"}
# any op of the convolution family, forward or backward, including autograd nodes
# (aten::conv2d, aten::_convolution, aten::convolution_backward, CudnnConvolutionBackward0, ...)
CONV_RE = re.compile(r"conv(?:\d|_|olution)", re.IGNORECASE)
# cuDNN/MIOpen layout conversion kernels (NCHW <-> NHWC, cuDNN's convertTensor)
LAYOUT_KERNEL_RE = re.compile(LAYOUT, re.IGNORECASE)

# kernels doing the GEMM / convolution math (not layout, reduction or epilogue helpers)
# (AMD: Tensile and hipBLASLt name their GEMM kernels "Cijk_..." after the index notation)
_COMPUTE = re.compile(
    CONV_WORD + r"|gemm|scudnn|hcudnn|dgrad|wgrad|fprop|winograd|fft2d|xmma|cutlass|"
    r"s1688|h1688|s884|h884|16816|cudnn_ampere|cudnn_volta|nvjet|^cijk_",
    re.I,
)
_NOT_COMPUTE = re.compile(
    LAYOUT + r"|splitkreduce|scalepacked|offsetskernel|computeoffsets|"
    r"epilogue|elementwise|reduce_kernel|bn_fw|bn_bw|gemv|copy|transpose_|"
    r"memset|fill|fbgemm|embedding|quantize|reduce_wgrad",
    re.I,
)
# (AMD: matrix-core kernels name their MFMA instruction shape, Tensile's "_MI16x16x16x1_")
_TENSOR_CORE = re.compile(
    r"tensorop|s1688|s16816|h1688|h16816|s884|h884|i8816|hmma|imma|xmma|"
    r"wgmma|gmma|tf32|bf16|fp16|f16f16|tensor\d+x\d+x\d+|e4m3|e5m2|nvjet|"
    r"_h\d*gemm|hgemm|_mi\d+x\d+x\d+|mfma",
    re.I,
)
# FP32 on CUDA cores even inside xmma/cutlass templates: cuBLAS 11+ names plain FP32 GEMMs
# ``sm80_xmma_gemm_f32f32_f32f32_f32_..._ffma_...`` (ffma = FP32 fused multiply-add)
_CUDA_CORE = re.compile(r"ffma|f32f32_f32f32_f32|_simt_|simt_s", re.I)
_FP32_NAME = re.compile(
    r"sgemm|scudnn|<float|float,|gcgemm|cgemm|fft2d|simt_s|ffma|"
    r"f32f32_f32f32_f32",
    re.I,
)
_OTHER_DTYPE = re.compile(r"dgemm|zgemm|double|__half|bfloat|int8|_i8|hgemm|half", re.I)
DTYPES = {
    "float": "float32",
    "c10::Half": "float16",
    "c10::BFloat16": "bfloat16",
    "double": "float64",
    "c10::Float8_e4m3fn": "float8",
    "c10::Float8_e5m2": "float8",
}


# case-sensitive twins of the patterns above, for lowercased ASCII names: Python's re is
# several times slower with re.I, and kernel names run to hundreds of characters
_LOWER = {
    rx: re.compile(rx.pattern)
    for rx in (_COMPUTE, _NOT_COMPUTE, _TENSOR_CORE, _CUDA_CORE, _FP32_NAME, _OTHER_DTYPE)
}


def _found(rx: re.Pattern[str], name: str) -> bool:
    """``rx.search(name)`` for one of the case-insensitive patterns above (the same answer:
    for an ASCII name, ignoring case is matching its lowercase form)."""
    if name.isascii():
        return _LOWER[rx].search(name.lower()) is not None
    return rx.search(name) is not None


def is_compute_kernel(name: str) -> bool:
    return _found(_COMPUTE, name) and not _found(_NOT_COMPUTE, name)


def is_tensor_core(name: str) -> bool:
    return _found(_TENSOR_CORE, name) and not _found(_CUDA_CORE, name)


# AMD matrix cores: MFMA instructions, named in Tensile/hipBLASLt kernels as MI<m>x<n>x<k>
_MATRIX_CORE_AMD = re.compile(r"mfma|_MI\d+x\d+x\d+", re.I)


def on_matrix_cores(name: str) -> bool:
    """The kernel's name says it runs on Tensor Cores (NVIDIA, :func:`is_tensor_core`) or on
    AMD matrix cores (MFMA)."""
    return is_tensor_core(name) or _MATRIX_CORE_AMD.search(name) is not None


def looks_fp32(name: str) -> bool:
    return _found(_FP32_NAME, name) and not _found(_OTHER_DTYPE, name)


def other_dtype(name: str) -> bool:
    return _found(_OTHER_DTYPE, name)


def is_matmul_op(name: str) -> bool:
    return name in GEMM_OPS or name in CONV_FWD or name in CONV_BWD


def op_dtype(types: Any) -> str | None:
    """The tensor dtype of an op from its ``Input type`` list (``float32``, ``float16``...)."""
    if not isinstance(types, list | tuple):
        return None
    for t in types:
        d = DTYPES.get(str(t))
        if d:
            return d
    return None


def arch_cc(trace: Trace) -> tuple[tuple[int, int] | None, bool]:
    """(compute capability of the main GPU, inferred): from deviceProperties or ``--device``;
    inferred (from kernel names, a lower bound: ``volta_sgemm`` -> 7.0) when the trace lists no
    device or a device without one (see :mod:`advisor.trace.identity`)."""
    dev = trace.device(main_device(trace))
    if dev is not None and dev.compute_capability is not None:
        return dev.compute_capability, dev.source.startswith("inferred")
    if not len(trace.kernels):
        return None, False
    found = kernel_arch(str(c) for c in trace.kernels["name"].cat.categories)
    if found is None or not found[0].startswith("sm_"):
        return None, False
    return cc_of(found[0]), True


def tensor_cores(trace: Trace) -> bool | None:
    """Whether the main GPU has Tensor Cores: NVIDIA compute capability >= 7.0 (from
    deviceProperties, else inferred from kernel names); None when unknown or not NVIDIA."""
    dev = trace.device(main_device(trace))
    if dev is not None and dev.vendor == "amd":
        return None
    cc, _ = arch_cc(trace)
    return None if cc is None else cc >= (7, 0)


def kernel_ops(trace: Trace) -> np.ndarray:
    """For each kernel row: the cpu_ops row of the matmul/conv op it belongs to, or -1.

    GEMMs map to the innermost GEMM op (``aten::addmm`` under ``aten::linear``); convolutions
    to the outermost convolution op of the forward call (``aten::conv2d``) or to the backward
    convolution op."""
    return trace.memo("matmul.kernel_ops", lambda: _kernel_ops(trace))


def _kernel_ops(trace: Trace) -> np.ndarray:
    k = trace.kernels
    out = np.full(len(k), -1, dtype=np.int64)
    if not len(k) or not len(trace.runtime) or not len(trace.cpu_ops):
        return out
    oi = kernel_op(trace)
    has = oi >= 0
    if not has.any():
        return out
    # judge each distinct launching op once: the innermost GEMM op of its chain, else the
    # outermost backward convolution, else the outermost forward convolution
    uniq, inv = np.unique(oi[has], return_inverse=True)
    names = trace.cpu_ops["name"]
    gemm = chain_match(trace, uniq, name_flags(names, GEMM_OPS.__contains__))
    bwd = chain_match(trace, uniq, name_flags(names, CONV_BWD.__contains__), outermost=True)
    fwd = chain_match(trace, uniq, name_flags(names, CONV_FWD.__contains__), outermost=True)
    judged = np.where(gemm >= 0, gemm, np.where(bwd >= 0, bwd, fwd))
    out[has] = judged[inv.reshape(-1)]
    return out


def matmul_kernels(trace: Trace) -> pd.DataFrame:
    """Compute kernels of matmul/conv ops (or named like one): name, dur_ns, ts_ns, step,
    op (cpu_ops row or -1), op_name, dtype (of the op, or None), tc (ran on Tensor Cores),
    fp32 (FP32 on CUDA cores), row (of ``trace.kernels``)."""
    return trace.memo("matmul.kernel_table", lambda: _matmul_kernels(trace))


def _matmul_kernels(trace: Trace) -> pd.DataFrame:
    k = trace.kernels
    cols = ["name", "dur_ns", "ts_ns", "step", "op", "op_name", "dtype", "tc", "fp32", "row"]
    if not len(k):
        return pd.DataFrame(columns=cols)
    ops = kernel_ops(trace)
    opn = op_names(trace)
    types = trace.cpu_ops["input_types"].to_numpy() if len(trace.cpu_ops) else np.array([])
    cats = [str(n) for n in k["name"].cat.categories]
    codes = k["name"].cat.codes.to_numpy()
    flags = np.array(
        [(is_compute_kernel(n), is_tensor_core(n), looks_fp32(n), other_dtype(n)) for n in cats],
        dtype=bool,
    ).reshape(-1, 4)[codes]
    comp, tc, fp32_name, other = flags.T
    keep = comp & ((ops >= 0) | fp32_name | tc)
    idx = np.flatnonzero(keep)
    o = ops[idx]
    dtype_of: dict[int, str | None] = {int(i): op_dtype(types[i]) for i in unique_ints(o) if i >= 0}
    dtype = [dtype_of[int(i)] if i >= 0 else None for i in o]
    dtype = [
        ("float32" if d is None and fp32_name[j] else d) for d, j in zip(dtype, idx, strict=True)
    ]
    is32 = np.array([d == "float32" for d in dtype], dtype=bool)
    fp32 = ~tc[idx] & ~other[idx] & is32 & (fp32_name[idx] | (o >= 0))
    return pd.DataFrame(
        {
            "name": [cats[c] for c in codes[idx]],
            "dur_ns": k["dur_ns"].to_numpy()[idx],
            "ts_ns": k["ts_ns"].to_numpy()[idx],
            "step": k["step"].to_numpy()[idx],
            "op": o,
            "op_name": [opn[i] if i >= 0 else "" for i in o],
            "dtype": dtype,
            "tc": tc[idx],
            "fp32": fp32,
            "row": idx,
        },
        columns=cols,
    )


# ---------------------------------------------------------------- GEMM dimensions


def gemm_dims(name: str, dims: Any) -> dict[str, int] | None:
    """Named GEMM dimensions of an op call from its ``Input Dims``: M, N, K for matmuls;
    C_in, C_out for convolutions. None when the shapes do not fit."""
    if not isinstance(dims, list | tuple):
        return None
    d = [list(x) if isinstance(x, list | tuple) else [] for x in dims]
    try:
        if name in ("aten::mm", "aten::_scaled_mm") and len(d[0]) == 2 and len(d[1]) == 2:
            return {"M": d[0][0], "K": d[0][1], "N": d[1][1]}
        if name in ("aten::addmm", "aten::_addmm_activation") and len(d[1]) == 2 and len(d[2]) == 2:
            return {"M": d[1][0], "K": d[1][1], "N": d[2][1]}
        if name == "aten::bmm" and len(d[0]) == 3 and len(d[1]) == 3:
            return {"M": d[0][1], "K": d[0][2], "N": d[1][2]}
        if name in ("aten::baddbmm", "aten::addbmm") and len(d[1]) == 3 and len(d[2]) == 3:
            return {"M": d[1][1], "K": d[1][2], "N": d[2][2]}
        # convolutions: input [N, C_in, ...], weight [C_out, C_in / groups, ...]; grouped and
        # depthwise convolutions are left out (they do not map to one large GEMM)
        x, w = None, None
        if name in CONV_FWD:
            x, w = d[0], d[1]
        elif name == "aten::convolution_backward":
            x, w = d[1], d[2]
        elif name == "aten::cudnn_convolution_backward":
            x, w = d[0], d[2]
        if x is not None and w is not None and len(x) >= 3 and len(w) >= 3 and x[1] == w[1]:
            return {"C_in": x[1], "C_out": w[0]}
    except (IndexError, TypeError):
        return None
    return None


def pad_to(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple
