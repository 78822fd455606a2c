"""Whether one op's result feeds the next: the evidence a trace holds about data flow between
ops. Shared by ``fusible-elementwise`` (a chain is fusible only when each kernel's output feeds
the next) and ``attention-materialized`` (bmm -> softmax -> bmm on the same scores). Not a
detector.

Kineto traces carry no tensor identities, so data flow is judged from what they do carry:

- **Shapes** (``record_shapes``): an op's result has the broadcast shape of its tensor inputs
  (elementwise ops) or the shape its op defines (matmuls); the next op must take a tensor of
  that shape.
- **Repeats**: the same op with the same input shapes, called again by the same op (the two
  gradient terms of one backward node) or, at the top level, from the same line of the user's
  code (a loop over one statement, a benchmark's repetitions), is an independent repeat, not a
  step of a chain. Two identical ops on different known lines (``x = x * a`` then
  ``x = x * b``) or in different modules can be a chain; without Python stacks, identical
  top-level ops one after the other are taken as repeats (a loop over features, layers or
  heads), which is what such runs almost always are.
- **Kernels without ops** (launches not linked to an operator): consecutive launches of the
  same kernel with the same grid are repeats; different kernels may be a chain.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from advisor.derive.locate import Locator
from advisor.trace.model import Trace

from ._ops import kernel_op, op_names, outermost


def tensor_dims(raw: Any) -> list[tuple[int, ...]]:
    """The tensor inputs of an op's ``Input Dims`` (scalars, None and lists of lists left out)."""
    if not isinstance(raw, list | tuple):
        return []
    out = []
    for x in raw:
        if isinstance(x, list | tuple) and x and all(isinstance(v, int) for v in x):
            out.append(tuple(int(v) for v in x))
    return out


def broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...] | None:
    """The broadcast shape of ``shapes`` (None when they do not broadcast or there are none)."""
    if not shapes:
        return None
    try:
        return tuple(int(v) for v in np.broadcast_shapes(*shapes))
    except ValueError:
        return None


def matmul_out(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """The result shape of ``a @ b`` for batched matrices of the same rank (None otherwise)."""
    if len(a) != len(b) or len(a) < 2 or a[-1] != b[-2]:
        return None
    batch = broadcast([a[:-2], b[:-2]]) if len(a) > 2 else ()
    return None if batch is None else (*batch, a[-2], b[-1])


class Flow:
    """Data-flow tests between ops of one trace (built once per detector run)."""

    def __init__(self, trace: Trace, locator: Locator | None) -> None:
        self.trace = trace
        self.locator = locator
        self.names = op_names(trace) if len(trace.cpu_ops) else np.array([], dtype=object)
        self.dims = trace.cpu_ops["input_dims"].to_numpy() if len(trace.cpu_ops) else []
        self.parent = trace.cpu_ops["parent_idx"].to_numpy() if len(trace.cpu_ops) else []
        self._line: dict[int, tuple[str, int] | None] = {}

    def line(self, op: int) -> tuple[str, int] | None:
        if op not in self._line:
            loc = self.locator.for_op(op) if self.locator is not None else None
            self._line[op] = (loc.file, loc.line) if loc is not None else None
        return self._line[op]

    def caller(self, op: int) -> int:
        """The op that called ``op`` (above any wrappers of the same name, as
        ``aten::nan_to_num`` around ``aten::nan_to_num``), -1 at the top level."""
        top = outermost(self.trace, op, frozenset({str(self.names[op])}))
        return int(self.parent[top])

    def repeat(self, a: int, b: int) -> bool:
        """Op ``b`` repeats op ``a``: same name and input shapes, called by the same op (the
        two gradient terms of one backward node) or, at the top level, from the same user line
        (a loop over one statement)."""
        if self.names[a] != self.names[b] or self.dims[a] != self.dims[b]:
            return False
        pa, pb = self.caller(a), self.caller(b)
        if pa >= 0 or pb >= 0:
            return pa == pb
        return self.line(a) == self.line(b)

    def feeds(self, a: int, b: int, same_kernel: bool = False) -> bool:
        """Op ``a``'s result (broadcast shape of its tensor inputs) is one of ``b``'s inputs;
        True when shapes are unknown (nothing contradicts a chain). False when ``b`` repeats
        ``a`` with the same kernel (``same_kernel``: the caller compared the kernels)."""
        if a == b:
            return True
        if same_kernel and self.repeat(a, b):
            return False
        ta, tb = tensor_dims(self.dims[a]), tensor_dims(self.dims[b])
        if not ta or not tb:
            return True
        out = broadcast(ta)
        return out is None or out in tb


def kernel_links(
    trace: Trace, flow: Flow, prev: np.ndarray, nxt: np.ndarray, before: np.ndarray | None = None
) -> np.ndarray:
    """For pairs of kernels rows (``prev[i]`` ran just before ``nxt[i]`` on its stream, and
    ``before[i]`` just before that, -1 if none): whether the second can consume the first's
    output (see the module doc). Two sibling ops of one parent that repeat each other (the two
    gradient terms of a backward node) both read what ran before them: the run continues when
    the second can consume that."""
    kop = kernel_op(trace)
    k = trace.kernels
    codes = k["name"].cat.codes.to_numpy()
    grid = k["grid"].to_numpy() if "grid" in k else np.full(len(k), None)
    out = np.ones(len(prev), dtype=bool)
    if before is None:
        before = np.full(len(prev), -1, dtype=np.int64)
    for i, (p, q, r) in enumerate(zip(prev.tolist(), nxt.tolist(), before.tolist(), strict=True)):
        a, b = int(kop[p]), int(kop[q])
        same = bool(codes[p] == codes[q])
        if a >= 0 and b >= 0:
            out[i] = flow.feeds(a, b, same)
            c = int(kop[r]) if r >= 0 else -1
            if not out[i] and c >= 0 and flow.caller(a) >= 0 and flow.caller(a) == flow.caller(b):
                out[i] = flow.feeds(c, b, bool(codes[r] == codes[q]))
        else:
            out[i] = not (same and grid[p] == grid[q])
    return out
