"""A decomposition (decompose's run) with its findings: the findings of its own profiler trace first
(findings/engine.py), the trace's analysis for the report page. One owner for `decompose`, the public API and
`verify`."""

from __future__ import annotations

from microbench.findings.analysis import TraceAnalysis
from microbench.findings.engine import with_findings
from microbench.models.ranges import STEP_RANGE

TRACE_KEYS = ("summary", "devices", "kernels", "ops", "steps", "notes", "classes", "mfu")


def with_decomposition_findings(d) -> dict:
    """`d`: decompose.pipeline.run_decomposition's result. Its document with `findings*` and `trace_analysis`."""
    ta = TraceAnalysis(d.timeline, d.cfg, STEP_RANGE, path=d.trace_path, decomposition=None if d.dev.is_gpu else d.doc)
    tdoc = ta.document()
    doc = with_findings(d.doc, ta.findings)
    doc["trace_analysis"] = {k: tdoc[k] for k in TRACE_KEYS}
    return doc
