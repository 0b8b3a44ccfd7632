"""dawnscope gate BASELINE CURRENT [--max-slowdown PCT | KEY=PCT] [--json OUT] [--junit OUT]: fail a CI job when a
change made a case, a step or a kernel slower beyond the noise floor, and only then (the library:
microbench.gate.gate; docs/gate.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from microbench.core.args import Parser
from microbench.core.errors import InputError, run_command, shown
from microbench.core.jsonio import dumps
from microbench.core.outdir import check_file, print_written, write_file
from microbench.gate import baselines
from microbench.gate.gate import Limits, fingerprint_of, gate
from microbench.gate.junit import junit_xml
from microbench.report.gate_report import print_gate
from microbench.report.roofline_report import wide_console


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="dawnscope gate",
        description="Compare a current capture with a baseline of the same workload on the same machine and exit "
        "0 (no regression beyond the noise floor), 1 (a regression) or 2 (the captures cannot be compared: "
        "another device, other software, another profile, other shapes or dtypes, a trace whose events were "
        "dropped; or bad input). Captures: results files (or a roofline --out folder), pytest-benchmark "
        "--benchmark-json files, profiler traces or their reports (trace --json).",
        epilog="Exit codes: 0 no regression, 1 a regression (slower beyond its noise floor, a case that fails now, "
        "Tensor Cores lost), 2 the captures cannot be compared or bad input, 130 interrupted.",
    )
    ap.add_argument(
        "files",
        nargs="+",
        type=Path,
        metavar="BASELINE CURRENT",
        help="the baseline and the current capture; with --against NAME, the current one only; with "
        "--save-baseline NAME alone, the capture to keep",
    )
    ap.add_argument(
        "--max-slowdown",
        action="append",
        default=[],
        metavar="PCT or KEY=PCT",
        help="allowed slowdown: 5%% (or 0.05) for every row, or KEY=PCT for the rows of one metric (step, case, "
        "class, op, tensor_core_share), one op family (gemm, conv2d) or one row by its name (repeatable); "
        "default: thresholds.toml gate_min_slowdown (5%%). A row's own spread raises its floor",
    )
    ap.add_argument("--json", type=Path, default=None, metavar="OUT", help="write the verdict as JSON")
    ap.add_argument("--junit", type=Path, default=None, metavar="OUT", help="write the verdict as JUnit XML")
    ap.add_argument(
        "--allow-software-change",
        action="store_true",
        help="results files: compare although torch / triton / cupy / python versions differ (said in notes)",
    )
    ap.add_argument(
        "--allow-busy",
        action="store_true",
        help="results files: compare although a run was measured on a busy machine (its conditions say so)",
    )
    ap.add_argument(
        "--save-baseline",
        default=None,
        metavar="NAME",
        help="keep the current capture as baseline NAME (with its fingerprint) when it passes, or unconditionally "
        "when it is the only file given",
    )
    ap.add_argument("--against", default=None, metavar="NAME", help="use the kept baseline NAME")
    ap.add_argument(
        "--baselines",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"the store of kept baselines; default: ${baselines.STORE_ENV}, else {baselines.DEFAULT_STORE}",
    )
    return ap


def _fraction(text: str, key: str) -> float:
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise InputError(
            None, "expected a percentage such as 5% (or a fraction such as 0.05)", key="--max-slowdown", value=text
        ) from None
    if not 0 <= value < 100:
        raise InputError(None, "expected a slowdown from 0% up", key="--max-slowdown", value=text)
    return value


def limits_of(specs: list[str]) -> Limits:
    default, by_key = None, {}
    for spec in specs:
        key, sep, value = spec.rpartition("=")
        if sep:
            if not key.strip():
                raise InputError(None, "KEY=PCT needs a key", key="--max-slowdown", value=spec)
            by_key[key.strip()] = _fraction(value, key)
        else:
            default = _fraction(value, "")
    return Limits(default, by_key)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: _run(args))


def _run(args) -> int:
    store = baselines.store_dir(args.baselines)
    files = list(args.files)
    if args.against:
        if len(files) != 1:
            raise InputError(
                None, "with --against NAME give the current capture only", key="--against", value=args.against
            )
        base, _ = baselines.load(store, args.against)
        files = [base] + files
    if len(files) == 1:
        if not args.save_baseline:
            raise InputError(
                files[0], "give a baseline and a current capture (or --against NAME, or --save-baseline NAME)"
            )
        return _save(store, args.save_baseline, files[0])
    if len(files) != 2:
        raise InputError(None, f"give two captures, a baseline and a current one ({len(files)} given)")
    for opt, path in (("--json", args.json), ("--junit", args.junit)):
        if path:
            check_file(path, opt, inputs=files)
    try:
        doc = gate(files[0], files[1], limits_of(args.max_slowdown), args.allow_software_change, args.allow_busy)
    except OSError as e:  # exit 1 is a regression's: a file that cannot be read is a capture that cannot be compared
        raise InputError(getattr(e, "filename", None), f"cannot read: {e.strerror or e}") from None
    written = [write_file(args.json, dumps(doc), "--json")] if args.json else []
    written += [write_file(args.junit, junit_xml(doc), "--junit")] if args.junit else []
    print_gate(doc, wide_console(), kept_in=f"the --json file {shown(args.json)}" if args.json else "gate --json OUT")
    print_written(written)
    if args.save_baseline and doc["exit_code"] == 0:
        _save(store, args.save_baseline, files[1], doc["current"]["fingerprint"])
    elif args.save_baseline:
        print(f"baseline {args.save_baseline!r} not kept: the gate did not pass", file=sys.stderr)
    return doc["exit_code"]


def _save(store: Path, name: str, capture: Path, fingerprint: str | None = None) -> int:
    capture = Path(capture)
    folder = baselines.save(
        store, name, capture if capture.is_file() else capture / "results.json", fingerprint or fingerprint_of(capture)
    )
    print(f"kept baseline {name!r} in {shown(folder)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
