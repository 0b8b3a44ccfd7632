"""dawnscope bench [--profile P] [--device D] [--config FILE] [--json OUT] [-- PYTEST ARGS]: the benchmark suite from
an install (pytest-benchmark, the same tests a checkout's `pytest --benchmark-only` runs; the library:
microbench.bench.test_suite and its plugin)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from microbench.core.args import Parser
from microbench.core.errors import run_command
from microbench.core.fingerprint import CONFIG_ENV, DEFAULT_BENCHMARK_PROFILE, DEVICE_ENV, PROFILE_ENV
from microbench.core.outdir import check_file

SUITE = "microbench.bench.test_suite"
PLUGIN = "microbench.bench.plugin"


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="dawnscope bench",
        description="Time a profile's cases through every provider here with pytest-benchmark, each checked against "
        "float64 and judged against the measured and datasheet ceilings, from the installed package (in a "
        "checkout `pytest --benchmark-only` runs the same tests). Arguments after `--` go to pytest "
        "(-k EXPR, --benchmark-compare, ...). Needs the bench extra: pip install 'dawnscope[bench]'.",
        epilog="Exit codes: pytest's (0 every benchmark passed, 1 a benchmark failed its correctness check, 2 bad "
        "input or interrupted, 5 no benchmark selected).",
    )
    ap.add_argument(
        "--profile", default=None, metavar="NAME", help=f"bench.toml profile (default: {DEFAULT_BENCHMARK_PROFILE})"
    )
    ap.add_argument("--device", default=None, choices=("auto", "cpu", "cuda"), help="default: auto")
    ap.add_argument("--config", type=Path, default=None, metavar="FILE", help="a bench.toml (default: the package's)")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT", help="write pytest-benchmark's JSON here")
    ap.add_argument("pytest_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: _run(args))


def pytest_argv(args) -> list[str]:
    """pytest's arguments: the suite by module name, its plugin, timing on, no cache folder in the current one."""
    extra = [a for a in args.pytest_args if a != "--"] if args.pytest_args else []
    argv = ["--pyargs", SUITE, "-p", PLUGIN, "--benchmark-only", "-p", "no:cacheprovider", "-q"]
    if args.json:
        argv.append(f"--benchmark-json={args.json}")
    return argv + extra


def _run(args) -> int:
    import pytest

    if args.json:
        check_file(args.json, "--json")
    for env, value in ((PROFILE_ENV, args.profile), (DEVICE_ENV, args.device), (CONFIG_ENV, args.config)):
        if value is not None:
            os.environ[env] = str(value)  # the suite reads its selection where a checkout's run reads it
    return int(pytest.main(pytest_argv(args)))


if __name__ == "__main__":
    sys.exit(main())
