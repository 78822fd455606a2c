"""The kernels and CPU ops whose time per step changed most between two runs (``advisor diff``'s
``kernels`` and ``ops``): kernels compare by :func:`~advisor.trace.kernelnames.name_key`, renamed
ones paired as the explanation paired them; CPU ops and ranges by name, a name found on one side
only paired with one on the other side only that runs as many times and shares more than half its
words (:func:`~advisor.trace.kernelnames.pair_renamed`: a compiled graph's new hash).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from advisor.digest import Digest
from advisor.trace.kernelnames import name_key, pair_renamed


def _r(x: float, nd: int = 3) -> float:
    return round(float(x), nd)


def _per_step(side: Sequence[Digest], attr: str) -> dict[str, tuple[float, float]]:
    """name -> (count per step, ms per step), summed over the side's traces."""
    tot: dict[str, list[float]] = {}
    for d in side:
        for name, (count, ms) in getattr(d, attr).items():
            acc = tot.setdefault(name, [0.0, 0.0])
            acc[0] += count
            acc[1] += ms
    n = max(sum(d.steps for d in side), 1)
    return {k: (v[0] / n, v[1] / n) for k, v in tot.items()}


def top_changes(
    a: Sequence[Digest],
    b: Sequence[Digest],
    attr: str,
    top: int,
    kernel_renames: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The names whose time per step changed most, renamed names paired.

    Kernels (``kernel_renames``: B key -> A key, from the explanation's pairing) compare by
    :func:`~advisor.trace.kernelnames.name_key`; CPU ops and ranges by name, a name found on one
    side only paired with one on the other side only that runs as many times and shares more
    than half its words (a compiled graph's new hash). Ops and ranges found on one side only
    come after the others: ranges nest, so such a range (an annotation one run added) repeats
    time the ops both runs have already show."""
    pa, pb = _per_step(a, attr), _per_step(b, attr)
    if kernel_renames is not None:
        ka = _merge(pa, name_key)
        kb = _merge(pb, lambda n: kernel_renames.get(name_key(n), name_key(n)))
    else:
        only_a = {n: (round(v[0], 3), "") for n, v in pa.items() if n not in pb}
        only_b = {n: (round(v[0], 3), "") for n, v in pb.items() if n not in pa}
        back = {y: x for x, y in pair_renamed(only_a, only_b, 0.5)}
        ka = {n: (n, v) for n, v in pa.items()}
        kb = _merge(pb, lambda n: back.get(n, n))
    rows: list[dict[str, Any]] = []
    for key in set(ka) | set(kb):
        name_a, (ca, ma) = ka.get(key, ("", (0.0, 0.0)))
        name_b, (cb, mb) = kb.get(key, ("", (0.0, 0.0)))
        row: dict[str, Any] = {
            "name": name_b or name_a,
            "a_ms": _r(ma),
            "b_ms": _r(mb),
            "delta_ms": _r(mb - ma),
            "a_count": _r(ca, 2),
            "b_count": _r(cb, 2),
        }
        if name_a and name_b and name_a != name_b:
            row["a_name"] = name_a
        rows.append(row)
    one_side_last = kernel_renames is None
    rows.sort(
        key=lambda r: (
            one_side_last and (r["a_count"] == 0 or r["b_count"] == 0),
            -abs(r["delta_ms"]),
            r["name"],
        )
    )
    return [r for r in rows if r["delta_ms"] != 0][:top]


def _merge(
    per_step: dict[str, tuple[float, float]], key: Callable[[str], str]
) -> dict[str, tuple[str, tuple[float, float]]]:
    """Per-step (count, ms) summed per ``key(name)``, with the name of the largest."""
    acc: dict[str, tuple[str, tuple[float, float]]] = {}
    for name, (c, ms) in sorted(per_step.items(), key=lambda kv: -kv[1][1]):
        k = key(name)
        if k in acc:
            n0, (c0, m0) = acc[k]
            acc[k] = (n0, (c0 + c, m0 + ms))
        else:
            acc[k] = (name, (c, ms))
    return acc
