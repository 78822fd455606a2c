"""One model, two vendors: the H100/MI300 twin traces under tracelens/ (the same Hugging Face
runs, same shapes and dtypes) get the same verdict per check (fires, silent or not run), except
where the hardware itself differs, each said why below."""

from __future__ import annotations

from functools import cache

import pytest

from advisor.analysis.pipeline import analyze_path
from advisor.report import Report
from tests.conftest import SHARED

# check -> why its verdict may differ between an NVIDIA and an AMD run of one model
HARDWARE_DIFFERS = {
    # efficiency is against each GPU's own peaks, with each vendor's own kernels
    "kernel-efficiency": "each GPU's kernels against its own roofline",
    # ROCm kernel names do not tell whether FP32 matmuls ran on matrix cores: not run there
    "fp32-matmul": "AMD kernel names do not show the FP32 matmuls' math mode",
}


def _twins() -> list[str]:
    h100, mi300 = SHARED / "tracelens" / "h100", SHARED / "tracelens" / "mi300"
    if not h100.is_dir() or not mi300.is_dir():
        return []
    return sorted(p.name for p in h100.glob("*.json.gz") if (mi300 / p.name).is_file())


@cache
def _report(vendor: str, name: str) -> Report:
    return analyze_path(SHARED / "tracelens" / vendor / name)[1]


def _verdicts(rep: Report) -> dict[str, str]:
    out = {s.id: "not run" for s in rep.skipped}
    out.update({f.id: "fires" for f in rep.findings})
    return out


@pytest.mark.shared
@pytest.mark.parametrize("name", _twins() or ["(no twins)"])
def test_twins_agree_per_check(name: str) -> None:
    if name == "(no twins)":
        pytest.skip("../shared/traces/tracelens twins not available")
    a, b = _report("h100", name), _report("mi300", name)
    va, vb = _verdicts(a), _verdicts(b)
    differ = {
        k: (va.get(k, "silent"), vb.get(k, "silent"))
        for k in set(va) | set(vb)
        if va.get(k, "silent") != vb.get(k, "silent")
    }
    assert set(differ) <= set(HARDWARE_DIFFERS), differ
    assert a.run.trace_kind == b.run.trace_kind


@pytest.mark.shared
def test_misaligned_dims_on_both_vendors() -> None:
    name = "gaunernst_bert-small-uncased__1016001.json.gz"
    if name not in _twins():
        pytest.skip("BERT twins not available")
    for vendor in ("h100", "mi300"):
        f = next(x for x in _report(vendor, name).findings if x.id == "misaligned-dims")
        assert "M=141" in f.evidence[0].what and "bfloat16" in f.evidence[0].what
