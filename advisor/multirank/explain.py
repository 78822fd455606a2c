"""Why the step time changed between two runs: kernels paired across the runs, their changes
grouped, and a net attribution whose lines add up to the change (the ``explain`` block of
``advisor diff``).

**Pairing** (per pair of traces, over the steps both compare: the first N steady steps of each,
N the smaller count; the main GPU's kernels, communication aside, in start order; the naming
rules are :mod:`advisor.trace.kernelnames`):

1. Kernels with the same :func:`~advisor.trace.kernelnames.name_key` (Triton's numeric suffix
   and the order of its fused parts do not count) that run as many times on both sides pair
   occurrence by occurrence: the *skeleton* of the step.
2. A name found on one side only pairs with a name found on the other side only when both are
   of the same :func:`~advisor.trace.kernelnames.kernel_family`, are launched by the same op
   (the op around most of their launches, compared by its words, so a compiled graph's new
   hash still matches; none for both counts as the same) and run as many times; among
   several candidates, the one sharing most words (template arguments, parameters and numbers
   aside) wins. These are the renamed kernels; they join the skeleton.
3. The skeleton cuts each side into segments (the kernels between two paired kernels). When
   both sides keep the skeleton in the same order, the other kernels with the same key pair in
   order within the same segment; otherwise in order over the whole run.
4. What is left is work *added* (B only) or *removed* (A only). Each added or removed kernel is
   charged to the paired kernel that runs next on its side (its *anchor*): work inserted before
   the same kernel in every layer adds up on one line ("added before ``sage_fwd``").

**Attribution** (ms per step; the lines add up to the change of the mean steady step, to the
rounding; ``mean_step_delta_ms``):
the paired kernels' change summed per family, the added/removed work per anchor (with its
families), the other parts of the step breakdown (:mod:`advisor.derive.breakdown`:
communication, copies, data loading, idle, host), and what is left of the change in GPU
computation time: kernels running at the same time (on several streams) and the steps outside
the compared ones. The change of the *median* step (``step_delta_ms``, the verdict's) differs
from the mean's when the steps vary; both are given.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from advisor.arrays import setdiff_ints, unique_ints
from advisor.derive.breakdown import CATEGORIES
from advisor.digest import Digest, KernelSeq
from advisor.trace.kernelnames import kernel_family, name_key, name_tokens, pair_renamed

TOP_GROUPS = 8  # added/removed groups listed by name; the rest make one line


def _r(x: float, nd: int = 3) -> float:
    return round(float(x), nd)


class _Side:
    """One side's kernels over its first ``n`` steady steps, with per-kernel key and family
    (computed once per distinct name; the per-kernel arrays by indexing)."""

    def __init__(self, seq: KernelSeq, n: int) -> None:
        steps = unique_ints(seq.step)[:n]
        keep = np.isin(seq.step, steps)
        self.ops = seq.ops
        self.name_idx = seq.name_idx[keep]
        self.op_idx = seq.op_idx[keep]
        self.dur_ns = seq.dur_ns[keep].astype(np.int64)
        keys = [name_key(x) for x in seq.names]
        self.key = np.asarray(keys, dtype=object)[self.name_idx]
        families = [kernel_family(x) for x in seq.names]
        self.family = np.asarray(families, dtype=object)[self.name_idx]
        self.names_of_key: dict[str, str] = {}
        for name, key in zip(seq.names, keys, strict=True):
            self.names_of_key.setdefault(key, name)
        codes, uniq = pd.factorize(self.key)
        order = np.argsort(codes, kind="stable")
        cuts = np.flatnonzero(np.diff(codes[order])) + 1
        self.positions: dict[str, np.ndarray] = {
            str(uniq[codes[g[0]]]): g for g in np.split(order, cuts) if len(g)
        }

    def __len__(self) -> int:
        return len(self.name_idx)


def _group(side: _Side, pos: np.ndarray) -> str:
    """What a kernel must share with its renamed counterpart: its family and the op that
    launches most of its calls, by the op's words (a compiled graph's new hash aside)."""
    op = side.ops[int(np.bincount(side.op_idx[pos]).argmax())] if len(pos) else ""
    return f"{side.family[pos[0]]}|{' '.join(sorted(name_tokens(op)))}"


def _renames(
    a: _Side, b: _Side, ka: dict[str, np.ndarray], kb: dict[str, np.ndarray]
) -> list[tuple[str, str]]:
    """Keys on one side only paired with keys on the other side only (same family, same
    launching op, same count; the most shared words first:
    :func:`advisor.trace.kernelnames.pair_renamed`)."""
    only_a = {k: (float(len(v)), _group(a, v)) for k, v in ka.items() if k not in kb}
    only_b = {k: (float(len(v)), _group(b, v)) for k, v in kb.items() if k not in ka}
    return pair_renamed(only_a, only_b)


def pair_kernels(a: _Side, b: _Side) -> tuple[np.ndarray, np.ndarray, list[tuple[str, str]]]:
    """Paired positions (A, B), and the renamed keys (A key, B key). See the module doc."""
    ka, kb = a.positions, b.positions
    renamed = _renames(a, b, ka, kb)
    skel = [(ka[k], kb[k]) for k in ka if k in kb and len(ka[k]) == len(kb[k])]
    skel += [(ka[x], kb[y]) for x, y in renamed]
    pa = np.concatenate([x for x, _ in skel]) if skel else np.zeros(0, np.int64)
    pb = np.concatenate([y for _, y in skel]) if skel else np.zeros(0, np.int64)
    order = np.argsort(pa, kind="stable")
    pa, pb = pa[order], pb[order]
    monotonic = bool(np.all(np.diff(pb) > 0)) if len(pb) > 1 else True
    sb = np.sort(pb)
    rest_a, rest_b = [], []
    for k in ka:
        if k not in kb or len(ka[k]) == len(kb[k]):
            continue
        ia, ib = ka[k], kb[k]
        if monotonic:  # pair within the same segment of the skeleton
            seg_a = np.searchsorted(pa, ia)
            seg_b = np.searchsorted(sb, ib)
            for s in unique_ints(seg_a):
                xa, xb = ia[seg_a == s], ib[seg_b == s]
                m = min(len(xa), len(xb))
                rest_a.append(xa[:m])
                rest_b.append(xb[:m])
        else:
            m = min(len(ia), len(ib))
            rest_a.append(ia[:m])
            rest_b.append(ib[:m])
    if rest_a:
        pa = np.concatenate([pa, *rest_a])
        pb = np.concatenate([pb, *rest_b])
    return pa, pb, renamed


def _anchors(n: int, paired: np.ndarray) -> np.ndarray:
    """For each position of a side: the index (into the sorted ``paired``) of the next paired
    position at or after it; len(paired): none (the end of the steps)."""
    return np.searchsorted(np.sort(paired), np.arange(n))


def _explain_pair(da: Digest, db: Digest) -> dict[str, Any] | None:
    if da.kernel_seq is None or db.kernel_seq is None:
        return None
    n = min(len(unique_ints(da.kernel_seq.step)), len(unique_ints(db.kernel_seq.step)))
    if n == 0:
        return None
    a, b = _Side(da.kernel_seq, n), _Side(db.kernel_seq, n)
    pa, pb, renamed = pair_kernels(a, b)
    # paired changes per family (the B kernel's family)
    by_fam = pd.Series(b.dur_ns[pb] - a.dur_ns[pa]).groupby(b.family[pb]).agg(["sum", "size"])
    changed = {str(f): float(r["sum"]) for f, r in by_fam.iterrows()}
    pairs_per_family = {str(f): int(r["size"]) for f, r in by_fam.iterrows()}
    # added / removed work, charged to the next paired kernel on its side
    order = np.argsort(pa, kind="stable")
    sa, sb_of_a = pa[order], pb[order]
    order_b = np.argsort(pb, kind="stable")
    sb, sa_of_b = pb[order_b], pa[order_b]
    groups: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    lone_a = setdiff_ints(np.arange(len(a)), pa)
    lone_b = setdiff_ints(np.arange(len(b)), pb)
    anc_a = _anchors(len(a), sa)[lone_a]
    anc_b = _anchors(len(b), sb)[lone_b]

    def anchor_key(side_b: bool, j: int) -> tuple[str, str]:
        if side_b:
            if j >= len(sb):
                return ("", "")
            return (str(a.key[sa_of_b[j]]), str(b.key[sb[j]]))
        if j >= len(sa):
            return ("", "")
        return (str(a.key[sa[j]]), str(b.key[sb_of_a[j]]))

    for i, j in zip(lone_b, anc_b, strict=True):
        groups[anchor_key(True, int(j))][str(b.family[i])] += float(b.dur_ns[i])
    for i, j in zip(lone_a, anc_a, strict=True):
        groups[anchor_key(False, int(j))][str(a.family[i])] -= float(a.dur_ns[i])
    # by launching op
    ops: dict[str, float] = defaultdict(float)
    for side, sign in ((a, -1.0), (b, 1.0)):
        sums = np.bincount(side.op_idx, weights=side.dur_ns, minlength=len(side.ops))
        for name, ns in zip(side.ops, sums, strict=True):
            ops[name or "(no CPU op)"] += sign * float(ns)
    fams: dict[str, float] = defaultdict(float)
    for side, sign in ((a, -1.0), (b, 1.0)):
        for fam, ns in pd.Series(side.dur_ns).groupby(side.family).sum().items():
            fams[str(fam)] += sign * float(ns)
    names_a, names_b = a.names_of_key, b.names_of_key
    per = 1.0 / n / 1e6  # ns over n steps -> ms per step
    return {
        "steps": n,
        "changed": {f: v * per for f, v in changed.items()},
        "pairs": dict(pairs_per_family),
        "groups": {k: {f: v * per for f, v in g.items()} for k, g in groups.items()},
        "ops": {k: v * per for k, v in ops.items()},
        "families": {k: v * per for k, v in fams.items()},
        "renamed": [(names_a[x], names_b[y], len(a.positions[x]) / n) for x, y in renamed],
        "key_names": {**names_a, **names_b},
        "kernel_ms": (float(a.dur_ns.sum()) * per, float(b.dur_ns.sum()) * per),
    }


def _mean_dicts(parts: Sequence[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for p in parts:
        for k, v in p.items():
            out[k] += v / len(parts)
    return dict(out)


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def _group_fields(key: tuple[str, str], names: dict[str, str]) -> dict[str, Any]:
    """The label of an added/removed group, and its anchor's full names (B's, then A's)."""
    ka, kb = key
    if not kb:
        return {"label": "added/removed at the end of the step", "before": None, "was": None}
    nb, na = names.get(kb, kb), names.get(ka, ka)
    label = f"added/removed before {_short(nb)}"
    if ka and ka != kb:
        label += f" (was {_short(na)})"
    return {"label": label, "before": nb, "was": na if ka != kb else None}


def explain(
    a: Sequence[Digest],
    b: Sequence[Digest],
    categories_a: dict[str, float],
    categories_b: dict[str, float],
    step_delta_ms: float,
    top: int = 10,
) -> dict[str, Any] | None:
    """The ``explain`` block of the diff (None: the digests carry no kernels, CPU runs).
    Traces pair by rank (else in order); their figures are averaged over the pairs."""
    by_rank_b = {d.rank: d for d in b if d.rank is not None}
    pairs = [
        (x, by_rank_b.get(x.rank, y) if x.rank is not None else y)
        for x, y in zip(a, b, strict=False)
    ]
    parts = [p for p in (_explain_pair(x, y) for x, y in pairs) if p is not None]
    if not parts:
        return None
    changed = _mean_dicts([p["changed"] for p in parts])
    families = _mean_dicts([p["families"] for p in parts])
    ops = _mean_dicts([p["ops"] for p in parts])
    names: dict[str, str] = {}
    for p in parts:
        names.update(p["key_names"])
    groups: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for p in parts:
        for k, g in p["groups"].items():
            for f, v in g.items():
                groups[k][f] += v / len(parts)
    kernel_delta = float(np.mean([p["kernel_ms"][1] - p["kernel_ms"][0] for p in parts]))

    lines: list[dict[str, Any]] = []
    for fam, v in changed.items():
        npairs = sum(p["pairs"].get(fam, 0) for p in parts) / len(parts) / parts[0]["steps"]
        lines.append(
            {
                "kind": "changed",
                "label": f"{fam} kernels, paired ({npairs:g} per step)",
                "family": fam,
                "delta_ms": v,
            }
        )
    ranked = sorted(groups.items(), key=lambda kv: (-abs(sum(kv[1].values())), kv[0]))
    rest: dict[str, float] = defaultdict(float)
    for i, (key, g) in enumerate(ranked):
        if i < TOP_GROUPS:
            lines.append(
                {
                    "kind": "added",
                    **_group_fields(key, names),
                    "delta_ms": sum(g.values()),
                    "families": {f: _r(v) for f, v in sorted(g.items(), key=lambda x: -abs(x[1]))},
                }
            )
        else:
            for f, v in g.items():
                rest[f] += v
    if rest:
        lines.append(
            {
                "kind": "added",
                "label": "other added/removed kernels",
                "delta_ms": sum(rest.values()),
                "families": {f: _r(v) for f, v in sorted(rest.items(), key=lambda x: -abs(x[1]))},
            }
        )
    for c in CATEGORIES:
        if c == "compute":
            continue
        d = categories_b.get(c, 0.0) - categories_a.get(c, 0.0)
        lines.append({"kind": "breakdown", "label": f"{c} (step breakdown)", "delta_ms": d})
    compute_delta = categories_b.get("compute", 0.0) - categories_a.get("compute", 0.0)
    lines.append(
        {
            "kind": "rest",
            "label": "kernels overlapping each other, steps not compared",
            "delta_ms": compute_delta - kernel_delta,
        }
    )
    lines = [dict(x, delta_ms=_r(x["delta_ms"])) for x in lines if abs(x["delta_ms"]) >= 5e-4]
    lines.sort(key=lambda x: (-abs(x["delta_ms"]), x["label"]))
    total = sum(x["delta_ms"] for x in lines)
    renamed = sorted(
        {(x, y, c) for p in parts for x, y, c in p["renamed"]}, key=lambda t: (-t[2], t[0])
    )
    return {
        "steps_compared": min(p["steps"] for p in parts),
        "lines": lines,
        "lines_sum_ms": _r(total),
        "mean_step_delta_ms": _r(sum(categories_b.values()) - sum(categories_a.values())),
        "step_delta_ms": _r(step_delta_ms),
        "by_family": [
            {"family": f, "delta_ms": _r(v)}
            for f, v in sorted(families.items(), key=lambda x: (-abs(x[1]), x[0]))
            if abs(v) >= 5e-4
        ],
        "by_op": [
            {"op": o, "delta_ms": _r(v)}
            for o, v in sorted(ops.items(), key=lambda x: (-abs(x[1]), x[0]))[:top]
            if abs(v) >= 5e-4
        ],
        "renamed": [{"a": x, "b": y, "per_step": _r(c, 2)} for x, y, c in renamed[: 3 * top]],
    }
