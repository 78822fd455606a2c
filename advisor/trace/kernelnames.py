"""Kernel names across runs: the one home for "is this the same kernel, renamed?" and "what kind
of work is this kernel?" (``advisor diff`` pairs and groups kernels with these rules).

- :func:`name_key`: the name with the parts that change between builds of the same code
  removed: a leading ``void``, Triton's numeric suffix (``triton_poi_fused_add_mul_25`` and
  ``..._26`` are the same kernel compiled twice) and the order of a Triton kernel's fused-op
  parts (``fused_add_mul`` = ``fused_mul_add``). Kernels with the same key are one kernel.
- :func:`name_tokens`: the words of a name (camelCase split) with template arguments,
  parameter lists and words holding digits (numbers, hashes, tile sizes) left out (``gemm_kernel<128, 64>(float*)`` ->
  ``{gemm, kernel}``); :func:`pair_renamed` pairs names found on one side only with names found
  on the other side only: of the same group (for kernels their family), run as many times, the
  pair sharing most of these words first (a renamed fused kernel, a new tile size, a compiled
  graph's new hash).
- :func:`kernel_family`: the kind of work, from the first pattern of :data:`FAMILIES` the name
  matches (case-insensitive): communication (the rules of :mod:`advisor.trace.commroles` that
  need no dedicated stream), Triton's generated
  kernels by their kind (``triton_poi_``: elementwise, ``triton_red_``/``triton_per_``:
  reduction), attention, normalization, layout conversions (``copy``), convolution (read
  tightly: :data:`CONVOLUTION`; ``convertTensor`` and ``_typeConvert`` are not convolutions), GEMM,
  quantization, softmax, reduction, fill, copy (and casts, transposes), elementwise, else
  ``other``. :func:`is_convolution` and :func:`is_layout_conversion` are the one reading of
  "a convolution's kernel" and "a layout conversion" for the detectors.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from advisor.trace.commroles import rules

# A convolution's kernel, by a word of its name: "conv" but not "convert"/"conversion"
# (cuDNN's ``convertTensor`` layout kernels, a ``_typeConvert`` helper in the template arguments
# of vLLM's RMSNorm kernels), implicit-GEMM and Winograd/FFT algorithms, the data/weight
# gradients, cuDNN's SASS convolution kernels (``volta_scudnn_...``), its CNN helpers and
# cask_cudnn's offset kernels, im2col/col2im (ATen's slow convolution)
CONV_WORD = r"conv(?!er)"
CONVOLUTION = (
    CONV_WORD + r"|igemm|implicit_?gemm|fprop|dgrad|wgrad|winograd|[sh]cudnn|cudnn::cnn::|"
    r"cask_cudnn|im2col|col2im|fft2d_[rc]2[rc]"
)
# layout conversions (NCHW <-> NHWC) cuDNN and MIOpen run around convolutions whose tensors are
# not in the layout the chosen kernel wants; cuDNN's ``convertTensor`` kernels convert layout
# (and dtype) the same way
LAYOUT = r"nchw_?(?:to|2)_?nhwc|nhwc_?(?:to|2)_?nchw|convert_?tensor"
# (family, pattern searched case-insensitively); the first match wins, so the specific kinds
# come before the generic ones (a Triton kernel whose fused ops name an attention op is still
# an elementwise kernel; a convolution's implicit GEMM is a convolution; cuDNN's BatchNorm and
# layout kernels are not convolutions)
FAMILIES: tuple[tuple[str, str], ...] = (
    ("elementwise", r"^triton_poi_"),
    ("reduction", r"^triton_(?:red|per)_"),
    (
        "attention",
        r"fmha|flash|attn|attention|sdpa|sage_fwd|sage_bwd|paged_?att|mha_(?:fwd|bwd)|xformers",
    ),
    (
        "normalization",
        r"layer_?norm|rms_?norm|group_?norm|batch_?norm|instance_?norm|welford|bn_(?:fw|bw)",
    ),
    ("copy", LAYOUT),
    ("convolution", CONVOLUTION),
    (
        "GEMM",
        r"gemm|gemv|cijk_|cutlass|nvjet|xmma|matmul|cublas|hipblas|wmma|mfma|"
        r"[sh](?:1688|884|16816)|tensorop|(?:^|_)b?mm(?:_|$)",
    ),
    ("quantization", r"quant|fp8|fp4|mxfp|e4m3|e5m2"),
    ("softmax", r"softmax"),
    ("reduction", r"reduce|reduction|cub::|topk|sort|scan|argmax|argmin"),
    ("fill", r"fill|memset|zero_"),
    ("copy", r"copy|cast|transpose|permute|contiguous|gather|scatter|index|cat_|concat"),
    ("elementwise", r"elementwise|vectorized|unroll|functor|pointwise|activation|gelu|silu"),
)
_COMPILED = tuple((f, re.compile(p, re.IGNORECASE)) for f, p in FAMILIES)
_CONVOLUTION_RE = re.compile(CONVOLUTION, re.IGNORECASE)
_LAYOUT_RE = re.compile(LAYOUT, re.IGNORECASE)

_TRITON_RE = re.compile(r"^(triton_(?:poi|red|per|tem|for)_fused_?)(.*?)(?:_\d+)*$")
_VOID_RE = re.compile(r"^\s*void\s+")
_WORD_RE = re.compile(r"[A-Za-z0-9]+")
_CAMEL_RE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+")


def name_key(name: str) -> str:
    """The name without what changes between builds of the same kernel (see the module doc)."""
    n = _VOID_RE.sub("", name).strip()
    m = _TRITON_RE.match(n)
    if m:
        parts = sorted(p for p in m.group(2).split("_") if p)
        return m.group(1) + "_".join(parts)
    return n


def _strip_brackets(name: str) -> str:
    """The name with everything inside <...> and (...) removed (nested)."""
    out: list[str] = []
    depth = 0
    for ch in name.replace("(anonymous namespace)", ""):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def name_tokens(name: str) -> frozenset[str]:
    """The words of the name outside template arguments and parameter lists (numbers dropped);
    a name that is all brackets keeps the words inside them."""
    key = name_key(name)
    words = _words(_strip_brackets(key)) or _words(key)
    return frozenset(w.lower() for w in words)


def _words(text: str) -> list[str]:
    """Words split at non-letters and camelCase humps; words holding digits dropped."""
    words = [w for w in _WORD_RE.findall(text.replace("_", " ")) if not any(c.isdigit() for c in w)]
    return [p for w in words for p in _CAMEL_RE.findall(w)]


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """Shared words over all words (Jaccard), 0..1."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def pair_renamed(
    only_a: Mapping[str, tuple[float, str]],
    only_b: Mapping[str, tuple[float, str]],
    min_similarity: float = 0.0,
) -> list[tuple[str, str]]:
    """Names found on side A only paired with names found on side B only (name -> (count,
    group)): the same group and count, sharing more than ``min_similarity`` of their words
    (:func:`name_tokens`); the pairs sharing most first, each name in one pair at most."""
    tok_a = {k: name_tokens(k) for k in only_a}
    tok_b = {k: name_tokens(k) for k in only_b}
    bucket: dict[tuple[float, str], list[str]] = {}
    for y, cg in only_b.items():
        bucket.setdefault(cg, []).append(y)
    cands = []
    for x, cg in only_a.items():
        for y in bucket.get(cg, ()):
            sim = similarity(tok_a[x], tok_b[y])
            if sim > min_similarity:
                cands.append((sim, x, y))
    cands.sort(key=lambda c: (-c[0], c[1], c[2]))
    used_a: set[str] = set()
    used_b: set[str] = set()
    out = []
    for _, x, y in cands:
        if x not in used_a and y not in used_b:
            used_a.add(x)
            used_b.add(y)
            out.append((x, y))
    return out


def is_convolution(name: str) -> bool:
    """A convolution's kernel (its math or its helpers), read from the name (see
    :data:`CONVOLUTION`); BatchNorm and layout-conversion kernels are not."""
    return _CONVOLUTION_RE.search(name) is not None and kernel_family(name) == "convolution"


def is_layout_conversion(name: str) -> bool:
    """An NCHW <-> NHWC layout conversion kernel (cuDNN/MIOpen), see :data:`LAYOUT`."""
    return _LAYOUT_RE.search(name) is not None


def kernel_family(name: str) -> str:
    """The kind of work a kernel does (see the module doc)."""
    if any(not r.dedicated_stream and r.compiled().search(name) for r in rules()):
        return "communication"
    for family, pat in _COMPILED:
        if pat.search(name):
            return family
    return "other"
