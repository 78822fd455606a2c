"""Each collective's effective bandwidth, set against the link it runs over.

**Bytes.** From the collective's metadata: the ``Collective name``, ``In msg nelems``/``Out msg
nelems``, ``dtype`` and ``Group size`` that NCCL kernels carry (torch 2.3 and later), else those
of the ``record_param_comms`` op that launched the kernel (its op chain, or the same External
id). The bytes of a call follow nccl-tests: all-reduce, all-to-all, broadcast, reduce and
send/recv move their input; all-gather its whole output and reduce-scatter its whole input (the
larger of the two counts).

**Time.** A collective kernel starts when its rank reaches it and spins until the last rank
arrives, then transfers. With one trace, the shortest instance of the same collective (kind,
bytes, stream) is taken as its transfer time and the rest of each instance as *waiting for
peers*, kept apart (:mod:`advisor.derive.peerwait`'s one-rank rule, with message sizes known).

**Bandwidth.** Algorithm bandwidth = bytes / transfer time; bus bandwidth = algorithm bandwidth
x the algorithm's factor for ``n`` ranks: all-reduce 2(n-1)/n, all-gather, reduce-scatter and
all-to-all (n-1)/n, broadcast, reduce and send/recv 1 (nccl-tests' busbw, comparable with the
link's peak per direction). The link is the device table's (:mod:`advisor.trace.gpus`: NVLink,
xGMI or the PCIe slot); a group of more ranks than the GPUs the trace lists (two or more listed)
spans machines, and its link is the network (InfiniBand/RoCE), whose peak the trace does not
give: :data:`NETWORK_GBS` per GPU is assumed and said so. A one-rank group moves nothing over
any link (NCCL launches no kernel for it): its row has bytes but no bandwidth.

Rows: per collective kind and group size, over the steps (every instance without step markers),
on the GPU that communicates most.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from advisor.derive.comm import collective_name
from advisor.derive.timeline import main_device
from advisor.trace.commroles import family_of
from advisor.trace.gpus import spec_for
from advisor.trace.model import Trace

NETWORK_GBS = 50.0  # assumed network peak per GPU and direction: 400 Gb/s (NDR IB, 400G RoCE)

# the collectives whose bytes and factor are known: canonical name, the pattern of the names
# the metadata (``allreduce``, ``_allgather_base``...) and NCCL's kernels (``AllReduce``) use
_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (k, re.compile(p, re.IGNORECASE))
    for k, p in (
        ("all_reduce", r"all[_\- ]?reduce"),
        ("all_gather", r"all[_\- ]?gather"),
        ("reduce_scatter", r"reduce[_\- ]?scatter"),
        ("all_to_all", r"all[_\- ]?to[_\- ]?all"),
        ("broadcast", r"broadcast"),
        ("reduce", r"^_?reduce(?:_|$)"),
        ("send/recv", r"send|recv"),
    )
)
_ELT_BYTES = {
    "float": 4, "float32": 4, "f32": 4, "half": 2, "float16": 2, "f16": 2, "bfloat16": 2,
    "bf16": 2, "__nv_bfloat16": 2, "double": 8, "float64": 8, "f64": 8, "long": 8, "int64": 8,
    "i64": 8, "int64_t": 8, "u64": 8, "int": 4, "int32": 4, "i32": 4, "int32_t": 4, "u32": 4,
    "short": 2, "int16": 2, "byte": 1, "char": 1, "bool": 1, "int8": 1, "uint8": 1, "i8": 1,
    "u8": 1, "int8_t": 1, "uint8_t": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
}  # fmt: skip


@dataclass(frozen=True)
class Collective:
    """One kind of collective over a group size (see the module doc); None where unknown."""

    kind: str
    ranks: int | None
    calls: int
    dtype: str | None
    bytes_per_call: float | None  # median
    time_ns: int | None  # kernel time over the instances (None: no kernel ran)
    wait_ns: int | None  # of it, waiting for peers
    algbw_gbs: float | None
    busbw_gbs: float | None
    link: str | None
    link_gbs: float | None
    note: str = ""

    @property
    def link_pct(self) -> float | None:
        if self.busbw_gbs is None or not self.link_gbs:
            return None
        return 100.0 * self.busbw_gbs / self.link_gbs


def kind_of(name: str) -> str | None:
    """The canonical collective of a metadata or kernel name; None for others (barrier...)."""
    for k, rx in _KINDS:
        if rx.search(name):
            return k
    return None


def factor(kind: str, n: int) -> float:
    """The bus-bandwidth factor of ``kind`` over ``n`` ranks (nccl-tests)."""
    if n <= 1:
        return 0.0
    if kind == "all_reduce":
        return 2.0 * (n - 1) / n
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def message_bytes(kind: str, in_n: int, out_n: int, dtype: str) -> float | None:
    """Bytes of one call (see the module doc); None when the counts or the dtype are unknown."""
    elt = _ELT_BYTES.get(dtype.lower().removeprefix("c10::").removeprefix("torch."))
    if not elt:
        return None
    n = max(in_n, out_n) if kind in ("all_gather", "reduce_scatter") else in_n
    return float(n * elt) if n >= 0 else None


def collectives(trace: Trace) -> tuple[Collective, ...]:
    """The table of the module doc (memoized per trace)."""
    return trace.memo("commbw.collectives", lambda: _table(trace))


def _meta_of_kernels(trace: Trace, rows: np.ndarray) -> list[tuple[Any, ...] | None]:
    """Each kernel's collective metadata: its own, else the launching record_param_comms op's
    (up its op chain, else the op with the same External id)."""
    k, ops, rt = trace.kernels, trace.cpu_ops, trace.runtime
    own = k["comm"].to_numpy()[rows] if "comm" in k else np.full(len(rows), None)
    op_meta = ops["comm"].to_numpy() if "comm" in ops and len(ops) else np.zeros(0, object)
    parent = ops["parent_idx"].to_numpy() if len(ops) else np.zeros(0, np.int64)
    by_ext: dict[int, tuple[Any, ...]] = {}
    if len(op_meta):
        has = np.flatnonzero(pd.notna(op_meta))
        ext = ops["external_id"].to_numpy()
        by_ext = {int(ext[i]): op_meta[i] for i in has if ext[i] >= 0}
    li = k["launch_idx"].to_numpy()[rows]
    op_idx = rt["op_idx"].to_numpy() if len(rt) else np.zeros(0, np.int64)
    k_ext = k["external_id"].to_numpy()[rows]
    out: list[tuple[Any, ...] | None] = []
    for j in range(len(rows)):
        m = own[j] if isinstance(own[j], tuple) else None
        o = int(op_idx[li[j]]) if m is None and li[j] >= 0 else -1
        for _ in range(32):
            if m is not None or o < 0:
                break
            if isinstance(op_meta[o], tuple):
                m = op_meta[o]
            o = int(parent[o])
        out.append(m if m is not None else by_ext.get(int(k_ext[j])))
    return out


def _table(trace: Trace) -> tuple[Collective, ...]:
    k = trace.kernels
    rows = np.flatnonzero(k["is_comm"].to_numpy(dtype=bool)) if len(k) else np.zeros(0, np.int64)
    if len(trace.steps) and not trace.meta.synthetic_steps and len(rows):
        rows = rows[k["step"].to_numpy()[rows] >= 0]
    dev = main_device(trace)
    if len(rows):
        devs = k["device"].to_numpy()[rows]
        busiest = pd.Series(k["dur_ns"].to_numpy()[rows]).groupby(devs).sum().idxmax()
        rows = rows[devs == busiest]
        dev = int(busiest)
    names = k["name"].astype(str).to_numpy()[rows] if len(rows) else np.zeros(0, object)
    metas = _meta_of_kernels(trace, rows) if len(rows) else []
    world = trace.meta.world_size
    recs = []
    for r, name, m in zip(rows.tolist(), names.tolist(), metas, strict=True):
        kind = (kind_of(m[0]) or str(m[0])) if m else _kernel_kind(name)
        dtype = m[3] if m and m[3] else _name_dtype(name)
        n = m[4] if m and m[4] > 0 else world
        nbytes = message_bytes(kind, m[1], m[2], dtype) if m and dtype else None
        recs.append((r, kind, n, dtype, nbytes))
    df = pd.DataFrame(recs, columns=["row", "kind", "n", "dtype", "bytes"])
    df["dur"] = k["dur_ns"].to_numpy()[df["row"].to_numpy(dtype=np.int64)] if len(df) else []
    df["stream"] = k["stream"].to_numpy()[df["row"].to_numpy(dtype=np.int64)] if len(df) else []
    if len(df):
        key = df["bytes"].fillna(-1.0)
        df["transfer"] = df.groupby(["kind", key, "stream"], sort=False)["dur"].transform("min")
    out = [_row(trace, dev, g) for _, g in df.groupby(["kind", "n"], sort=True, dropna=False)]
    out += _kernel_less(trace, dev, {(c.kind, c.ranks) for c in out})
    return tuple(sorted(out, key=lambda c: -(c.time_ns or 0)))


def _kernel_kind(name: str) -> str:
    """A collective kernel's kind from its name (``ncclDevKernel_AllGather_RING_LL``,
    ``multimem_all_reduce_kernel``), else its communication family (``DeepEP``...)."""
    short = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    fam = family_of(name) or ""
    return (
        kind_of(collective_name(short)) or kind_of(short.split("(")[0]) or kind_of(fam) or fam
    ) or "other"


def _name_dtype(kernel: str) -> str | None:
    """The dtype a collective kernel's name ends its words with: ``ncclKernel_AllReduce_RING_LL_
    Sum_float(...)`` -> ``float``, ``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` -> ``f32``."""
    words = kernel.split("(")[0].split("_")
    return next((w for w in words if w.lower() in _ELT_BYTES), None)


def _link(trace: Trace, dev: int | None, n: int | None) -> tuple[str | None, float | None, str]:
    """(link, its peak GB/s per direction, a note) for a group of ``n`` ranks."""
    listed = len(trace.meta.devices)
    if n is not None and listed >= 2 and n > listed:
        return (
            "network (InfiniBand/RoCE)",
            NETWORK_GBS,
            f"{n} ranks on more GPUs than the {listed} this machine lists: the network links "
            f"them; its peak is not in the trace ({NETWORK_GBS:g} GB/s per GPU assumed)",
        )
    spec = spec_for(trace.device(dev))
    if spec is None or not spec.link:
        return None, None, ""
    note = (
        ""
        if listed >= 2
        else "the trace lists one GPU: if the group spans machines, the network is the link"
    )
    return spec.link, spec.link_gbs, note


def _row(trace: Trace, dev: int | None, g: pd.DataFrame) -> Collective:
    kind, n = str(g["kind"].iloc[0]), g["n"].iloc[0]
    n = int(n) if pd.notna(n) else None
    dur, transfer = int(g["dur"].sum()), g["transfer"].to_numpy()
    b = g["bytes"].to_numpy(dtype=float)
    known = np.isfinite(b)
    link, peak, note = _link(trace, dev, n)
    algbw = busbw = None
    if known.any() and transfer[known].sum() > 0:
        algbw = float(b[known].sum() / transfer[known].sum())  # bytes per ns = GB/s
        busbw = algbw * factor(kind, n) if n is not None else None
    elif not known.any():
        note = "; ".join(x for x in ("message sizes not in the trace", note) if x)
    dts = g["dtype"].dropna()
    return Collective(
        kind=kind,
        ranks=n,
        calls=len(g),
        dtype=str(dts.iloc[0]) if len(dts) else None,
        bytes_per_call=float(np.median(b[known])) if known.any() else None,
        time_ns=dur,
        wait_ns=int(dur - transfer.sum()),
        algbw_gbs=algbw,
        busbw_gbs=busbw,
        link=link,
        link_gbs=peak,
        note=note,
    )


def _kernel_less(
    trace: Trace, dev: int | None, seen: set[tuple[str, int | None]]
) -> list[Collective]:
    """Collectives whose ops carry metadata but launched no communication kernel (a one-rank
    group: NCCL runs none), per kind and group size, in the steps."""
    ops = trace.cpu_ops
    if not len(ops) or "comm" not in ops:
        return []
    meta = ops["comm"].to_numpy()
    rows = [i for i in np.flatnonzero(pd.notna(meta)) if isinstance(meta[i], tuple)]
    if len(trace.steps) and not trace.meta.synthetic_steps:
        step = ops["step"].to_numpy()
        rows = [i for i in rows if step[i] >= 0]
    groups: dict[tuple[str, int | None], list[tuple[Any, ...]]] = {}
    for i in rows:
        m = meta[i]
        kind = kind_of(m[0])
        n = m[4] if m[4] > 0 else trace.meta.world_size
        if kind is not None and (kind, n) not in seen:
            groups.setdefault((kind, n), []).append(m)
    out = []
    for (kind, n), ms in sorted(groups.items(), key=lambda kv: kv[0][0]):
        b = [x for x in (message_bytes(kind, m[1], m[2], m[3]) for m in ms) if x is not None]
        link, peak, _ = _link(trace, dev, n)
        out.append(
            Collective(
                kind=kind,
                ranks=n,
                calls=len(ms),
                dtype=ms[0][3] or None,
                bytes_per_call=float(np.median(b)) if b else None,
                time_ns=None,
                wait_ns=None,
                algbw_gbs=None,
                busbw_gbs=None,
                link=link,
                link_gbs=peak,
                note="one rank: nothing crosses a link (NCCL ran no kernel)"
                if n == 1
                else "no communication kernel recorded for these calls",
            )
        )
    return out
