"""dawnscope comm collectives|ddp|ranks|scale: the communication cost of data-parallel training.

  collectives  all-reduce, all-gather, reduce-scatter, broadcast, all-to-all over message sizes: time, algbw
               and busbw (nccl-tests formulas), every result checked; rows of results.json + busbw plot
  ddp          a DDP training step of one of our models over N processes, split from the profiler into
               compute, overlapped and exposed communication, with gradient bytes and bucket count
  ranks        a whole job's rank traces (files, a folder, a glob), each read in a worker (local processes, or
               Dask with --scheduler): per rank busy / idle / exposed communication per step, per collective
               size, busbw, skew and straggler, outlier ranks, the slowest step, a rank x step heat map
  scale        the scaling model: step time, comm_share and speed-up per worker count on a fabric preset

Under torchrun (its environment variables) collectives and ddp run as one rank of that job; otherwise they
start --nproc local processes. docs/comm.md has the definitions and the measured numbers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from microbench.comm.ddp import STEP_RANGE
from microbench.comm.report import kept_rank0, measure_ddp, report_ddp, run_collectives, run_ranks, run_scale
from microbench.core.args import MAX_COUNT, Parser, add_job_arguments, number
from microbench.core.config import load_config
from microbench.core.errors import run_command
from microbench.findings.analysis import TraceAnalysis
from microbench.findings.engine import with_findings

POSITIVE_INT = number(int, 1, MAX_COUNT)
POSITIVE = number(float, 0, low_open=True)
FRACTION = number(float, 0, 1)
PORT = number(int, 0, 65535)
BUCKET_MB = number(float, 2**-10, 2**20)  # >= 1 KiB (smaller: millions of all-reduces, a hang), <= 1 TiB
# Local processes: more than this many ranks on one machine is a typo (100000 would start a rendezvous that
# never completes).
NPROC = number(int, 1, 1024)
# Seconds a rank waits: under a second no rendezvous completes; beyond a week the C++ timeout overflows.
TIMEOUT_S = number(float, 1, 7 * 86400)
STEP_MS = number(float, 0, 1e9, low_open=True)  # up to 11 days a step
GRADIENT_BYTES = number(int, 1, 2**50)  # 1 PiB of gradients


def _add_world(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nproc", type=NPROC, default=2, help="local processes to start (ignored under torchrun)")
    p.add_argument(
        "--backend",
        choices=("gloo", "nccl"),
        default=None,
        help="default: nccl where PyTorch sees a GPU (RCCL on ROCm builds), else gloo",
    )
    p.add_argument(
        "--timeout",
        type=TIMEOUT_S,
        default=120.0,
        metavar="S",
        help="seconds a rank may wait on the rendezvous or a collective before the run fails",
    )
    p.add_argument("--port", type=PORT, default=0, help="rendezvous port for local runs; 0: a free one")


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="dawnscope comm",
        description=__doc__.split("\n\n")[0],
        epilog="Exit codes: 0 done, 1 a collective gave wrong results (`wrong` > 0), "
        "2 bad input or a failed rank (one line).",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    _collectives_parser(sub)
    _ddp_parser(sub)
    _ranks_parser(sub)
    _scale_parser(sub)
    return ap


def _collectives_parser(sub) -> None:
    """`comm collectives`: its world and the sizes, repeats and files of the benchmark."""
    c = sub.add_parser("collectives", help="benchmark collectives (time, algbw, busbw, wrong)")
    _add_world(c)
    c.add_argument("--ops", default="allreduce,allgather,reducescatter,broadcast,alltoall")
    c.add_argument("--sizes", default=None, help="e.g. 8,4K,16M; deepbench; buckets:resnet9 (comma-separated)")
    c.add_argument("--iters", type=POSITIVE_INT, default=5, help="calls per timed sample")
    c.add_argument("--reps", type=POSITIVE_INT, default=5, help="timed samples per size")
    c.add_argument(
        "--out",
        type=Path,
        default=Path("results") / "comm-collectives",
        metavar="DIR",
        help="output directory (results.json, results.csv, busbw.png); default: %(default)s",
    )
    c.add_argument("--plot", dest="no_plot", action="store_false", default=False, help="draw busbw.png (the default)")
    c.add_argument("--no-plot", action="store_true", help="skip busbw.png")
    c.add_argument(
        "--config",
        type=Path,
        default=None,
        help="bench.toml (its noise and conditions settings); default: the project's",
    )
    c.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write results.json's document here")


def _ddp_parser(sub) -> None:
    """`comm ddp`: its world, the model and steps, where the rank traces are kept."""
    d = sub.add_parser("ddp", help="a DDP training step split into compute and communication")
    _add_world(d)
    d.add_argument("--model", default="resnet9")
    d.add_argument("--batch", type=POSITIVE_INT, default=8, help="batch per rank")
    d.add_argument("--steps", type=POSITIVE_INT, default=3, help="profiled steps (after one warm-up step)")
    d.add_argument(
        "--bucket-mb", type=BUCKET_MB, default=None, help="DDP bucket cap; default: DDP's own (1 MiB first, then 25)"
    )
    d.add_argument("--json", type=Path, default=None, metavar="OUT")
    d.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="keep each rank's profiler trace there (rankN.pt.trace.json, for `trace` and `comm ranks`); "
        "default: not kept",
    )
    d.add_argument(
        "--config", type=Path, default=None, help="bench.toml (its conditions settings); default: the project's"
    )


def _ranks_parser(sub) -> None:
    """`comm ranks`: a job's rank traces and the options of reading them."""
    r = sub.add_parser("ranks", help="a whole job: the traces of its ranks (files, a folder or a glob pattern)")
    r.add_argument("traces", nargs="+", help="rank traces: files, folders of them, or glob patterns ('run/*.json.gz')")
    r.add_argument("--json", type=Path, default=None, metavar="OUT")
    r.add_argument(
        "--step-range",
        dest="steps",
        default=None,
        metavar="NAME",
        help="the name of the step ranges; default: ProfilerStep#N",
    )
    add_job_arguments(r)


def _scale_parser(sub) -> None:
    """`comm scale`: the scaling model's inputs."""
    s = sub.add_parser("scale", help="predict step time, comm_share and speed-up per worker count")
    s.add_argument("--model", default=None, help="one of our models: its gradient bytes (and CPU step time)")
    s.add_argument("--workers", default="1,2,4,8,16,32,64,128")
    s.add_argument(
        "--fabric",
        default="v100_nvlink",
        help="a preset of microbench/data/fabrics.toml, or a "
        "results.json of `comm collectives` (its measured all-reduce)",
    )
    s.add_argument(
        "--step-ms",
        type=STEP_MS,
        default=None,
        help="single-worker step time (default: measured here on the CPU for --model)",
    )
    s.add_argument("--gradient-bytes", type=GRADIENT_BYTES, default=None)
    s.add_argument("--bucket-mb", type=BUCKET_MB, default=25.0)
    s.add_argument("--backward-fraction", type=FRACTION, default=2 / 3)
    s.add_argument("--overlap", choices=("buckets", "none"), default="buckets")
    s.add_argument("--algorithm", choices=("ring", "tree"), default="ring")
    s.add_argument("--paper", action="store_true", help="print the two reproduced figures of the paper")
    s.add_argument("--json", type=Path, default=None, metavar="OUT")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    run = {"collectives": run_collectives, "ddp": _ddp, "ranks": run_ranks, "scale": run_scale}[args.cmd]
    return run_command(lambda: run(args))


def _ddp(args) -> int:
    """The DDP step measured, then (with --out) rank 0's kept trace opened as `trace` opens it, for its findings
    (on a CPU: the split's own breakdown, findings/facts.py CpuCommFacts)."""
    doc, out = measure_ddp(args)
    if doc is None:
        return 0
    kept = kept_rank0(out)
    found = with_findings({}, TraceAnalysis.open(kept, load_config(args.config), STEP_RANGE).findings) if kept else None
    return report_ddp(args, doc, out, found)


if __name__ == "__main__":
    sys.exit(main())
