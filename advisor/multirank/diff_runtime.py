"""What two runs asked of the CUDA/HIP runtime per step, A beside B (``advisor diff``'s
``runtime`` block, part of why the step changed): the calls by kind and name, the copies by
direction and memories (:mod:`advisor.derive.callstats`), the host time before each step's first
GPU work, and ``changes``: what moved, in words. Said: a kind of call whose count per step changed
(by one or more and 10%), a direction of copies whose memories changed, whose bandwidth changed by
20%, whose share under compute moved by 10 points or whose calls' host time changed by 10% and
1 ms, and host time before the first GPU work that changed by 20% and 0.1 ms. These floors decide
what is said; the tables carry every call and copy. Several traces on a side are averaged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from advisor.digest import CopyRow, Digest

DIRECTIONS = {
    "HtoD": "host-to-device",
    "DtoH": "device-to-host",
    "DtoD": "device-to-device",
    "PtoP": "peer-to-peer",
    "HtoH": "host-to-host",
}


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


def _mean_calls(ds: Sequence[Digest]) -> dict[tuple[str, str], tuple[float, float]]:
    out: dict[tuple[str, str], list[float]] = {}
    rcs = [d.runtime_calls for d in ds if d.runtime_calls is not None]
    for rc in rcs:
        for c in rc.calls:
            acc = out.setdefault((c.kind, c.name), [0.0, 0.0])
            acc[0] += c.count / len(rcs)
            acc[1] += c.host_ms / len(rcs)
    return {k: (v[0], v[1]) for k, v in out.items()}


def _mean_copies(ds: Sequence[Digest]) -> dict[tuple[str, str, str], CopyRow]:
    rcs = [d.runtime_calls for d in ds if d.runtime_calls is not None]
    acc: dict[tuple[str, str, str], list[float]] = {}
    for rc in rcs:
        for c in rc.copies:
            v = acc.setdefault((c.kind, c.src, c.dst), [0.0] * 5)
            for i, x in enumerate(
                (c.count, c.bytes, c.gpu_ms, c.host_ms, c.overlap_pct * c.gpu_ms)
            ):
                v[i] += x / len(rcs)
    return {
        k: CopyRow(*k, v[0], v[1], v[2], v[3], v[4] / v[2] if v[2] else 0.0) for k, v in acc.items()
    }


def _copy_fields(c: CopyRow | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {
        "count": _r(c.count, 2),
        "bytes": round(c.bytes),
        "gpu_ms": _r(c.gpu_ms),
        "host_ms": _r(c.host_ms),
        "gbps": _r(c.bytes / c.gpu_ms / 1e6, 2) if c.gpu_ms > 0 else None,
        "overlap_pct": _r(c.overlap_pct, 1),
    }


def runtime_diff(a: Sequence[Digest], b: Sequence[Digest]) -> dict[str, Any] | None:
    """The ``runtime`` block (module doc); None when neither run's digests carry the calls."""
    if not any(d.runtime_calls for d in (*a, *b)):
        return None
    ca, cb = _mean_calls(a), _mean_calls(b)
    calls = [
        {
            "kind": k[0],
            "name": k[1],
            "a": {"count": _r(ca.get(k, (0, 0))[0], 2), "host_ms": _r(ca.get(k, (0, 0))[1])},
            "b": {"count": _r(cb.get(k, (0, 0))[0], 2), "host_ms": _r(cb.get(k, (0, 0))[1])},
        }
        for k in sorted(set(ca) | set(cb))
    ]
    pa, pb = _mean_copies(a), _mean_copies(b)
    copies = [
        {
            "kind": k[0],
            "src": k[1],
            "dst": k[2],
            "a": _copy_fields(pa.get(k)),
            "b": _copy_fields(pb.get(k)),
        }
        for k in sorted(set(pa) | set(pb), key=lambda k: (k[0], k[1], k[2]))
    ]
    fa = _median([d.runtime_calls.first_work_ms for d in a if d.runtime_calls])
    fb = _median([d.runtime_calls.first_work_ms for d in b if d.runtime_calls])
    return {
        "calls": calls,
        "copies": copies,
        "first_work_ms": {"a": _r(fa), "b": _r(fb)},
        "changes": _call_changes(ca, cb) + _copy_changes(pa, pb) + _first_change(fa, fb),
    }


def _median(xs: list[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return float(np.median(v)) if v else None


_KIND_WORDS = {
    "sync": "syncs",
    "launch": "kernel launches",
    "graph-launch": "graph launches",
    "alloc": "allocator calls",
    "copy": "copy calls",
}


def _call_changes(
    ca: dict[tuple[str, str], tuple[float, float]], cb: dict[tuple[str, str], tuple[float, float]]
) -> list[str]:
    out = []
    for kind, word in _KIND_WORDS.items():
        na = sum(v[0] for k, v in ca.items() if k[0] == kind)
        nb = sum(v[0] for k, v in cb.items() if k[0] == kind)
        if abs(nb - na) < max(1.0, 0.1 * max(na, nb)):
            continue
        ha = sum(v[1] for k, v in ca.items() if k[0] == kind)
        hb = sum(v[1] for k, v in cb.items() if k[0] == kind)
        names = sorted(
            {k[1] for k in (*ca, *cb) if k[0] == kind},
            key=lambda n: -abs(cb.get((kind, n), (0, 0))[0] - ca.get((kind, n), (0, 0))[0]),
        )
        top = names[0]
        what = f"{top} {ca.get((kind, top), (0, 0))[0]:g} -> {cb.get((kind, top), (0, 0))[0]:g}"
        out.append(
            f"{word}: {na:g} -> {nb:g} per step ({what}), host time in them {ha:.2f} -> {hb:.2f} ms"
        )
    return out


def _describe(c: CopyRow) -> str:
    bw = f", {c.bytes / c.gpu_ms / 1e6:.1f} GB/s" if c.gpu_ms > 0 else ""
    return f"{c.src} -> {c.dst} ({c.count:g} per step{bw})"


def _copy_changes(
    pa: dict[tuple[str, str, str], CopyRow], pb: dict[tuple[str, str, str], CopyRow]
) -> list[str]:
    out = []
    for kind in sorted({k[0] for k in (*pa, *pb)}):
        word = DIRECTIONS.get(kind, kind) + " copies"
        ra = [c for k, c in pa.items() if k[0] == kind]
        rb = [c for k, c in pb.items() if k[0] == kind]
        mem_a, mem_b = {(c.src, c.dst) for c in ra}, {(c.src, c.dst) for c in rb}
        if mem_a != mem_b and ra and rb:
            out.append(
                f"{word} moved from {', '.join(map(_describe, ra))} to "
                f"{', '.join(map(_describe, rb))}"
            )
            continue
        if not ra or not rb:
            side, rows = ("A", ra) if ra else ("B", rb)
            out.append(f"{word} only in {side}: {', '.join(map(_describe, rows))}")
            continue
        for x in ra:
            y = pb[(x.kind, x.src, x.dst)]
            out += _same_copies(word, x, y)
    return out


def _same_copies(word: str, x: CopyRow, y: CopyRow) -> list[str]:
    out = []
    bw_a = x.bytes / x.gpu_ms / 1e6 if x.gpu_ms > 0 else 0.0
    bw_b = y.bytes / y.gpu_ms / 1e6 if y.gpu_ms > 0 else 0.0
    label = f"{word} ({x.src} -> {x.dst})"
    if bw_a > 0 and bw_b > 0 and abs(bw_b - bw_a) >= 0.2 * bw_a:
        out.append(f"{label}: {bw_a:.1f} -> {bw_b:.1f} GB/s")
    if abs(y.overlap_pct - x.overlap_pct) >= 10.0:
        out.append(
            f"{label} under compute: {x.overlap_pct:.0f}% -> {y.overlap_pct:.0f}% of their time"
        )
    if abs(y.host_ms - x.host_ms) >= max(1.0, 0.1 * x.host_ms):
        out.append(f"{label}: their calls hold the host {x.host_ms:.2f} -> {y.host_ms:.2f} ms")
    return out


def _first_change(fa: float | None, fb: float | None) -> list[str]:
    if fa is None or fb is None or abs(fb - fa) < max(0.1, 0.2 * fa):
        return []
    return [f"host time before each step's first GPU work: {fa:.2f} -> {fb:.2f} ms"]
