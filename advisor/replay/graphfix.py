"""The whole step in CUDA graphs as a graph edit (:class:`StepGraph`), beside
:class:`~advisor.replay.fixes.GraphLaunch` (some kernels in graphs), whose runs it applies
(:mod:`advisor.replay.graphruns`, where a run and what ends one are said; :func:`run_breaks` is
named here too, where detectors read it).
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.replay.fixes import GraphLaunch, Level
from advisor.replay.graphruns import apply_runs, run_breaks
from advisor.replay.model import Graph
from advisor.replay.mods import Mods
from advisor.trace.model import Trace


@dataclass
class StepGraph(GraphLaunch):
    """The whole step as CUDA graphs (``torch.compile(mode="reduce-overhead")``,
    ``torch.cuda.graphs``): every kernel and copy of the steady steps (``kernels``/``memcpy``)
    in graphs, the host time between launches gone (``host_keep`` 0) but for the ranges a
    graph does not hold; what a graph cannot hold (syncs, blocking copies: a read of values
    back to the host, a shape that depends on data) ends a graph, and the host work around it
    stays. Its low end is compile's fusion: the host time between launches goes the same way,
    but every kernel is still launched by its own call, at the measured cost, and waits for it.

    It changes when the GPU work starts, never how long it runs: it claims host time only
    (:mod:`advisor.replay.claims`)."""

    host_keep: float = 0.0
    label: str = "the whole step in CUDA graphs"

    @property
    def uncertain(self) -> bool:
        return True

    def apply(self, trace: Trace, gr: Graph, mods: Mods, level: Level) -> None:
        apply_runs(trace, self, gr, mods, self.host_keep, level == "low")


__all__ = ["StepGraph", "run_breaks"]
