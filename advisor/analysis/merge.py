"""One cause, one row: findings that claim the same events or the same kernel time.

Each draft's claim is what its fix (``Draft.saving``'s) changes (:mod:`advisor.replay.claims`:
kernels and copies by row, host time by thread; a detector may give ``Draft.claims`` itself).
Two findings that claim the same time would count it twice in the ranked table, so the time goes
to one row:

1. The drafts with a saving and a claim are taken from the most specific to the least: the
   smallest claim (GPU time plus host time) first, since a fix for a narrower cause touches less
   of the trace (ties: the larger saving, then the id).
2. A draft's *shared part* with earlier ones is measured on each side of its claim: the share of
   its GPU time (kernels, copies) and the share of its host time claimed before, whichever is
   larger (the same copies with a different wait, the same kernels with a different host range,
   are the same events).
3. It shares at most ``rank.min_shared_pct`` (1%): it keeps its row and its claim.
4. It shares at least ``rank.fold_pct`` (50%) with one row (that row's lead and the findings
   already listed under it): it is the same cause, and becomes part of that row (valued as in
   5. without what the other rows hold). The row is led
   by the finding whose own fix saves the most; the others are listed under it (``related`` in
   findings.json, each with its own figure, summary and shared share).
5. Otherwise it keeps its row, valued on the rest of its evidence: its fix without the shared
   part is replayed (a draft without a fix keeps the unshared share of its figure), and an
   assumption names the finding that holds the rest.

A claim on the whole step's host path (the whole step in CUDA graphs: ``Claims.whole``) holds the
narrower host-side causes inside it: a row whose claim lies at least ``rank.fold_pct`` inside it
(launch gaps, operator overhead, an optimizer's host time) joins its row before step 2 is
measured, so the whole-step figure is one row and those findings are listed under it, each with
its share of that claim.

So no two rows claim the same time, and the figures in the table can be read side by side.
"""

from __future__ import annotations

from dataclasses import replace

from advisor.detect.draft import Draft
from advisor.detect.thresholds import Thresholds
from advisor.findings import MIN_STEPS_SEEN, Related
from advisor.replay.claims import Claims, claims_of, without
from advisor.replay.whatif import whatif
from advisor.trace.model import Trace


def _claims(trace: Trace, d: Draft) -> Claims:
    if d.claims is not None:
        return d.claims
    return claims_of(trace, d.fix) if d.fix is not None else Claims()


def _counts(d: Draft) -> bool:
    once = d.steps_seen is not None and d.steps_seen < MIN_STEPS_SEEN
    return not d.latent and not once and d.est_savings_ms > 0


def _share(trace: Trace, c: Claims, size: tuple[int, int], other: Claims) -> float:
    """The larger of the GPU-time and host-time shares of ``c`` that ``other`` claims too."""
    shared = c.shared_ns(trace, other)
    return max((s / n for s, n in zip(shared, size, strict=True) if n > 0), default=0.0)


def one_row_per_cause(trace: Trace, drafts: list[Draft], th: Thresholds) -> list[Draft]:
    """``drafts`` with each cause in one row (see the module doc)."""
    claims = {i: _claims(trace, d) for i, d in enumerate(drafts) if _counts(d)}
    size = {i: c.size_ns(trace) for i, c in claims.items() if not c.empty()}
    order = sorted(
        (i for i in size if sum(size[i]) > 0),
        key=lambda i: (sum(size[i]), -drafts[i].est_savings_ms, drafts[i].id),
    )
    taken = Claims()
    groups: list[list[int]] = []  # the drafts of each row, and the union of their claims
    union: list[Claims] = []
    out = list(drafts)
    for i in order:
        c = claims[i]
        whole = _absorb(trace, c, groups, union, th) if c.whole else None
        share = _share(trace, c, size[i], taken)
        if whole is not None or share * 100 >= th["rank.min_shared_pct"]:
            by_row = [_share(trace, c, size[i], u) for u in union]
            g = (
                whole
                if whole is not None
                else max(range(len(groups)), key=lambda r: (by_row[r], -r))
            )
            if whole is not None or by_row[g] * 100 >= th["rank.fold_pct"]:
                others = Claims()  # what the other rows hold stays theirs
                for r, u in enumerate(union):
                    if r != g:
                        others = others | u
                rest = _share(trace, c, size[i], others)
                if rest * 100 >= th["rank.min_shared_pct"] and len(groups) > 1:
                    top = max((r for r in range(len(groups)) if r != g), key=lambda r: by_row[r])
                    out[i] = _rest(trace, out[i], others, rest, drafts[groups[top][0]].id)
                groups[g].append(i)
                union[g] = union[g] | c
                taken = taken | c
                continue
            out[i] = _rest(trace, out[i], taken, share, drafts[groups[g][0]].id)
        groups.append([i])
        union.append(c)
        taken = taken | c
    folded: set[int] = set()
    for members in groups:
        if len(members) < 2:
            continue
        lead = max(members, key=lambda i: (out[i].est_savings_ms, -members.index(i)))
        rel = tuple(
            Related(
                out[i].id,
                out[i].title,
                round(float(out[i].est_savings_ms), 3),
                out[i].summary,
                round(100.0 * _share(trace, claims[i], size[i], claims[lead]), 1),
            )
            for i in members
            if i != lead
        )
        out[lead] = replace(out[lead], related=rel)
        folded |= set(members) - {lead}
    return [d for i, d in enumerate(out) if i not in folded]


def _absorb(
    trace: Trace, c: Claims, groups: list[list[int]], union: list[Claims], th: Thresholds
) -> int | None:
    """The rows whose claims lie at least ``rank.fold_pct`` inside ``c`` (a whole-step claim)
    made into one row, last in ``groups``/``union``: its index (None: no such row)."""
    inside = [
        r
        for r, u in enumerate(union)
        if _share(trace, u, u.size_ns(trace), c) * 100 >= th["rank.fold_pct"]
    ]
    if not inside:
        return None
    members = [m for r in inside for m in groups[r]]
    merged = Claims()
    for r in inside:
        merged = merged | union[r]
    for r in sorted(inside, reverse=True):
        del groups[r], union[r]
    groups.append(members)
    union.append(merged)
    return len(groups) - 1


def _rest(trace: Trace, d: Draft, taken: Claims, share: float, other: str) -> Draft:
    """``d`` valued without the evidence already ``taken`` by more specific findings."""
    note = (
        f"{share:.0%} of the evidence this fix changes is claimed by a more specific finding "
        f"({other}) and counted there"
    )
    fix = d.fix
    keep = 1.0 - share
    if fix is not None:
        rest = without(trace, fix, taken)
        rep = whatif(trace, rest) if rest is not None else None
        if rep is not None and rep.replayed:
            # a call or range partly claimed stays whole in the fix: keep its unshared share
            mine = claims_of(trace, rest)
            left = 1.0 - _share(trace, mine, mine.size_ns(trace), taken)
            ms = rep.ms * left
            rng, ratio = rep.range_ms, left
            if rng is None and d.est_savings_range_ms is not None and d.est_savings_ms > 0:
                rng, ratio = d.est_savings_range_ms, ms / d.est_savings_ms  # its own range
            rng = None if rng is None else (rng[0] * ratio, rng[1] * ratio)
            return replace(
                d,
                est_savings_ms=ms,
                est_savings_range_ms=rng,
                assumptions=(
                    *d.assumptions,
                    f"{note}; replayed on the rest, this fix saves {ms:.2f} ms per step "
                    f"(alone: {d.est_savings_ms:.2f} ms).",
                ),
                # the rest's replay: its fix is the fix without the shared part (its figure is
                # before the unshared share of a partly claimed call or range)
                saving=rep,
            )
    rng = d.est_savings_range_ms
    return replace(
        d,
        est_savings_ms=d.est_savings_ms * keep,
        est_savings_range_ms=None if rng is None else (rng[0] * keep, rng[1] * keep),
        assumptions=(*d.assumptions, f"{note}; this figure keeps the rest ({keep:.0%})."),
    )
