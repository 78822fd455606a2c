"""Which GPU a trace ran on: from ``deviceProperties``, else inferred from kernel names, or as
the user names it (``--device``, ``device=``).

- **deviceProperties** (or the older ``computeProperties``): the GPU's own name. A device listed
  without a usable name (ROCm writes "" or "AMD Radeon Graphics") is named from its
  architecture, SM/CU count and memory when they fit one row of :mod:`advisor.trace.gpus`.
- **Kernel names**, when the trace lists no device: the architecture the kernels were built for.
  AMD Tensile/hipBLASLt kernels carry an ISA tag (``..._ISA942_...``: gfx942) and other kernels
  may name the target (``gfx90a``); NVIDIA kernels name the SM architecture (``sm90_xmma_...``,
  ``cutlass3x_sm100_...``, ``cutlass_80_tensorop...``) or a family (``volta_sgemm``,
  ``turing_...``, ``ampere_...``; ``nvjet``/``wgmma`` kernels exist from Hopper on). Kernels
  built for an older architecture run on newer GPUs, so the newest one found is a lower bound
  for the GPU, except where the code uses instructions of one architecture only (an AMD code
  object runs on its own target; Hopper's and Blackwell's sm_90a/sm_100a kernels on their own
  generation). An exact architecture made by one data-centre family names that family's usual
  part for the peak figures (gfx942: the MI300X; gfx950: the MI355X; sm_90: the H100 SXM;
  sm_100: the B200), and the report says the part was assumed, from what; a lower bound names
  no part (the compute capability is still known for the checks that need only that), so no
  peak-based check claims anything there.
- **The user** (:func:`with_device`) overrides both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

import numpy as np

from advisor.arrays import unique_ints
from advisor.errors import AdvisorError
from advisor.trace.gpus import GPUS, GpuSpec, arch_of, gpu, match_name, spec_for
from advisor.trace.model import Device, Trace

# an AMD target named in a kernel: Tensile's "ISA942", or "gfx942" / "gfx90a" outright
_AMD_RE = re.compile(r"(?:^|[^a-z0-9])(?:isa|gfx)(9[0-9][0-9a-f])(?:[^0-9a-z]|$)")
# an NVIDIA SM architecture: "sm90_xmma", "cutlass3x_sm100_", "sm_80", "cutlass_80_tensorop"
_SM_RE = re.compile(r"(?:^|[^a-z0-9])(?:sm_?|cutlass_)([1-9][0-9]{1,2})[a-z]?(?:[^0-9]|$)")
# kernel families by architecture (cuBLAS/cuDNN name prefixes and Hopper-only instructions)
_FAMILIES = (
    (re.compile(r"blackwell"), 100),
    (re.compile(r"(?:^|[^a-z])(?:nvjet|wgmma|gmma)|hopper"), 90),
    (re.compile(r"(?:^|[^a-z])ampere_"), 80),
    (re.compile(r"(?:^|[^a-z])turing_"), 75),
    (re.compile(r"(?:^|[^a-z])volta_"), 70),
    (re.compile(r"(?:^|[^a-z])maxwell_"), 50),
    (re.compile(r"(?:^|[^a-z])kepler_"), 35),
)
# the part an architecture names when one data-centre family makes it
_USUAL_PART = {
    "gfx90a": "MI250X (one GCD)",
    "gfx942": "MI300X",
    "gfx950": "MI355X",
    "sm_90": "H100 SXM",
    "sm_100": "B200",
    "sm_103": "B300",
}
_KNOWN_SM = (35, 50, 52, 60, 61, 70, 75, 80, 86, 87, 89, 90, 100, 103, 110, 120, 121)
# architectures whose kernels use instructions of that architecture only (Hopper's wgmma,
# Blackwell's tcgen05: sm_90a, sm_100a code runs on no other GPU): a tag names the GPU's own
_ARCH_SPECIFIC = (90, 100, 103)


def kernel_arch(names: Iterable[str]) -> tuple[str, str, bool] | None:
    """(architecture, the evidence, exact) from kernel names: ("gfx942", "ISA tag 942 in 20
    kernel names", True); exact is False when the architecture is only a lower bound (kernels
    built for sm_80 also run on sm_86, sm_89, sm_90...). None when no name says."""
    amd: dict[str, int] = {}
    sm: dict[int, int] = {}
    fam: dict[int, int] = {}
    for name in names:
        n = name.lower()
        if "isa" in n or "gfx" in n:
            for m in _AMD_RE.finditer(n):
                amd[m.group(1)] = amd.get(m.group(1), 0) + 1
        if "sm" in n or "cutlass_" in n:
            for m in _SM_RE.finditer(n):
                v = int(m.group(1))
                if v in _KNOWN_SM:
                    sm[v] = sm.get(v, 0) + 1
        for rx, v in _FAMILIES:
            if rx.search(n):
                fam[v] = fam.get(v, 0) + 1
    if amd:  # an AMD code object runs on its own target only
        tag = max(amd, key=lambda t: (amd[t], t))
        return f"gfx{tag}", f"ISA tag {tag} in {amd[tag]} kernel name(s)", True
    if not sm and not fam:
        return None
    low = max([*sm, *fam])
    exact = [v for v in sm if v in _ARCH_SPECIFIC]
    if exact and max(exact) >= low:
        v = max(exact)
        return f"sm_{v}", f"sm{v} in {sm[v]} kernel name(s)", True
    how = f"sm{low}" if low in sm else f"sm_{low} kernel families"
    return f"sm_{low}", f"{how} in {sm.get(low, 0) + fam.get(low, 0)} kernel name(s)", False


def _named(d: Device) -> Device:
    """A listed device without a usable name, named from its architecture, SMs/CUs, memory."""
    if d.name and d.name.upper() not in ("AMD RADEON GRAPHICS", "UNKNOWN GPU"):
        return d
    spec = spec_for(d)
    if spec is None:
        return d
    arch = d.arch or arch_of(d.vendor, d.compute_capability) or spec.arch
    what = f"{arch}, {d.num_sms} {spec.unit}"
    if d.total_memory_bytes:
        what += f", {d.total_memory_bytes / 1024**3:.0f} GiB"
    alike = [
        g.name
        for g in GPUS
        if g is not spec
        and (g.arch, g.units) == (spec.arch, spec.units)
        and abs(g.memory_gb - spec.memory_gb) <= 0.1 * spec.memory_gb
    ]
    if alike:
        what += f"; {' or '.join(alike)} alike"
    return replace(
        d, name=_display(spec), source=f"deviceProperties without a name ({what})", arch=arch
    )


def _display(spec: GpuSpec) -> str:
    return ("AMD Instinct " if spec.vendor == "amd" else "NVIDIA ") + spec.name


def cc_of(arch: str) -> tuple[int, int] | None:
    """The compute capability of an architecture name (sm_90: 9.0; gfx942: HIP's 9.4)."""
    if arch.startswith("sm_"):
        v = int(arch[3:])
        return v // 10, v % 10
    inv = {
        "gfx908": (9, 0),
        "gfx90a": (9, 0),
        "gfx942": (9, 4),
        "gfx950": (9, 5),
        "gfx1100": (11, 0),
    }
    return inv.get(arch)


def identify(
    listed: tuple[Device, ...], kernel_names: Iterable[str], device_ids: np.ndarray
) -> tuple[Device, ...]:
    """The trace's devices: those listed (named where they were not), else one inferred from
    the kernel names (with the id the kernels carry), else none."""
    if listed:
        return tuple(_named(d) for d in listed)
    found = kernel_arch(kernel_names)
    if found is None:
        return ()
    arch, evidence, exact = found
    ids = unique_ints(device_ids[device_ids >= 0]) if len(device_ids) else np.zeros(0, np.int64)
    dev_id = int(ids[0]) if len(ids) == 1 else 0
    vendor = "amd" if arch.startswith("gfx") else "nvidia"
    part = _USUAL_PART.get(arch) if exact else None
    if part is None:
        what = f"{arch}" if exact else f"{arch} or newer"
        return (
            Device(
                dev_id,
                f"{'AMD' if vendor == 'amd' else 'NVIDIA'} GPU ({what})",
                cc_of(arch),
                None,
                None,
                vendor,
                source=f"inferred from kernel names ({evidence}): {what}, no part assumed "
                "(--device names it)",
                arch=arch,
            ),
        )
    spec = gpu(part)
    family = [g.name for g in GPUS if g.arch == arch]
    others = [f for f in family if f != spec.name]
    also = f"; {arch} is also the {', '.join(others)} (--device names it)" if others else ""
    return (
        Device(
            dev_id,
            _display(spec),
            cc_of(arch),
            None,
            spec.units,
            vendor,
            source=f"inferred from kernel names ({evidence}): {spec.name} assumed{also}",
            arch=arch,
        ),
    )


def with_device(trace: Trace, name: str | None) -> Trace:
    """``trace`` with every device named ``name`` (a row of :mod:`advisor.trace.gpus`: "H100",
    "mi300x", "NVIDIA A100-SXM4-80GB"...); ``trace`` itself when ``name`` is empty. Raises
    :class:`~advisor.errors.AdvisorError` for a GPU not in the table."""
    if not name:
        return trace
    spec = match_name(name)
    if spec is None:
        known = ", ".join(g.name for g in GPUS)
        raise AdvisorError(f"--device: unknown GPU {name!r} (known: {known})")
    listed = trace.meta.devices
    ids = [d.id for d in listed]
    if not ids:
        seen = np.concatenate(
            [trace.kernels["device"].to_numpy(), trace.memcpy["device"].to_numpy()]
        )
        ids = [int(i) for i in unique_ints(seen[seen >= 0])] or [0]
    devs = tuple(
        Device(
            i,
            _display(spec),
            cc_of(spec.arch),
            int(spec.memory_gb * 1024**3),
            spec.units,
            spec.vendor,
            source="--device",
            arch=spec.arch,
        )
        for i in ids
    )
    return replace(trace, meta=replace(trace.meta, devices=devs))
