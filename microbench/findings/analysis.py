"""A trace's analysis with its findings: `microbench.TraceAnalysis`, the one object `dawnscope trace`, `compare`,
`comm ddp`, the job view, `analyze_trace` and the notebook API open a trace through. The findings layer extends the
trace analysis (microbench/trace/analysis.py), which knows nothing of findings: every figure the base computes is
the same here, and `findings` and the document's `findings*` keys are added."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from microbench.core.documents import FindingsResult
from microbench.core.errors import InputError
from microbench.core.jsonio import load_json
from microbench.findings.engine import findings_of, with_findings
from microbench.trace import analysis
from microbench.trace.timeline import Timeline


class TraceAnalysis(analysis.TraceAnalysis):
    """`TraceAnalysis.open(path, config=None, ...)` (config None: the project's bench.toml), then properties, each
    computed once: every one of the trace analysis', and `findings`. `decomposition`: a CPU decomposition's
    document, whose measured operators the CPU rules read where the trace has no GPU activity (decompose)."""

    TABLES = analysis.TraceAnalysis.TABLES + ("findings",)

    def __init__(
        self,
        tl: Timeline,
        config=None,
        step_range: str | None = None,
        measured: dict | None = None,
        graph_capture: str | Path | None = None,
        path: str | Path | None = None,
        source: str | None = None,
        *,
        decomposition: dict | None = None,
    ):
        super().__init__(tl, config, step_range, measured, graph_capture, path, source)
        self.decomposition = decomposition

    @cached_property
    def findings(self) -> FindingsResult:
        """The findings in rank order, those not checked with why, those below the threshold, and the step time
        and unit (`per`) their savings are of (findings/engine.py)."""
        return findings_of(self, self.cfg, self.source, self.decomposition)

    def document(self) -> dict:
        """The trace document with the findings first (`dawnscope trace --json`)."""
        return with_findings(super().document(), self.findings)

    def table(self, name: str) -> list[dict]:
        if name == "findings":
            return list(self.findings["findings"])
        return super().table(name)


TRACE_SCHEMA_PREFIX = "dawnscope.trace/"


def trace_report(path: str | Path) -> dict:
    """A trace's report as `dawnscope trace --json` writes it: the trace analysed, or a report given as the file,
    read as it is; anything else is one line naming the file (what `gate` and the agent server open)."""
    doc = TraceAnalysis.open(path).document() if analysis.is_profiler_trace(path) else load_json(path)
    if not (isinstance(doc, dict) and str(doc.get("schema", "")).startswith(TRACE_SCHEMA_PREFIX)):
        raise InputError(path, "not a profiler trace or a trace report (dawnscope trace --json)")
    return doc
