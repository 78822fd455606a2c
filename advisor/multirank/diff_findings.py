"""The findings of two runs matched by what they are (``advisor diff``'s ``findings`` block).

**Same finding.** Two findings are the same when they have the same id and phase and one of
these holds, tried in this order, each pairing only what the earlier ones left:

1. the same place: file and line of their first location;
2. the same function in the same file (the fix moved the line);
3. the same claim in the same file: the words of their first evidence row (the op or kernel
   they claim: ``ampere_sgemm_128x64_nn via aten::mm``), numbers and ``file:line`` references
   left out (the function was renamed);
4. neither has a location (pairs in ranking order), or one of them has none and each run has
   one finding of that id (a trace recorded without stacks);
5. one run lists it under another finding's row (``Finding.related``: one cause, one row).

A file is known by its name, except: files generated at run time (torch.compile's Inductor
cache, FX's ``<eval_with_key>``, Triton's cache, a name that is a hash) are one file, whatever
their hash; the runs' own scripts (``run.script``) are one file; and a file name found in one
run's findings only is the same file as one found in the other run's only when the two names
share a word (``streams3_blocking.py`` -> ``streams3_non_blocking.py``: the script renamed).

**New and resolved only when the value crosses.** A finding of one run that the other lacks
may only have stayed under the detector's reporting floor there (``host_preprocessing.min_pct``
and the other value floors, :func:`advisor.detect.thresholds.value_gates`). The other run is
then measured again with those floors off (``near``); when the finding shows there at more than
:data:`CROSS_FRACTION` of its value it is *changed*, both values shown ("grew 27.03 -> 31.16
ms, over its reporting floor in B only"), not new or resolved.

**Still to fix**: B's findings that are not information-only, by saving.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from advisor.findings import SEVERITIES, Finding, Location
from advisor.trace.kernelnames import name_tokens, pair_renamed

CROSS_FRACTION = 0.5  # the other run's value above this share of it: changed, not new/resolved
GENERATED = "<generated>"
_GENERATED_DIR_RE = re.compile(
    r"(?:^|/)(?:torchinductor_[^/]*|inductor|torch_compile_debug|triton|__pycache__)/", re.I
)
_HASH_STEM_RE = re.compile(r"^(?=[a-z0-9]*\d)(?=[a-z0-9]*[a-z])[a-z0-9]{20,}$", re.I)
_FILE_REF_RE = re.compile(r"\S+\.py:\d+")

Near = Callable[[str, frozenset[str]], Sequence[Finding]]


def is_generated(path: str) -> bool:
    """A file written at run time: an Inductor/Triton cache file, FX's ``<eval_with_key>``,
    a ``<string>``, or a name that is a hash."""
    stem = Path(path).stem
    return (
        bool(_GENERATED_DIR_RE.search(path))
        or path.startswith("<")
        or bool(_HASH_STEM_RE.match(stem))
    )


def file_keys(
    a: Sequence[Finding],
    b: Sequence[Finding],
    scripts: tuple[str | None, str | None] = (None, None),
) -> tuple[dict[str, str], dict[str, str]]:
    """Per run, each location's file -> the name it is matched by (see the module doc)."""
    files = [{loc.file for f in fs for loc in f.locations} for fs in (a, b)]
    keys = [{p: (GENERATED if is_generated(p) else Path(p).name) for p in fs} for fs in files]
    sa, sb = scripts
    if sa and sb:
        for k, script in zip(keys, (sa, sb), strict=True):
            for p in k:
                if Path(p).name == Path(script).name:
                    k[p] = "<script>"
    names_a = {v for v in keys[0].values() if not v.startswith("<")}
    names_b = {v for v in keys[1].values() if not v.startswith("<")}
    only_a = {n: (1.0, "") for n in names_a - names_b}
    only_b = {n: (1.0, "") for n in names_b - names_a}
    renamed = {x: y for x, y in pair_renamed(_stems(only_a), _stems(only_b))}
    for p, v in keys[0].items():
        if Path(v).stem in renamed:
            keys[0][p] = f"<renamed {v}>"
            for q, w in keys[1].items():
                if Path(w).stem == renamed[Path(v).stem]:
                    keys[1][q] = f"<renamed {v}>"
    return keys[0], keys[1]


def _stems(names: dict[str, tuple[float, str]]) -> dict[str, tuple[float, str]]:
    return {Path(n).stem: v for n, v in names.items()}


def claim(f: Finding) -> tuple[str, ...]:
    """The words of the finding's first evidence row (numbers and file:line references out)."""
    if not f.evidence:
        return ()
    return tuple(sorted(name_tokens(_FILE_REF_RE.sub(" ", f.evidence[0].what))))


def match_findings(
    a: Sequence[Finding],
    b: Sequence[Finding],
    scripts: tuple[str | None, str | None] = (None, None),
) -> tuple[list[tuple[Finding, Finding]], list[Finding], list[Finding]]:
    """Pairs (the same finding), resolved (only in a), new (only in b): rules 1-4 of the
    module doc."""
    fka, fkb = file_keys(a, b, scripts)

    def loc(f: Finding, fk: dict[str, str]) -> tuple[str, Location] | None:
        return (fk[f.locations[0].file], f.locations[0]) if f.locations else None

    def keyer(level: int) -> Callable[[Finding, dict[str, str]], object]:
        def key(f: Finding, fk: dict[str, str]) -> object:
            where = loc(f, fk)
            if level == 3:
                return (f.phase, f.id) if where is None else None
            if where is None:
                return None
            part = (where[1].line, where[1].function, claim(f))[level]
            return (f.phase, f.id, where[0], part) if part != () else None

        return key

    left, right = list(a), list(b)
    pairs: list[tuple[Finding, Finding]] = []
    for level in range(4):
        key = keyer(level)
        for fa in list(left):
            ka = key(fa, fka)
            if ka is None:
                continue
            for fb in right:
                if key(fb, fkb) == ka:
                    pairs.append((fa, fb))
                    left.remove(fa)
                    right.remove(fb)
                    break
    for fa in list(left):  # one run without locations: one finding of the id on each side
        same_a = [x for x in left if (x.phase, x.id) == (fa.phase, fa.id)]
        same_b = [y for y in right if (y.phase, y.id) == (fa.phase, fa.id)]
        if len(same_a) == len(same_b) == 1 and not (fa.locations and same_b[0].locations):
            pairs.append((fa, same_b[0]))
            left.remove(fa)
            right.remove(same_b[0])
    return pairs, left, right


def _listed_under(f: Finding, others: Sequence[Finding]) -> Finding | None:
    """The finding of the other run whose row lists ``f``'s id (rule 5), if one does."""
    rows = [o for o in others if o.phase == f.phase and any(r.id == f.id for r in o.related)]
    return rows[0] if len(rows) == 1 else None


def _as_listed(f: Finding, row: Finding) -> Finding:
    """The entry ``row`` lists for ``f``'s id, as a finding at ``row``'s place."""
    r = next(x for x in row.related if x.id == f.id)
    return Finding(
        r.id,
        r.title,
        row.severity,
        r.est_savings_ms,
        0.0,
        row.confidence,
        r.summary,
        "",
        "",
        locations=row.locations,
        phase=row.phase,
    )


def _where(f: Finding | None) -> str | None:
    if f is None or not f.locations:
        return None
    return f"{Path(f.locations[0].file).name}:{f.locations[0].line}"


def _change(fa: Finding | None, fb: Finding | None, crossed: str | None) -> str:
    if fb is None or fa is None:
        return "resolved" if fb is None else "new"
    sa, sb = fa.est_savings_ms, fb.est_savings_ms
    word = "grew" if sb > sa else "shrank" if sb < sa else "same"
    text = f"{word} {sa:.2f} -> {sb:.2f} ms per step"
    if crossed:
        text += f", over its reporting floor in {crossed.upper()} only"
    return text


def _entry(
    fa: Finding | None,
    fb: Finding | None,
    crossed: str | None = None,
    under: tuple[str | None, str | None] = (None, None),
) -> dict[str, Any]:
    f = fb or fa
    assert f is not None
    sev_a = None if fa is None or crossed == "b" or under[0] else fa.severity
    sev_b = None if fb is None or crossed == "a" or under[1] else fb.severity
    out: dict[str, Any] = {
        "id": f.id,
        "title": f.title,
        "location": _where(f),
        "severity": {"a": sev_a, "b": sev_b},
        "est_savings_ms": {
            "a": fa.est_savings_ms if fa else None,
            "b": fb.est_savings_ms if fb else None,
        },
        "summary": f.summary,
        "change": _change(fa, fb, crossed),
    }
    if fa is not None and fb is not None and _where(fa) != _where(fb):
        out["a_location"] = _where(fa)
    if crossed:
        out["under_floor"] = "a" if crossed == "b" else "b"
    if any(under):
        out["listed_under"] = {"a": under[0], "b": under[1]}
    return out


def _changed(fa: Finding, fb: Finding) -> bool:
    d = abs(fb.est_savings_ms - fa.est_savings_ms)
    return fa.severity != fb.severity or d >= max(0.05, 0.1 * fa.est_savings_ms)


def findings_diff(
    a: Sequence[Finding],
    b: Sequence[Finding],
    near: Near | None = None,
    scripts: tuple[str | None, str | None] = (None, None),
) -> dict[str, list[dict[str, Any]]]:
    """``resolved``, ``new``, ``changed``, ``unchanged`` and ``still_to_fix`` (module doc);
    ``near(side, ids)``: the findings of side ``"a"`` or ``"b"`` measured again for these
    ids with the value floors off (None: not measured again)."""
    pairs, resolved, new = match_findings(a, b, scripts)
    out: dict[str, list[dict[str, Any]]] = {k: [] for k in ("resolved", "new", "changed")}
    out["unchanged"] = []
    for fa, fb in pairs:
        out["changed" if _changed(fa, fb) else "unchanged"].append(_entry(fa, fb))
    for lone, others, side in ((resolved, b, "a"), (new, a, "b")):
        rest = []
        for f in lone:
            row = _listed_under(f, others)
            if row is None:
                rest.append(f)
                continue
            other = _as_listed(f, row)
            fa, fb = (f, other) if side == "a" else (other, f)
            under = (None, row.id) if side == "a" else (row.id, None)
            out["changed" if _changed(fa, fb) else "unchanged"].append(_entry(fa, fb, None, under))
        crossing = _near_pairs(rest, "b" if side == "a" else "a", near, scripts, side)
        for f in rest:
            crossed = crossing.get(id(f))
            if crossed is None:
                out["resolved" if side == "a" else "new"].append(
                    _entry(f, None) if side == "a" else _entry(None, f)
                )
            else:
                pair = (f, crossed) if side == "a" else (crossed, f)
                out["changed"].append(_entry(*pair, crossed=side))
    sev = SEVERITIES.index
    for k in out:
        out[k].sort(
            key=lambda e: (
                sev(e["severity"]["b"] or e["severity"]["a"] or "info"),
                e["id"],
                e["location"] or "",
            )
        )
    left = [e for k in ("new", "changed", "unchanged") for e in out[k] if e["severity"]["b"]]
    out["still_to_fix"] = sorted(
        (e for e in left if e["severity"]["b"] != "info"),
        key=lambda e: (-(e["est_savings_ms"]["b"] or 0.0), e["id"], e["location"] or ""),
    )
    return out


def _near_pairs(
    lone: list[Finding],
    other_side: str,
    near: Near | None,
    scripts: tuple[str | None, str | None],
    side: str,
) -> dict[int, Finding]:
    """For findings of one run only (``side``), the same finding measured in the other run with
    the value floors off, where its value there is above :data:`CROSS_FRACTION` of this one."""
    ask = [f for f in lone if f.severity != "info" and f.est_savings_ms > 0]
    if near is None or not ask:
        return {}
    found = list(near(other_side, frozenset(f.id for f in ask)))
    if side == "a":
        pairs, _, _ = match_findings(ask, found, scripts)
    else:
        pairs, _, _ = match_findings(found, ask, scripts)
        pairs = [(y, x) for x, y in pairs]
    return {
        id(mine): theirs
        for mine, theirs in pairs
        if theirs.est_savings_ms > CROSS_FRACTION * mine.est_savings_ms
    }
