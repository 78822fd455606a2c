"""How close each kernel class comes to the device's limit, and why not: the analysis behind
``kernel-efficiency`` and the report's top-kernels table. Not a detector.

A *kernel class* is one op with one input shape and dtype (``aten::mm [4096x4096 4096x4096]
bfloat16``) and the kernels it launched. Its work comes from the shapes (:mod:`._roofline`), the
device's limits from the peak table (:mod:`._peaks`): the *limit* time is the work at peak
math or peak bandwidth, whichever is longer, and the class is *compute-bound* or
*memory-bound* accordingly (arithmetic intensity above or below the device's ridge point).
The *fraction* is the limit time over the measured kernel time: the share of peak FLOP/s
(compute-bound) or of peak bytes/s (memory-bound) the kernels reach. Each class below the
target share gets its causes (:mod:`._causes`), the first of which is the one it is
reported under.

Kernels claimed elsewhere are left out: the matmuls and softmax of a materialized attention
(``attention-materialized``) and FP32 matmuls on the CUDA cores of a GPU with Tensor Cores
(``fp32-matmul``: a faster dtype is that finding's fix).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from advisor.derive.timeline import main_device
from advisor.detect.thresholds import Thresholds, register
from advisor.trace.gpus import GpuSpec, spec_for
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

from ._attention import claimed_kernels
from ._causes import Cause, causes
from ._kernelname import KernelName, parse
from ._matmul import CONV_FWD, arch_cc, matmul_kernels, op_dtype
from ._ops import chain_match, op_names
from ._roofline import ATTN_OPS, ELEMENTWISE, REDUCTIONS, Work, op_work

register("kernel_efficiency.target", 0.5, "share of the device's limit a good kernel reaches")
register(
    "kernel_efficiency.floor_us",
    5.0,
    "the least time any kernel call is expected to take, added to the roofline (us)",
)

# the findings that claim kernels modelled here instead of kernel-efficiency
CLAIMS = ("", "attention-materialized", "fp32-matmul")
CLAIM_TEXT = {
    "attention-materialized": "attention scores materialized: see attention-materialized",
    "fp32-matmul": "FP32 on CUDA cores where a faster dtype would do: see fp32-matmul",
}


@dataclass(frozen=True, eq=False)
class KernelClass:
    op: int  # first cpu_ops row of the class
    name: str
    shape: str
    dtype: str | None
    tc: bool  # ran on Tensor Cores / matrix cores
    n: int  # op calls
    ns: float  # kernel time
    limit_ns: float  # the work at the device's limit, all calls
    work: Work  # of one call
    kernel: KernelName  # what the name of its longest-running kernel says
    kernel_name: str
    rows: np.ndarray  # its kernels (rows of trace.kernels)
    causes: tuple[Cause, ...]  # empty when at or above the target share
    ridge: float  # FLOP per byte where the device turns compute-bound, for this dtype
    claimed_by: str = ""  # the finding that claims these kernels instead (see _op_kernels)

    @property
    def bound(self) -> str:
        return "memory" if self.work.flops == 0 or self.work.intensity < self.ridge else "compute"

    @property
    def fraction(self) -> float:
        return self.limit_ns / self.ns if self.ns > 0 else 0.0


@dataclass(frozen=True)
class Analysis:
    peak: GpuSpec
    units: int  # SMs / CUs
    classes: tuple[KernelClass, ...]


def analysis(trace: Trace, th: Thresholds) -> Analysis | None:
    """Every kernel class of ``trace`` with its limit, fraction and causes; None when the
    device is not in the peak table (memoized per threshold values)."""
    key = "efficiency." + repr(sorted(th.used().items()))
    return trace.memo(key, lambda: _analysis(trace, th))


def _analysis(trace: Trace, th: Thresholds) -> Analysis | None:
    dev = trace.device(main_device(trace))
    peak = spec_for(dev)
    if peak is None:
        return None
    units = (dev.num_sms if dev is not None and dev.num_sms else 0) or peak.units
    kern = _op_kernels(trace, th)
    if not len(kern):
        return Analysis(peak, units, ())
    ops = trace.cpu_ops
    opn = op_names(trace)
    dims_col, types_col = ops["input_dims"].to_numpy(), ops["input_types"].to_numpy()
    kcodes = trace.kernels["name"].cat.codes.to_numpy().astype(np.int64)
    kcats = [str(c) for c in trace.kernels["name"].cat.categories]
    kdur = trace.kernels["dur_ns"].to_numpy()
    calls = kern.groupby("op", sort=False).agg(
        ns=("ns", "sum"), tc=("tc", "any"), claim=("claim", "max")
    )
    rows = []
    # an op's dtype, work and shape depend on its name, shapes and types only (and, for a
    # convolution, on its output): once per distinct one (the same values are often the same
    # objects: the decoder keeps one object per distinct shape list)
    seen: dict[tuple[str, int, int], tuple[Any, Work | None, str]] = {}  # (by object id)
    per_op = (calls.index.tolist(), calls["ns"].tolist(), calls["tc"].tolist(), calls["claim"])
    for op, ns, tc, code in zip(*per_op[:3], per_op[3].tolist(), strict=True):
        claim = CLAIMS[int(code)]
        name, dims, types = opn[op], dims_col[op], types_col[op]
        if name in CONV_FWD:
            dtype = op_dtype(types)
            out = None
            if isinstance(dims, list | tuple) and len(dims) >= 2:
                x, wt = dims[0], dims[1]
                if isinstance(x, list | tuple) and isinstance(wt, list | tuple) and x and wt:
                    out = _conv_out(trace, int(op), list(x), int(wt[0]))
            work, shape = op_work(name, dims, dtype, out), shape_text(dims)
        else:
            key = (name, id(dims), id(types))
            got = seen.get(key)
            if got is None:
                dtype = op_dtype(types)
                got = seen[key] = (dtype, op_work(name, dims, dtype, None), shape_text(dims))
            dtype, work, shape = got
        if work is None:
            continue
        rows.append((int(op), name, shape, dtype, bool(tc), float(ns), work, claim))
    if not rows:
        return Analysis(peak, units, ())
    cols = ["op", "name", "shape", "dtype", "tc", "ns", "work", "claim"]
    df = pd.DataFrame(rows, columns=cols)
    kop, krow = kern["op"].to_numpy(np.int64), kern["row"].to_numpy(np.int64)
    order = np.argsort(kop, kind="stable")
    uniq, first = np.unique(kop[order], return_index=True)
    krow_of_op = dict(zip(uniq.tolist(), np.split(krow[order], first[1:]), strict=True))
    out_classes = []
    floor_ns = th["kernel_efficiency.floor_us"] * 1e3
    for (name, shape, dtype, tc, claim), g in df.groupby(
        ["name", "shape", "dtype", "tc", "claim"], sort=False, dropna=False
    ):
        w: Work = g["work"].iat[0]
        pf = peak.tflops(dtype, bool(tc)) * 1e12
        bw = peak.mem_gbs * 1e9
        one = max(w.flops / pf if w.flops else 0.0, w.nbytes / bw) * 1e9
        krows = np.concatenate([krow_of_op[o] for o in g["op"]])
        per_name = np.bincount(kcodes[krows], weights=kdur[krows])
        kname = kcats[int(np.argmax(per_name))]
        kc = KernelClass(
            op=int(g["op"].iat[0]),
            name=str(name),
            shape=str(shape),
            dtype=dtype if isinstance(dtype, str) else None,
            tc=bool(tc),
            n=len(g),
            ns=float(g["ns"].sum()),
            limit_ns=one * len(g),
            work=w,
            kernel=parse(kname),
            kernel_name=kname,
            rows=krows,
            causes=(),
            ridge=pf / bw,
            claimed_by=str(claim),
        )
        ideal_ns = max(one, floor_ns) * len(g) / th["kernel_efficiency.target"]
        cs: tuple[Cause, ...] = ()
        if kc.claimed_by:  # true whatever the efficiency: the other finding's fix applies
            cs = (Cause("claimed", CLAIM_TEXT[kc.claimed_by], 0.0),)
        elif kc.ns > ideal_ns:
            cs = causes(kc, ideal_ns, peak, units, th)
        out_classes.append(replace(kc, causes=cs))
    return Analysis(peak, units, tuple(out_classes))


def _op_kernels(trace: Trace, th: Thresholds) -> pd.DataFrame:
    """The kernels of the ops modelled here: columns op (cpu_ops row), row (in
    ``trace.kernels``), ns, tc (ran on Tensor Cores), claim (index into CLAIMS of the finding
    that claims them instead: ``attention-materialized`` for a materialized attention's
    kernels, ``fp32-matmul`` for FP32 matmuls on the CUDA cores of a GPU with Tensor Cores; 0:
    none). Kernels
    outside the steps and collectives are left out."""
    k = trace.kernels
    ksel = (k["step"] >= 0).to_numpy() & ~k["is_comm"].to_numpy(dtype=bool)
    claim = np.zeros(len(k), dtype=np.int8)  # an index into CLAIMS
    claim[claimed_kernels(trace, int(th["attention_materialized.min_seq"]))] = 1
    all_mk = matmul_kernels(trace)
    mk = all_mk[(all_mk["op"] >= 0).to_numpy() & ksel[all_mk["row"].to_numpy(np.int64)]]
    cc, _ = arch_cc(trace)
    mrows = mk["row"].to_numpy(np.int64)
    if trace.meta.platform != "rocm" and cc is not None and cc >= (7, 0):
        fp32 = mk["fp32"].to_numpy(dtype=bool)
        claim[mrows[fp32 & (claim[mrows] == 0)]] = 2
    parts = [
        pd.DataFrame(
            {
                "op": mk["op"].to_numpy(),
                "row": mrows,
                "ns": mk["dur_ns"].to_numpy(),
                "tc": mk["tc"].to_numpy(dtype=bool),
            }
        )
    ]
    ksel[all_mk["row"].to_numpy(np.int64)] = False
    if ksel.any() and len(trace.runtime):
        rows = np.flatnonzero(ksel)
        li = k["launch_idx"].to_numpy()[rows]
        rt_op = trace.runtime["op_idx"].to_numpy()
        launcher = np.where(li >= 0, rt_op[np.clip(li, 0, None)], -1)
        names = trace.cpu_ops["name"]
        attn = chain_match(
            trace, launcher, name_flags(names, ATTN_OPS.__contains__), outermost=True
        )
        mem_ops = ELEMENTWISE | REDUCTIONS
        mem = chain_match(trace, launcher, name_flags(names, mem_ops.__contains__))
        mem = np.where(np.isin(launcher, all_mk["op"].to_numpy()), -1, mem)
        dur = k["dur_ns"].to_numpy()[rows]
        for col, tc in ((attn, True), (np.where(attn >= 0, -1, mem), False)):
            sel = col >= 0
            parts.append(pd.DataFrame({"op": col[sel], "row": rows[sel], "ns": dur[sel], "tc": tc}))
    out = pd.concat([p for p in parts if len(p)] or parts[:1], ignore_index=True)
    out["claim"] = claim[out["row"].to_numpy(np.int64)] if len(out) else []
    return out


def _conv_out(trace: Trace, i: int, x: list[int], co: int) -> list[int] | None:
    """The output shape of forward convolution call ``i``: the first tensor [N, C_out, ...] that
    one of the next ops on its thread takes as its first input."""
    ops = trace.cpu_ops
    tid, end = ops["tid"].iat[i], ops["end_ns"].iat[i]
    after = ops.index[(ops["tid"].to_numpy() == tid) & (ops["ts_ns"].to_numpy() >= end)][:6]
    for j in after:
        d = ops["input_dims"].iat[int(j)]
        if isinstance(d, list | tuple) and d and isinstance(d[0], list | tuple):
            y = list(d[0])
            if len(y) == len(x) and y[0] == x[0] and y[1] == co:
                return y
    return None


def shape_text(dims: Any) -> str:
    """An op's Input Dims as "512x4096 4096x4096" ("?" without shapes)."""
    if not isinstance(dims, list | tuple):
        return "?"
    return " ".join("x".join(map(str, d)) for d in dims if isinstance(d, list | tuple) and d)


@dataclass(frozen=True, eq=False)
class RowFigures:
    """Per row of ``trace.kernels``: the fraction of the device's limit its kernel class
    reaches (NaN: not modelled), whether that class is compute- or memory-bound, the key and
    text of its lead cause ("" when none; object arrays)."""

    fraction: np.ndarray
    bound: np.ndarray
    cause_key: np.ndarray
    cause_text: np.ndarray


def row_figures(an: Analysis | None, n_kernels: int) -> RowFigures:
    """:class:`RowFigures` of the classes in ``an`` (all unknown when ``an`` is None; the
    fraction is unknown where it would exceed the limit)."""
    frac = np.full(n_kernels, np.nan)
    bound, key, text = (np.full(n_kernels, "", dtype=object) for _ in range(3))
    for kc in an.classes if an is not None else ():
        # above the limit, the work count overstates what the kernel did (Winograd and FFT
        # convolutions multiply less): no figure rather than a wrong one
        frac[kc.rows] = kc.fraction if kc.fraction <= 1.0 else np.nan
        bound[kc.rows] = kc.bound
        if kc.causes:
            key[kc.rows], text[kc.rows] = kc.causes[0].key, kc.causes[0].text
    return RowFigures(frac, bound, key, text)
