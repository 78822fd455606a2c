"""Kernel names as a person scans them: demangled, return type and parameters dropped,
template arguments elided (the report's top-kernels table; the full name stays on hover)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import re
from typing import Any


@functools.cache
def _cxa_demangle() -> Any:
    """libstdc++'s ``__cxa_demangle`` (None where there is none: names stay as they are)."""
    for name in ("stdc++", "c++"):
        path = ctypes.util.find_library(name)
        if not path:
            continue
        try:
            fn = ctypes.CDLL(path).__cxa_demangle
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_void_p
        fn.argtypes = [
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_int),
        ]
        return fn
    return None


def demangle(name: str) -> str:
    """An Itanium-mangled C++ name (``_Z...``) demangled; any other name as it is."""
    if not name.startswith("_Z") or len(name) > 4096:
        return name
    fn = _cxa_demangle()
    if fn is None:
        return name
    status = ctypes.c_int(0)
    ptr = fn(name.encode("ascii", "replace"), None, None, ctypes.byref(status))
    if not ptr or status.value != 0:
        return name
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        ctypes.CDLL(None).free(ctypes.c_void_p(ptr))


_SIMPLE_ARG = re.compile(r"^[A-Za-z_]\w*$")


def _elide(text: str, open_: str, close: str, keep_simple: bool) -> str:
    """Every outermost ``open_ ... close`` group replaced by ``open_…close`` (kept when it holds
    one plain identifier and ``keep_simple``: ``Kernel2<cutlass_80_tensorop_s1688gemm_...>``)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == open_:
            if depth == 0:
                start = i
            depth += 1
        elif ch == close and depth > 0:
            depth -= 1
            if depth == 0:
                inner = text[start + 1 : i].strip()
                keep = keep_simple and _SIMPLE_ARG.match(inner) is not None
                out.append(f"{open_}{inner if keep else '…' if inner else ''}{close}")
        elif depth == 0:
            out.append(ch)
    if depth:  # unbalanced: the name is left alone
        return text
    return "".join(out)


def _drop_parameters(text: str) -> str:
    """``name<…>(int, float*)`` -> ``name<…>``: the trailing parameter list of a function
    signature (a "(" right after a name or ">"); other parentheses stay."""
    if not text.endswith(")"):
        return text
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        if text[i] == ")":
            depth += 1
        elif text[i] == "(":
            depth -= 1
            if depth == 0:
                if i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_>"):
                    return text[:i]
                return text
    return text


def short_kernel_name(name: str) -> str:
    """A kernel's name as a person scans it: demangled, without the return type and parameter
    list, template arguments elided to ``<…>`` (one plain identifier is kept: it is often the
    real name, as in cutlass's ``Kernel2<cutlass_80_tensorop_s1688gemm_...>``).
    ``void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)`` gives
    ``at::native::vectorized_elementwise_kernel<…>``; a name that is no C++ signature (no
    ``<``, ``::`` or parameter list) is left as it is."""
    full = demangle(name.strip())
    short = _drop_parameters(_elide(full, "<", ">", keep_simple=True))
    short = re.sub(r"^(?:void|static|__global__)\s+", "", short)
    return short.strip() or full
