"""Work of one op call from its recorded shapes: FLOPs, bytes moved and the GEMM-like geometry
(used by ``kernel-efficiency``). Not a detector.

Each figure is chosen so that an efficiency computed from it errs high (towards no finding):
bytes count every tensor once (a lower bound), FLOPs are exact or, for causal attention, too high:

- GEMMs (``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``_addmm_activation``): 2*B*M*N*K FLOPs; bytes
  = the two operands and the output once each.
- Convolutions: 2*N*C_out*H_out*W_out*(C_in/groups)*kh*kw FLOPs forward, twice that backward
  (data and weight gradients). The output size is read from ``grad_output`` in the backward op;
  forward, from the next op on the same thread that takes a tensor [N, C_out, ...] (batch norm,
  activation, add). Without it the call is left out.
- Attention (flash / memory-efficient / cuDNN SDPA): 4*B*H*L*S*E FLOPs forward (Q K^T and P V,
  causal masking is ignored: for causal attention this overstates the work, so the efficiency
  errs high), 2.5x that backward (FlashAttention-2's count, recomputation included); bytes = Q, K, V, O.
- Elementwise and reduction ops: bytes = every tensor input once, plus an output the size of the
  largest input for elementwise ops; no FLOPs. A softmax over a [B, H, L, S] tensor with
  L, S >= 128 (or [B*H, L, L]) is marked as materialized attention scores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ._matmul import CONV_BWD, CONV_FWD, GEMM_OPS

ELT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "float8": 1}
ATTN_FWD_BHLE = frozenset(
    {
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_cudnn_attention",
    }
)
ATTN_BWD_BHLE = frozenset(
    {
        "aten::_scaled_dot_product_flash_attention_backward",
        "aten::_scaled_dot_product_efficient_attention_backward",
        "aten::_scaled_dot_product_cudnn_attention_backward",
    }
)
ATTN_FWD_BLHE = frozenset({"aten::_flash_attention_forward", "aten::_efficient_attention_forward"})
ATTN_BWD_BLHE = frozenset(
    {"aten::_flash_attention_backward", "aten::_efficient_attention_backward"}
)
ATTN_OPS = ATTN_FWD_BHLE | ATTN_BWD_BHLE | ATTN_FWD_BLHE | ATTN_BWD_BLHE
ELEMENTWISE = frozenset(
    f"aten::{n}"
    for n in (
        "add",
        "add_",
        "mul",
        "mul_",
        "sub",
        "sub_",
        "div",
        "div_",
        "relu",
        "relu_",
        "gelu",
        "silu",
        "sigmoid",
        "tanh",
        "exp",
        "where",
        "masked_fill",
        "masked_fill_",
        "threshold_backward",
        "gelu_backward",
        "silu_backward",
        "sigmoid_backward",
        "tanh_backward",
        "_softmax",
        "_log_softmax",
        "_softmax_backward_data",
        "native_layer_norm",
        "native_dropout",
        "fill_",
        "zero_",
        "addcmul_",
        "addcdiv_",
        "lerp_",
        "pow",
        "sqrt",
        "rsqrt",
    )
)
SOFTMAX = frozenset({"aten::_softmax", "aten::softmax", "aten::_safe_softmax"})
REDUCTIONS = frozenset(
    {
        "aten::sum",
        "aten::mean",
        "aten::amax",
        "aten::max",
        "aten::norm",
        "aten::linalg_vector_norm",
        "aten::var_mean",
        "aten::std",
    }
)


@dataclass(frozen=True)
class Work:
    kind: str  # "gemm", "conv", "attention", "memory"
    flops: float
    nbytes: float
    tiles: int  # 128x128 output tiles (times the batch) the kernels can spread over SMs; 0: n/a
    dims: dict[str, Any]  # M, N, K (GEMM-equivalent) or B, H, L, S, E (attention)

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: FLOPs per byte moved (0 for memory-only work)."""
        return self.flops / self.nbytes if self.nbytes else 0.0


def _numel(d: Any) -> int:
    return math.prod(int(x) for x in d) if isinstance(d, list | tuple) and d else 0


def _dims(raw: Any) -> list[list[int]] | None:
    if not isinstance(raw, list | tuple):
        return None
    out = []
    for x in raw:
        if isinstance(x, list | tuple) and all(isinstance(v, int) for v in x):
            out.append([int(v) for v in x])
        else:
            out.append([])
    return out


def _tiles(b: int, m: int, n: int) -> int:
    return b * math.ceil(m / 128) * math.ceil(n / 128)


def gemm_work(name: str, d: list[list[int]], elt: int) -> Work | None:
    b, a_i = 1, 0
    if name in ("aten::addmm", "aten::_addmm_activation", "aten::baddbmm", "aten::addbmm"):
        a_i = 1
    if len(d) < a_i + 2:
        return None
    a, w = d[a_i], d[a_i + 1]
    if len(a) == 2 and len(w) == 2 and a[1] == w[0]:
        m, k, n = a[0], a[1], w[1]
    elif len(a) == 3 and len(w) == 3 and a[0] == w[0] and a[2] == w[1]:
        b, m, k, n = a[0], a[1], a[2], w[2]
    else:
        return None
    if min(b, m, n, k) <= 0:
        return None
    flops = 2.0 * b * m * n * k
    nbytes = float(elt) * b * (m * k + k * n + m * n)
    return Work("gemm", flops, nbytes, _tiles(b, m, n), {"M": m, "N": n, "K": k, "B": b})


def conv_work(name: str, d: list[list[int]], elt: int, out: list[int] | None) -> Work | None:
    x, w, go, bwd = None, None, None, name in CONV_BWD
    if name in CONV_FWD and len(d) >= 2:
        x, w, go = d[0], d[1], out
    elif name == "aten::convolution_backward" and len(d) >= 3:
        go, x, w = d[0], d[1], d[2]
    elif name == "aten::cudnn_convolution_backward" and len(d) >= 3:
        x, go, w = d[0], d[1], d[2]
    if not x or not w or not go or len(x) < 3 or len(w) != len(x) or len(go) != len(x):
        return None
    if x[1] != w[1] or go[0] != x[0] or go[1] != w[0]:  # grouped / depthwise: not one GEMM
        return None
    n, co, ci = x[0], w[0], w[1]
    spatial_out = _numel(go[2:])
    kernel = _numel(w[2:])
    m, kk = n * spatial_out, ci * kernel
    flops = 2.0 * m * co * kk * (2 if bwd else 1)
    nbytes = float(elt) * (_numel(x) + _numel(w) + _numel(go)) * (2 if bwd else 1)
    return Work("conv", flops, nbytes, _tiles(1, m, co), {"M": m, "N": co, "K": kk})


def attention_work(name: str, d: list[list[int]], elt: int) -> Work | None:
    first = 1 if name in ATTN_BWD_BHLE or name in ATTN_BWD_BLHE else 0
    if len(d) < first + 3:
        return None
    q, k, v = d[first], d[first + 1], d[first + 2]
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        return None
    if name in ATTN_FWD_BLHE or name in ATTN_BWD_BLHE:
        b, lq, h, e = q
        s = k[1]
    else:
        b, h, lq, e = q
        s = k[2]
    ev = v[3]
    flops = 2.0 * b * h * lq * s * (e + ev)
    nbytes = float(elt) * (_numel(q) + _numel(k) + _numel(v) + b * h * lq * ev)
    if first:
        flops, nbytes = flops * 2.5, nbytes * 2
    return Work(
        "attention",
        flops,
        nbytes,
        b * h * math.ceil(lq / 128),
        {"B": b, "H": h, "L": lq, "S": s, "E": e},
    )


def memory_work(name: str, d: list[list[int]], elt: int) -> Work | None:
    sizes = [_numel(x) for x in d if x]
    if not sizes:
        return None
    total = sum(sizes) + (max(sizes) if name in ELEMENTWISE else 0)
    dims: dict[str, Any] = {"numel": max(sizes)}
    x = d[0]
    if (
        name in SOFTMAX
        and len(x) in (3, 4)
        and min(x[-2:]) >= 128
        and (len(x) == 4 or x[-1] == x[-2])
    ):
        dims["softmax_scores"] = "x".join(map(str, d[0]))
    return Work("memory", 0.0, float(elt) * total, 0, dims)


def op_work(
    name: str, raw_dims: Any, dtype: str | None, out: list[int] | None = None
) -> Work | None:
    """The work of one call of op ``name`` with ``Input Dims`` ``raw_dims``; None when the op is
    not modelled or its shapes do not fit."""
    d = _dims(raw_dims)
    elt = ELT_BYTES.get(dtype or "")
    if d is None or not elt:
        return None
    if name in GEMM_OPS:
        return gemm_work(name, d, elt)
    if name in CONV_FWD or name in CONV_BWD:
        return conv_work(name, d, elt, out)
    if name in ATTN_OPS:
        return attention_work(name, d, elt)
    if name in ELEMENTWISE or name in REDUCTIONS:
        return memory_work(name, d, elt)
    return None
