"""dawnscope predict TRACE --on DEVICE [--json OUT] [--html OUT]: what a traced workload would take on
another chip (microbench.predict; docs/predict.md). Also `--model NAME --batch N --dtype D --on DEVICE`: a
model's training step predicted from its recorded operators, with no GPU."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from microbench.core.args import Parser, positive_int
from microbench.core.config import load_config
from microbench.core.datasheet import ceilings_file, find_entry
from microbench.core.errors import InputError, run_command
from microbench.core.jsonio import dumps
from microbench.core.outdir import check_file, print_written, write_file
from microbench.predict.estimate import Scenario
from microbench.predict.from_ops import from_model
from microbench.predict.from_trace import fabrics, from_trace
from microbench.report.cells import kept_in
from microbench.report.prediction_report import prediction_html, print_prediction

WHAT_IF_DTYPES = ("bf16", "fp16")


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="dawnscope predict",
        description="Predict each kernel's time on another chip from its FLOPs and bytes (the work model), the "
        "target's achievable compute per precision and matrix path, achievable memory bandwidth, SM / "
        "CU count (wave quantization) and launch floor; communication through the fabric presets; "
        "CPU-side gaps held. Prints the source and the prediction side by side by class, the totals "
        "with a range and the assumption that dominates it.",
        epilog="Exit codes: 0 done, 2 bad input (unknown device, a trace without the shapes it needs, a ceilings "
        "file of the wrong form, an unusable output path), 130 interrupted. Definitions and the validation: "
        "docs/predict.md.",
    )
    ap.add_argument("trace", nargs="?", type=Path, help="a profiler trace recorded with shapes (Kineto JSON, ...)")
    ap.add_argument(
        "--on",
        required=True,
        metavar="DEVICE",
        help="the target: a bench.toml [devices] key (h100_sxm5) or name (H100, MI300X, V100)",
    )
    ap.add_argument(
        "--model",
        default=None,
        help="instead of a trace: a model of models/benchmarks.toml or "
        "package.module:factory, its step recorded on this machine",
    )
    ap.add_argument(
        "--batch",
        type=positive_int,
        default=None,
        help="--model: the batch; with a trace: what-if batch (needs --source-batch)",
    )
    ap.add_argument("--source-batch", type=positive_int, default=None, help="the traced run's batch")
    ap.add_argument(
        "--dtype",
        default=None,
        help="--model: the step's dtype (fp32, bf16, fp16); with a trace: "
        "what-if, fp32 matrix work moved to bf16 or fp16",
    )
    ap.add_argument(
        "--ceilings",
        type=Path,
        default=None,
        metavar="FILE",
        help="the target's measured ceilings: a results.json of microbench.roofline.cli, the measured ceilings' "
        "cache of that machine (~/.cache/dawnscope/ceilings-*.json) or a TraceLens GPU arch JSON (override the "
        "published figures)",
    )
    ap.add_argument("--source", default=None, metavar="DEVICE", help="the trace's chip, when its name is missing")
    ap.add_argument(
        "--source-ceilings",
        type=Path,
        default=None,
        metavar="FILE",
        help="the trace's chip's measured ceilings (same forms as --ceilings)",
    )
    ap.add_argument("--fabric", default=None, help="the target's fabric preset (microbench/data/fabrics.toml)")
    ap.add_argument("--source-fabric", default=None, help="the trace's fabric preset")
    ap.add_argument("--config", type=Path, default=None, help="bench.toml with the device table")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT", help="write the prediction as JSON here")
    ap.add_argument("--html", type=Path, default=None, metavar="OUT", help="write a one-page HTML report here")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: _run(args))


def _scenario(args):
    if args.dtype is not None and args.dtype not in WHAT_IF_DTYPES:
        raise InputError(
            None, f"a trace's what-if dtype is one of {', '.join(WHAT_IF_DTYPES)}", key="--dtype", value=args.dtype
        )
    if args.batch is not None and args.source_batch is None:
        raise InputError(
            None, "a trace's what-if batch needs the traced batch (--source-batch B)", key="--batch", value=args.batch
        )
    scale = args.batch / args.source_batch if args.batch is not None else 1.0
    return Scenario(dtype=args.dtype, batch_scale=scale)


def _predict(args, cfg) -> dict:
    measured = (
        ceilings_file(args.ceilings, find_entry(args.on, cfg.devices).name, cfg.devices)
        if args.ceilings
        else ({}, None)
    )
    if args.model is not None:
        if args.trace is not None:
            raise InputError(None, "give a trace or --model, not both", key="--model", value=args.model)

        return from_model(args.model, args.on, cfg, batch=args.batch, dtype=args.dtype or "fp32", measured=measured)
    if args.trace is None:
        raise InputError(None, "give a trace file or --model NAME", key="TRACE")

    src_measured = (
        (
            ceilings_file(args.source_ceilings, find_entry(args.source, cfg.devices, "--source").name, cfg.devices)
            if args.source
            else ceilings_file(args.source_ceilings)
        )
        if args.source_ceilings
        else ({}, None)
    )
    return from_trace(
        args.trace,
        args.on,
        cfg,
        measured,
        args.source,
        src_measured,
        _scenario(args),
        fabrics(args.fabric, args.source_fabric),
    )


def _run(args) -> int:
    for path, opt in ((args.json, "--json"), (args.html, "--html")):
        if path:
            check_file(path, opt)
    doc = _predict(args, load_config(args.config))
    # the files first, then the terminal: a reader that goes away (`| head`) cannot cost the files
    written = [write_file(args.json, dumps(doc), "--json")] if args.json else []
    written += [write_file(args.html, prediction_html(doc), "--html")] if args.html else []
    print_prediction(doc, kept_in=kept_in(args.json, args.html, what="prediction"))
    print_written(written)
    return 0


if __name__ == "__main__":
    sys.exit(main())
