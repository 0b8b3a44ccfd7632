"""dawnscope compare RESULTS... [--baseline NAME] [--html OUT] [--json OUT]: results of different
machines side by side (the library: microbench.report.compare)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from microbench.compare.files import analyzed_traces, comparison
from microbench.core.args import Parser
from microbench.core.errors import InputError, run_command, shown
from microbench.core.jsonio import dumps
from microbench.core.outdir import check_file, print_written, write_file
from microbench.report import inspect_compare as I
from microbench.report import trace_compare as T
from microbench.report.cells import kept_in
from microbench.report.compare import compare_html, print_compare, resolve_results


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="dawnscope compare",
        description="Put results from different machines side by side per case: our results.json and "
        "pytest-benchmark --benchmark-json files; or traces of one workload on several machines, per "
        "kernel class and per operator. Time, TFLOP/s, % of each machine's ceilings, ratio "
        "to the baseline machine; missing cases shown as missing; different profiles or software "
        "versions flagged.",
        epilog="Exit codes: 0 done, 2 bad input (empty, truncated, non-JSON or not a results file; unknown "
        "--baseline; an unusable --html/--json path), 130 interrupted.",
    )
    ap.add_argument(
        "results",
        nargs="+",
        type=Path,
        help="results.json or pytest-benchmark JSON files (.gz too), or result directories (python -m "
        "microbench.roofline.cli --out DIR: its results.json); or profiler traces (any format trace "
        "reads) or their reports (microbench.trace.cli --json): one workload on several machines, per "
        "kernel class and per op; or inspect files "
        "(microbench.inspect.cli --json): one kernel on several targets, per kernel and configuration",
    )
    ap.add_argument(
        "--baseline",
        default=None,
        metavar="NAME",
        help="the machine the ratios are relative to: its label (device name), file name or a unique "
        "part of either; default: the first file",
    )
    ap.add_argument("--html", type=Path, default=None, metavar="OUT", help="also write a self-contained HTML page")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the comparison as JSON")
    ap.add_argument(
        "--target",
        action="append",
        default=None,
        metavar="TARGET",
        help="inspect files: a target to show (repeatable; default: sm_90 and gfx942 when both are there, "
        "else every target of the files)",
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: _run(args))


def _run(args) -> int:
    for opt, path in (("--html", args.html), ("--json", args.json)):
        if path:
            check_file(path, opt)

    paths = [resolve_results(p) for p in args.results]  # a results directory: its results.json
    analyzed = analyzed_traces(paths)
    if not analyzed and _inspect_files(args, paths):
        return 0
    kind, cmp = comparison(paths, args.baseline, analyzed)
    traces = kind == "traces"
    # the files first, then the terminal: a reader that goes away (`| head`) cannot cost the files
    render = (T.trace_compare_html if traces else compare_html) if args.html else None
    written = [write_file(args.html, render(cmp), "--html")] if render else []
    written += [write_file(args.json, dumps(cmp), "--json")] if args.json else []
    # a column a narrow terminal leaves out is in the files this run writes: named, else the options that write them
    (T.print_trace_compare if traces else print_compare)(cmp, kept_in=kept_in(args.json, args.html, what="comparison"))
    print_written(written)
    return 0


def _inspect_files(args, paths) -> bool:
    """Inspect files (microbench.inspect.cli --json): one kernel on several targets. False when the inputs are not."""
    records = I.load_inspect_files(paths)
    if records is None:
        return False
    if args.html:
        raise InputError(args.html, "no HTML page for inspect files (use --json)", key="--html")
    cmp = I.compare_inspect(records, tuple(args.target) if args.target else None)
    written = [write_file(args.json, dumps(cmp), "--json")] if args.json else []
    I.print_inspect_compare(cmp, kept_in=f"the --json file {shown(args.json)}" if args.json else "compare --json OUT")
    print_written(written)
    return True


if __name__ == "__main__":
    sys.exit(main())
