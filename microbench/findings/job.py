"""A job's ranks read once each for the trace command: each rank's summary (comm/ranks.py) and, from the same
timeline, its trace document with findings (findings/analysis.py), so that the report can open with the straggler's
findings without reading the straggler's file a second time. Runs in the job's reader processes (engine.run_ranks):
module-level functions only, so that they pickle."""

from __future__ import annotations

import time
from pathlib import Path

from microbench.comm.ranks import RankSummary, summarize_timeline
from microbench.findings.analysis import TraceAnalysis
from microbench.findings.engine import with_findings
from microbench.trace.analysis import read_trace
from microbench.trace.timeline import Timeline


def rank_with_report(
    path: str | Path,
    fallback_rank: int,
    step_range: str | None,
    *,
    config: str | Path | None = None,
    source: str | None = None,
    whole: bool = False,
) -> RankSummary:
    """One rank read once: its summary, with `report` its trace document's findings keys (`whole`: the whole
    document, for an HTML page; a document per rank is more to send back than the findings)."""
    t0, c0 = time.perf_counter(), time.process_time()
    path = Path(path)
    return timeline_with_report(
        read_trace(path), path, fallback_rank, step_range, config=config, source=source, whole=whole, t0=t0, c0=c0
    )


def timeline_with_report(
    tl: Timeline,
    path: Path,
    fallback_rank: int,
    step_range: str | None,
    *,
    config: str | Path | None = None,
    source: str | None = None,
    whole: bool = False,
    t0: float | None = None,
    c0: float | None = None,
) -> RankSummary:
    """A rank's timeline (its own file's, or its process's cut from a file of several: comm/job.py
    job_of_processes), as rank_with_report."""
    summary = summarize_timeline(tl, path, fallback_rank, step_range, t0, c0)
    ta = TraceAnalysis(tl, config, step_range, path=path, source=source)
    # the findings alone need no kernel, operator or step tables: the whole document only for a page
    summary.report = ta.document() if whole else with_findings({"file": str(path)}, ta.findings)
    return summary
