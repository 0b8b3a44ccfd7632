"""python -m microbench.compare RESULTS... [--baseline NAME] [--html OUT] [--json OUT]: results of different
machines side by side (the library: microbench.reports.compare)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from microbench.core.errors import InputError
from microbench.reports.compare import compare, compare_html, print_compare


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m microbench.compare",
        description="Put results from different machines side by side per case: our results.json and "
                    "pytest-benchmark --benchmark-json files. Time, TFLOP/s, % of each machine's ceilings, ratio "
                    "to the baseline machine; missing cases shown as missing; different profiles or software "
                    "versions flagged.",
        epilog="Exit codes: 0 done, 2 bad input (empty, truncated, non-JSON or not a results file; unknown "
               "--baseline).")
    ap.add_argument("results", nargs="+", type=Path, help="results.json or pytest-benchmark JSON files (.gz too)")
    ap.add_argument("--baseline", default=None, metavar="NAME",
                    help="the machine the ratios are relative to: its label (device name), file name or a unique "
                         "part of either; default: the first file")
    ap.add_argument("--html", type=Path, default=None, metavar="OUT", help="also write a self-contained HTML page")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the comparison as JSON")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        cmp = compare(args.results, args.baseline)
    except InputError as e:
        line = e.line() if e.path else e.line().replace("<input>: ", "", 1)
        print(f"error: {line}", file=sys.stderr)
        return e.exit_code
    print_compare(cmp)
    from microbench.reports.html import write

    if args.html:
        print(f"wrote {write(args.html, compare_html(cmp))}", file=sys.stderr)
    if args.json:
        from microbench.core.results import _clean

        print(f"wrote {write(args.json, json.dumps(_clean(cmp), indent=1))}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
