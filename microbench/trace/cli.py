"""dawnscope trace FILE [--json OUT]: what a profiler trace says about the GPU (see
microbench.trace and docs/traces.md)."""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

from microbench.comm.engine import GLOB_CHARS, find_traces
from microbench.comm.job import job_of_processes, job_with_reports
from microbench.comm.report import check_json, job_lines, print_ranks, write_job_files, write_json
from microbench.core.args import Parser, add_job_arguments, positive_int
from microbench.core.config import load_config
from microbench.core.datasheet import ceilings_from_args, ceilings_machine, check_ceilings_machine
from microbench.core.dtypes import PRECISIONS
from microbench.core.errors import InputError, run_command, shown
from microbench.core.files import exists, is_folder
from microbench.core.jsonio import dumps, load_json
from microbench.core.outdir import check_dir, check_file, print_written, write_file
from microbench.findings.analysis import TraceAnalysis
from microbench.findings.job import rank_with_report, timeline_with_report
from microbench.report.cells import kept_in
from microbench.report.findings_report import print_findings
from microbench.report.roofline_report import wide_console
from microbench.report.trace_html import trace_page
from microbench.report.trace_report import print_trace_report
from microbench.trace.analysis import read_trace
from microbench.trace.folder import cycles as folder_cycles


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="dawnscope trace",
        description="Read a profiler trace and report kernel time by class, the Tensor Core / matrix-core share "
        "with the evidence for each kernel (hardware counters, else the kernel-name rule), "
        "communication and exposed communication, idle and busy GPU time per step, per-op FLOPs, "
        "achieved TFLOP/s and MFU (traces recorded with shapes), Tensor Core eligibility, the top "
        "kernels, and time per annotation and step. Formats, told apart by content: PyTorch profiler "
        "(Kineto) JSON (.json or .json.gz, NVIDIA or AMD; also CUPTI range-profiler mode), Nsight "
        "Systems SQLite (nsys export --type sqlite), Nsight Compute CSV (ncu --csv, long or --page raw).",
        epilog="Exit codes: 0 done, 2 bad input (empty, truncated, not a trace of a known format, a bad --ceiling; "
        "an unusable --json path), 130 interrupted. "
        "Definitions: docs/traces.md.",
    )
    ap.add_argument(
        "file",
        nargs="+",
        help="a Kineto trace (export_chrome_trace / tensorboard_trace_handler), an Nsight Systems SQLite "
        "export or an Nsight Compute CSV; several, a folder or a glob pattern of rank traces: the "
        "whole job (as `comm ranks`: each rank read in a worker, then combined)",
    )
    ap.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the report as JSON here")
    ap.add_argument(
        "--html",
        type=Path,
        default=None,
        metavar="OUT",
        help="also write the report as one self-contained HTML page here (findings, step breakdown, "
        "kernels, operators, roofline, communication, notes)",
    )
    ap.add_argument(
        "--top", type=positive_int, default=15, help="kernels and annotations to list; default: %(default)s"
    )
    ap.add_argument(
        "--config",
        type=Path,
        default=None,
        help="bench.toml with the datasheet table used to show the device's peaks; default: the project's bench.toml",
    )
    ap.add_argument(
        "--step-range",
        dest="steps",
        default=None,
        metavar="NAME",
        help="the name of the ranges (record_function or NVTX) that are steps; default: ProfilerStep#N",
    )
    ap.add_argument(
        "--ceiling",
        action="append",
        default=[],
        metavar="PREC=TFLOPS",
        help="a measured compute ceiling, e.g. bf16=769 (repeatable; precisions: " + ", ".join(PRECISIONS) + ")",
    )
    ap.add_argument(
        "--ceilings",
        type=Path,
        default=None,
        metavar="FILE",
        help="take the measured compute ceilings from a results.json of microbench.roofline.cli, the measured "
        "ceilings' cache of the trace's machine (~/.cache/dawnscope/ceilings-*.json), or a TraceLens GPU arch JSON "
        "(roofline --arch-json writes ours in that form); none measured busy or noisy is used",
    )
    ap.add_argument(
        "--graph-capture",
        type=Path,
        default=None,
        metavar="TRACE",
        help="the trace of the capture of the CUDA/HIP graphs this trace replays (as vLLM and SGLang "
        "record it): each replayed kernel is attributed to the operator that captured it",
    )
    ap.add_argument(
        "--source",
        default=None,
        metavar="DEVICE",
        help="the chip the trace ran on, where the trace does not name it (a bench.toml [devices] key or "
        "name): its datasheet for every figure (MFU, %% of peak, the findings' predictions)",
    )
    add_job_arguments(ap)
    return ap


def is_job(files: list[str]) -> bool:
    """Several traces, a folder or a glob pattern: a job of ranks, not one trace."""
    one = Path(files[0])
    return len(files) > 1 or is_folder(one) or (any(c in files[0] for c in GLOB_CHARS) and not exists(one))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: _run(args))


def _one_process_folder(args) -> None:
    """A folder of one process's profiling cycles (tensorboard_trace_handler): its newest cycle is the trace read,
    the others named; one trace in a folder is that trace. A folder of several processes stays a job."""
    if len(args.file) != 1 or not is_folder(Path(args.file[0])):
        return
    folder = Path(args.file[0])
    paths = find_traces([folder])
    found = folder_cycles(paths)
    if len(paths) == 1:
        args.file = [str(paths[0])]
    elif found.one_process:
        ((worker, files),) = found.workers.items()
        args.file = [str(files[-1])]
        rest = ", ".join(p.name for p in reversed(files[:-1]))
        print(
            f"note: {shown(folder)} holds {len(files)} profiling cycles of one process ({worker}): the newest, "
            f"{files[-1].name}, is read; the others ({rest}): give one file to read it",
            file=sys.stderr,
        )
    elif found.workers and found.others:
        raise InputError(
            folder,
            f"holds the profiler's traces of {len(found.workers)} process(es) and {len(found.others)} other trace "
            f"file(s) ({', '.join(p.name for p in found.others[:3])}): give one trace, or a folder of one job's ranks",
        )


def _run(args) -> int:
    _one_process_folder(args)
    if is_job(args.file):
        args.traces = args.file
        if args.html:
            check_file(args.html, "--html", inputs=args.file)
        return _run_job(args)
    args.file = Path(args.file[0])
    for opt, path in (("--json", args.json), ("--html", args.html)):
        if path:
            check_file(path, opt, inputs=[args.file, args.graph_capture, args.ceilings])
    cfg = load_config(args.config)
    measured = ceilings_from_args(args.ceiling, args.ceilings)
    tl = read_trace(args.file)
    # a file of several ranks' processes (a merged file of ranks) is a job: each process read as its rank
    reader = partial(timeline_with_report, config=args.config, source=args.source, whole=bool(args.html))
    found = job_of_processes(tl, args.file, args.steps, reader)
    if found is not None:
        print(
            f"note: {shown(args.file)} holds {len(found[0]['ranks'])} processes with their own steps and kernels: "
            "each is read as a rank of one job",
            file=sys.stderr,
        )
        if args.out is not None:
            check_dir(args.out)
        return _print_job(args, *found)
    if args.out is not None:  # a job's folder: one trace would write nothing there, and say nothing
        raise InputError(
            None,
            "is a job's folder (heatmap.png, job.html; several traces, a folder or a glob): one "
            "trace writes --json OUT and --html OUT",
            key="--out",
            value=str(args.out),
        )
    doc = TraceAnalysis(tl, cfg, args.steps, measured, args.graph_capture, args.file, args.source).document()
    _check_step_range(args, doc)
    if args.ceilings:  # the file's machine must be the trace's (checked once the trace has named its device)
        for dev in doc.get("devices") or [{"name": "an unnamed device"}]:
            check_ceilings_machine(args.ceilings, ceilings_machine(load_json(args.ceilings)), dev["name"], cfg.devices)
    # the files first, then the terminal: a reader that goes away (`| head`) cannot cost the files
    written = [write_file(args.json, dumps(doc), "--json")] if args.json else []
    written += [write_file(args.html, trace_page(doc), "--html")] if args.html else []
    print_findings(wide_console(), doc)  # the report opens with its findings
    print_trace_report(doc, top=args.top, kept_in=kept_in(args.json, args.html))
    print_written(written)
    return 0


def _check_step_range(args, doc: dict) -> None:
    """--step-range names ranges the trace has: a name it lacks (a typo) is bad input, not a quiet fall back to
    the ProfilerStep ranges (which the library does for a caller's default)."""
    if args.steps is None or any(st["name"] == args.steps for st in doc.get("steps") or []):
        return
    names = [a["name"] for a in doc.get("annotations") or []][:6]
    has = f"its ranges include: {', '.join(names)}" if names else "it has no record_function / NVTX ranges"
    raise InputError(args.file, f"no range named {args.steps!r} ({has})", key="--step-range", value=args.steps)


def _run_job(args) -> int:
    """A job's traces: the report opens with the findings of its straggler rank (else its first), made by the reader
    while it read that rank (each rank is read once: findings/job.py), then the job's cross-rank tables; --json
    holds both (`findings`, `findings_rank`), --html is that rank's trace page with the job's cross-rank lines
    above it."""
    check_json(args.json)
    if args.out is not None:
        check_dir(args.out)
    load_config(args.config)  # bad input said here, once; each reader reads it (None: its own project's)
    reader = partial(rank_with_report, config=args.config, source=args.source, whole=bool(args.html))
    return _print_job(
        args, *job_with_reports(args.traces, args.workers, args.scheduler, args.timeout, args.steps, reader)
    )


def _print_job(args, job: dict, reports: dict[int, dict]) -> int:
    ranks = job.get("ranks") or []
    rank = next((r for r in ranks if r["rank"] == job.get("straggler_rank")), ranks[0] if ranks else None)
    doc = reports.get(rank["rank"]) if rank else None
    if doc is not None:
        job = {"findings_rank": rank["rank"]} | {k: v for k, v in doc.items() if k.startswith("findings")} | job
    write_json(args.json, job)
    if args.out is not None:
        write_job_files(args.out, job)
    written = []
    if args.html and doc is not None:
        title = f"dawnscope job of {len(ranks)} rank trace(s): rank {rank['rank']}'s page"
        written.append(write_file(args.html, trace_page(doc, title, job_lines=job_lines(job)), "--html"))
    if doc is not None:
        process = f", process {rank['process']}" if rank.get("process") is not None else ""
        wide_console().print(
            f"[bold]rank {rank['rank']}"
            + (" (the straggler)" if rank["rank"] == job.get("straggler_rank") else "")
            + f"'s findings[/] ({shown(Path(rank['file']))}{process}):"
        )
        print_findings(wide_console(), doc)
    print_ranks(job)
    print_written(written)
    return 0


if __name__ == "__main__":
    sys.exit(main())
