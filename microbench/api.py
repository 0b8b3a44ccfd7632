"""The public functions behind `microbench.measure`, `microbench.decompose_step` and `microbench.analyze_trace`.

This is the top of the stack beside the commands: it loads the providers (kernels/) that the layers below
only know through the registry, then calls one library per job.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import replace
from pathlib import Path

from microbench import kernels
from microbench.core.config import load_config
from microbench.core.jsonio import dumps
from microbench.core.outdir import OutputDir
from microbench.core.results import ResultRow, ResultsWriter, results_header
from microbench.core.shapes import Case
from microbench.decompose.pipeline import DECOMPOSE_FILES, DecomposeOptions, run_decomposition
from microbench.findings.analysis import TraceAnalysis  # the trace analysis with its findings
from microbench.findings.decomposition import with_decomposition_findings
from microbench.report.trace_html import decompose_page
from microbench.roofline import registry


def _load_providers() -> None:
    kernels.load_all()


def measure(
    case: Case, providers: list[str] | None = None, *, device: str = "auto", config=None, measure_ceilings: bool = False
) -> list[ResultRow]:
    """One case through the named providers (default: every registered provider of its op family): checked
    against float64, timed, counted and judged; one row per provider."""
    from microbench.core import device as devmod
    from microbench.roofline.ceilings import build_ceilings, machine_ceilings
    from microbench.roofline.runner import CaseRunner

    _load_providers()
    cfg = load_config(config)
    dev = devmod.detect(device)
    chosen = registry.for_op(case.family)
    if providers is not None:
        chosen = [p for p in chosen if p.name in providers]
    ceilings = machine_ceilings(dev, cfg, shapes=(case,)) if measure_ceilings else build_ceilings(dev, cfg, False)
    runner = CaseRunner(dev, cfg, ceilings)
    return list(runner.run(case, chosen))


def decompose_step(model, options=None, **kw) -> dict:
    """A model's training step decomposed into kernels or operators (see microbench.decompose.pipeline).
    `options`: a DecomposeOptions; or its fields as keyword arguments (batch=, dtype=, device=, out=, ...),
    which also override those of `options`. An unknown keyword is a TypeError, as for any function. With `out`
    (a folder, or an entered microbench.core.outdir.OutputDir) the files are written there too, replacing an
    earlier run's only when this one completes: the library returns data, this writes it."""

    _load_providers()
    if kw.get("providers") is not None:
        kw["providers"] = tuple(kw["providers"])
    opts = replace(options or DecomposeOptions(), **kw)
    if opts.out is None:
        d = run_decomposition(model, opts)
        return with_decomposition_findings(d)
    if not isinstance(opts.out, OutputDir):
        with OutputDir(opts.out, DECOMPOSE_FILES) as out_dir:
            return decompose_step(model, replace(opts, out=out_dir))
    d = run_decomposition(model, opts)
    d.doc = with_decomposition_findings(d)
    d.doc["files"] = write_decomposition(d.doc, d.rows + d.replay_rows, opts.out, d.cfg.path, opts.plot)
    return d.doc


def write_decomposition(doc: dict, rows: list, out, config_file, plot: bool) -> dict:
    """decomposition.json, results.json / .csv (the layer and replay rows) and the roofline plot, into an entered
    OutputDir's staging folder (which already holds the profiler's trace.json.gz), then committed."""
    from microbench.report.roofline_report import plot_roofline

    header = results_header(
        doc["hardware"],
        doc["software"],
        config_file,
        {"model": doc["model"]["name"], "run": doc["run"], "profile": f"model:{doc['model']['name']}"},
        doc["started"],
        doc["ceilings"],
        doc["notes"],
    )
    with ResultsWriter(out.staging, header) as writer:
        writer.add_many(rows)
        writer.set("finished", _dt.datetime.now(_dt.timezone.utc).isoformat())
    files = {
        "decomposition": str(out.final("decomposition.json")),
        "results": str(out.final("results.json")),
        "results_csv": str(out.final("results.csv")),
        "trace": str(out.final("trace.json.gz")),
    }
    if plot:
        plot_roofline(writer.doc, out.file("roofline"))
        files["roofline"] = [str(out.final("roofline.png")), str(out.final("roofline.svg"))]
    out.file("report.html").write_text(decompose_page(doc, writer.doc), encoding="utf-8")
    files["report_html"] = str(out.final("report.html"))
    doc["files"] = files
    out.file("decomposition.json").write_text(dumps(doc))
    out.commit()
    return files


def analyze_trace(path: str | Path, config=None, step_range: str | None = None, measured: dict | None = None) -> dict:
    """What a profiler trace says about the GPU, with its findings first: `TraceAnalysis.open(...).document()`,
    the document `dawnscope trace --json` writes (a Kineto JSON, an Nsight Systems SQLite export, an Nsight
    Compute CSV, rocprofv3 JSON). `config`: None for the project's bench.toml; `step_range`: the name of the step
    ranges; `measured`: measured compute ceilings, TFLOP/s by precision ({"bf16": 769.0})."""
    return TraceAnalysis.open(path, config, step_range, measured).document()
