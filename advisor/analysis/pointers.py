"""A finding's pointers to other findings ("see sync-point") point only into this report.

A detector that names another check for the fix (``gpu-idle`` naming the finding behind the
largest share of the idle time) lists the ids it points to in ``extra["see"]``. After every
detector ran, a pointer to a check that did not report (skipped, or nothing found) is taken out
of the summary and the recommendation, the advice around it kept:
``(see dataloader-stall: num_workers, pin_memory)`` -> ``(num_workers, pin_memory)``,
``(see tiny-kernels)`` and ``: see tiny-kernels.`` -> nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from advisor.detect.draft import Draft


def keep_pointers(drafts: Iterable[Draft]) -> list[Draft]:
    """``drafts`` with their pointers to checks that did not report removed."""
    out = list(drafts)
    fired = {d.id for d in out}
    return [_drop(d, [i for i in d.extra.get("see", ()) if i not in fired]) for d in out]


def _drop(d: Draft, dead: list[str]) -> Draft:
    if not dead:
        return d
    return replace(
        d, summary=_strip(d.summary, dead), recommendation=_strip(d.recommendation, dead)
    )


def _strip(text: str, dead: list[str]) -> str:
    for i in dead:
        x = re.escape(i)
        text = re.sub(rf"\(see {x}: ", "(", text)  # the advice after it stays
        text = re.sub(rf"\s*\((?:[^()]*?: )?see {x}\)", "", text)
        text = re.sub(rf"[:;,]? see {x}(?=[.;,]|$)", "", text)
        text = re.sub(rf"\bsee {x}\b[:;,]? ?", "", text)
    return text
