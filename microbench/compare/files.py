"""What `compare` makes of its inputs, for the command and for the agent server alike: profiler traces (each analysed
as `trace --json` would) or their reports, side by side per kernel class and operator (report/trace_compare.py);
else results and pytest-benchmark files, per case (report/compare.py). Inspect files are the command's own."""

from __future__ import annotations

from pathlib import Path

from microbench.findings.analysis import TraceAnalysis
from microbench.report import trace_compare as T
from microbench.report.compare import compare, resolve_results
from microbench.trace.analysis import is_profiler_trace


def analyzed_traces(paths: list[Path]) -> dict[Path, dict]:
    """The inputs that are profiler traces, each analysed as `trace FILE --json` would (its report), so that two
    traces compare as their two reports do."""
    return {p: TraceAnalysis.open(p).document() for p in paths if is_profiler_trace(p)}


def comparison(paths: list[str | Path], baseline: str | None = None, analyzed: dict | None = None) -> tuple[str, dict]:
    """("traces", the trace comparison) or ("results", the results comparison) of the inputs (results folders
    resolved to their results.json); `analyzed`: the traces' reports where the caller has them."""
    paths = [resolve_results(p) for p in paths]
    analyzed = analyzed_traces(paths) if analyzed is None else analyzed
    traces = T.load_trace_reports(paths, analyzed)
    if traces:
        return "traces", T.compare_traces(traces, baseline)
    return "results", compare(paths, baseline)
