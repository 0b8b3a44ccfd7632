"""python -m microbench.trace FILE [--json OUT]: what a profiler trace says about the GPU (see
microbench.timeline and docs/traces.md)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from microbench.core.errors import run_command
from microbench.reports.trace_report import print_trace_report
from microbench.timeline.analysis import analyze


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m microbench.trace",
        description="Read a PyTorch profiler (Kineto) trace (.json or .json.gz, NVIDIA or AMD) and report kernel "
                    "time by class, the Tensor Core / matrix-core share with the rule that recognised each kernel, "
                    "communication and exposed communication, the top kernels, and time per annotation and "
                    "ProfilerStep.",
        epilog="Exit codes: 0 done, 2 bad input (empty, truncated, non-JSON or not a Kineto trace; an unusable "
               "--json path), 130 interrupted. "
               "Definitions: docs/traces.md.")
    ap.add_argument("file", type=Path, help="trace file written by torch.profiler (export_chrome_trace / "
                                            "tensorboard_trace_handler), .json or .json.gz")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the report as JSON here")
    ap.add_argument("--top", type=int, default=15, help="kernels and annotations to list; default: %(default)s")
    ap.add_argument("--config", type=Path, default=None,
                    help="bench.toml with the datasheet table used to show the device's peaks; default: the "
                         "project's bench.toml")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: _run(args))


def _run(args) -> int:
    from microbench.core.config import load_config
    from microbench.core.jsonio import dumps
    from microbench.core.outdir import check_file, write_file

    if args.json:
        check_file(args.json, "--json")
    doc = analyze(args.file, load_config(args.config))
    print_trace_report(doc, top=args.top)
    if args.json:
        print(f"wrote {write_file(args.json, dumps(doc), '--json')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
