"""dawnscope verify --model SPEC [--batch N] [--dtype D] [--device D] [--fixes ID,...] [--json OUT] [--html OUT]: a model's
findings checked against what their fixes really save (the library: microbench.verify.verify; docs/findings.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from microbench.core.args import Parser, positive_int
from microbench.core.errors import run_command
from microbench.core.jsonio import dumps
from microbench.core.outdir import check_file, print_written, write_file
from microbench.report.roofline_report import wide_console
from microbench.report.verify_html import verify_page
from microbench.report.verify_report import print_verify
from microbench.verify.verify import VerifyOptions, verify


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="dawnscope verify",
        description="Decompose a model's training step, make its findings, apply each finding's fix that can be "
        "applied here (autocast, TF32, channels_last, DataLoader workers and pinning, torch.compile with CUDA graphs, "
        "glibc's malloc thresholds) and time the step before and after in "
        "alternating blocks in separate processes, with the step against itself (A/A) for the noise: per finding "
        "the predicted saving range, the measured saving, and whether it held. Needs the bench extra.",
        epilog="Exit codes: 0 done (whatever held), 2 bad input, 130 interrupted.",
    )
    ap.add_argument("--model", required=True, help="a model name (decompose --model) or package.module:factory")
    ap.add_argument("--batch", type=positive_int, default=None, help="default: the model's own")
    ap.add_argument("--dtype", default="fp32", help="the step's dtype before any fix (default fp32)")
    ap.add_argument("--device", default="cpu", choices=("auto", "cpu", "cuda"), help="default: cpu")
    ap.add_argument(
        "--fixes", default=None, metavar="ID,...", help="check only these findings (default: every one with a fix)"
    )
    ap.add_argument("--processes", type=positive_int, default=3, help="processes per pair (default 3)")
    ap.add_argument("--blocks", type=positive_int, default=12, help="alternating blocks of each side (default 12)")
    ap.add_argument("--steps", type=positive_int, default=3, help="timed steps per block (default 3)")
    ap.add_argument("--config", type=Path, default=None, help="bench.toml")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT", help="write the checks as JSON")
    ap.add_argument("--html", type=Path, default=None, metavar="OUT", help="write the checks as one HTML page")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: _run(args))


def _run(args) -> int:
    import torch  # noqa: F401 - the `bench` extra, said in one line (run_command) before any work

    for path, flag in ((args.json, "--json"), (args.html, "--html")):
        if path:
            check_file(path, flag)
    fixes = tuple(f.strip() for f in args.fixes.split(",") if f.strip()) if args.fixes else None
    opts = VerifyOptions(
        args.batch, args.dtype, args.device, fixes, args.processes, args.blocks, args.steps, args.config
    )
    doc = verify(args.model, opts, progress=lambda msg: print(f"verify: {msg}", file=sys.stderr, flush=True))
    written = [write_file(args.json, dumps(doc), "--json")] if args.json else []
    if args.html:
        written.append(write_file(args.html, verify_page(doc), "--html"))
    print_verify(doc, wide_console(), kept_in=f"the --json file {args.json}" if args.json else "verify --json OUT")
    print_written(written)
    return 0


if __name__ == "__main__":
    sys.exit(main())
