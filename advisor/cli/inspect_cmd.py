"""``advisor inspect TRACE|DIR``: what is in a trace, before opening it in Perfetto."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from advisor.cli.analysis_options import Device, MaxTraceBytes
from advisor.trace.source import DEFAULT_MAX_TRACE_BYTES
from advisor.units import fmt_bytes


def register(app: typer.Typer) -> None:
    @app.command("inspect")
    def inspect_command(
        ctx: typer.Context,
        path: Path = typer.Argument(..., help="A trace (.json/.json.gz) or a folder of traces."),
        json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
        top: int = typer.Option(10, "--top", min=1, help="Rows in the top kernels/ops tables."),
        max_trace_bytes: MaxTraceBytes = DEFAULT_MAX_TRACE_BYTES,
        device: Device = None,
    ) -> None:
        """Show what a trace holds: devices, steps, GPU busy/idle, top kernels and ops, copies."""
        from advisor.trace import find_traces, load_trace, prefetch
        from advisor.trace.identity import with_device

        files = find_traces(path)
        # each trace decodes in a child process while this one imports pandas or summarizes the
        # trace before it
        pre = prefetch.take_over(ctx.obj, files[0], max_trace_bytes)
        results = []
        try:
            from advisor.analysis.summary import inspect_trace

            for i, f in enumerate(files):
                trace = with_device(load_trace(f, max_trace_bytes, pre), device)
                pre = prefetch.start(files[i + 1], max_trace_bytes) if i + 1 < len(files) else None
                results.append(inspect_trace(trace, top))
                del trace
        finally:
            if pre is not None:
                pre.cancel()
        if json_out:
            data = results[0] if len(results) == 1 else {"traces": results}
            from advisor.jsontext import document

            typer.echo(document(data), nl=False)
            return
        for r in results:
            _print(r)


def _print(r: dict[str, Any]) -> None:
    """The terminal summary: markup off (names print verbatim, ``k[/oops]`` included) and
    every name from the trace through :func:`~advisor.output.printable.printable`."""
    from rich.table import Table
    from rich.text import Text

    from advisor.output.printable import printable as p
    from advisor.output.terminal import console

    con = console(markup=False)
    head = Text(p(r["trace"]), style="bold")
    head.append(f"  ({r['events']:,} events, {p(r['format'])} format)")
    con.print(head)
    if r["rank"] is not None:
        con.print(f"rank {p(r['rank'])} of {p(r['world_size'])}")
    con.print(f"trace: {p(r['trace_kind'])} ({p(r['trace_kind_evidence'])})")
    for d in r["devices"]:
        if d["used"] or len(r["devices"]) == 1:
            cc = (
                f", compute capability {p(d['compute_capability'])}"
                if d["compute_capability"]
                else ""
            )
            mem = d["total_memory_bytes"]
            con.print(
                f"device {p(d['id'])}: {p(d['name'])}{cc}"
                + (f", {fmt_bytes(mem)}" if mem else "")
                + f"  ({p(d['source'])})"
            )
    s = r["steps"]
    con.print(
        f"steps: {s['count']}{' (no unit of work repeats: the recording is one step)' if s['synthetic'] else ''}"
        f"  median {s['ms_median']:.2f} ms  min {s['ms_min']:.2f}  max {s['ms_max']:.2f}"
    )
    con.print(f"step unit: {p(r['step_unit'])} ({p(r['step_unit_evidence'])})")
    if r["gpu_busy_pct"] is None:
        con.print("GPU: no GPU activity in this trace (CPU-only)")
    else:
        b = r["breakdown"]
        con.print(f"GPU busy {r['gpu_busy_pct']:.1f}% of the steps' wall time (as in the report)")
        con.print(
            f"GPU active span {b['span_ms']:.2f} ms (first to last GPU activity, last step left out, as HTA counts):"
            f" busy {b['busy_pct']:.1f}%, idle {b['idle_pct']:.1f}%"
            f" (compute {b['compute_pct']:.1f}%, communication {b['communication_pct']:.1f}%,"
            f" memcpy {b['memcpy_pct']:.1f}%, memset {b['memset_pct']:.1f}%)"
        )
    sb = r["step_breakdown"]
    if sb["steps"]:
        parts = ", ".join(
            f"{k.removesuffix('_ms').replace('_', ' ')} {v:.2f} ms"
            for k, v in sb.items()
            if k.endswith("_ms") and v > 0
        )
        con.print(f"per step (the report's breakdown, mean of {sb['steps']} steady steps): {parts}")
    for title, rows, cols in (
        ("Top kernels", r["kernels_top"], ("name", "count", "total_ms", "mean_us", "pct")),
        ("Top CPU ops", r["ops_top"], ("name", "count", "total_ms", "self_ms")),
        ("Memory copies", r["memcpy"], ("kind", "src", "dst", "count", "bytes", "total_ms")),
        ("Sync and blocking calls", r["sync_calls"], ("name", "count", "total_ms")),
    ):
        if not rows:
            continue
        t = Table(title=title, title_justify="left", box=None, header_style="bold")
        for c in cols:
            t.add_column(
                c,
                justify="left" if c in ("name", "kind", "src", "dst") else "right",
                overflow="fold",
                max_width=80 if c == "name" else None,
            )
        for row in rows:
            t.add_row(
                *[Text(f"{row[c]:,}" if isinstance(row[c], int) else p(row[c])) for c in cols]
            )
        con.print(t)
    for n in r["notes"]:
        con.print(Text(f"note: {p(n)}"))
