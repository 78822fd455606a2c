"""A draft's saving is a typed field (``Draft.saving``, advisor/detect/draft.py): set by
``Saving.draft_fields()``, read for the headline bound (advisor/analysis/ranking.py), kept across
a plugin's process boundary (advisor/analysis/childrun.py), and the earlier hand-off,
``extra={"fix": fix}``, read once, as the draft's saving (advisor/analysis/isolation.py)."""

from __future__ import annotations

import pickle

from advisor.analysis.childrun import loads
from advisor.analysis.isolation import check_drafts
from advisor.analysis.ranking import headline_bound_ms, rank
from advisor.derive.steps import steady_trace
from advisor.detect import Draft, Saving, ScaleGpu
from advisor.detect.thresholds import Thresholds
from advisor.replay.fixes import Combined
from advisor.replay.whatif import whatif
from advisor.trace.model import Trace
from tests.tracebuilder import TraceBuilder


def _trace() -> Trace:
    """Steps of 1 ms, GPU-bound: kernels a (400 us), b (300 us), c (100 us) back to back, which
    the host then waits for."""
    b = TraceBuilder()
    for s in range(3):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        starts = {"a": 50, "b": 450, "c": 750}
        for j, (name, dur) in enumerate((("a", 400), ("b", 300), ("c", 100))):
            op = b.op("aten::mm", t + 5 + j * 10, 8)
            b.launch(op, "cudaLaunchKernel", t + 6 + j * 10, 4, name, t + starts[name], dur)
        b.runtime("cudaDeviceSynchronize", t + 40, 815)
    return steady_trace(b.load())


def _rows(trace: Trace, name: str) -> list[int]:
    names = trace.kernels["name"].astype(str).to_numpy()
    return [i for i, m in enumerate(names) if m == name]


def _draft(id_: str, ms: float = 1.0, **kw: object) -> Draft:
    fields: dict[str, object] = {"est_savings_ms": ms, **kw}
    return Draft(
        id_, id_, confidence="medium", summary="s", recommendation="r", snippet="", **fields
    )


def test_draft_fields_hand_the_saving_over_as_a_field() -> None:
    trace = _trace()
    rep = whatif(trace, ScaleGpu(kernels=_rows(trace, "a"), speedup=2.0))
    d = _draft("x", **rep.draft_fields())
    assert d.saving is rep and d.fix is rep.fix and d.extra == {}
    assert d.est_savings_ms == rep.ms > 0


def test_the_headline_replays_every_drafts_fix_at_once() -> None:
    trace = _trace()
    a = whatif(trace, ScaleGpu(kernels=_rows(trace, "a"), speedup=2.0))
    b = whatif(trace, ScaleGpu(kernels=_rows(trace, "b"), speedup=2.0))
    drafts = [_draft("p", **a.draft_fields()), _draft("q", **b.draft_fields())]
    step = trace.mean_step_ms()
    bound, replayed = headline_bound_ms(trace, drafts, rank(drafts, step, Thresholds({})), step)
    both = whatif(trace, Combined([a.fix, b.fix]), ends=False).ms
    assert replayed and bound == round(min(both, step), 3)
    # without the saving, the same figures are summed
    bare = [_draft("p", a.ms), _draft("q", b.ms)]
    bound, replayed = headline_bound_ms(trace, bare, rank(bare, step, Thresholds({})), step)
    assert not replayed and bound == round(min(a.ms + b.ms, step), 3)


def test_a_fix_in_extra_is_read_as_the_drafts_saving() -> None:
    """The deprecated hand-off (docs/plugins.md): the fix reaches the headline all the same."""
    trace = _trace()
    fix = ScaleGpu(kernels=_rows(trace, "a"), speedup=2.0)
    (d,), problem = check_drafts("p", [_draft("p", 0.2, extra={"fix": fix, "k": 1})])
    assert problem is None
    assert d.fix is fix and d.extra == {"k": 1}
    assert d.saving is not None and not d.saving.replayed and d.saving.ms == 0.2
    step = trace.mean_step_ms()
    _, replayed = headline_bound_ms(trace, [d], rank([d], step, Thresholds({})), step)
    assert replayed


def test_a_saving_of_another_type_is_refused() -> None:
    _, problem = check_drafts("p", [_draft("p", saving="2 ms")])
    assert problem is not None and "saving is str" in problem
    _, problem = check_drafts("p", [_draft("p", extra={"fix": "all of it"})])
    assert problem is not None and 'extra["fix"] is str' in problem


def test_a_saving_crosses_back_from_a_plugins_process() -> None:
    trace = _trace()
    rep = whatif(trace, ScaleGpu(kernels=_rows(trace, "a"), speedup=2.0))
    (d,) = loads(pickle.dumps([_draft("p", **rep.draft_fields())]))
    assert isinstance(d.saving, Saving) and d.saving == rep
    assert isinstance(d.fix, ScaleGpu) and list(d.fix.kernels) == _rows(trace, "a")
