"""python -m microbench.comm collectives|ddp|ranks|scale: the communication cost of data-parallel training.

  collectives  all-reduce, all-gather, reduce-scatter, broadcast, all-to-all over message sizes: time, algbw
               and busbw (nccl-tests formulas), every result checked; rows of results.json + busbw plot
  ddp          a DDP training step of one of our models over N processes, split from the profiler into
               compute, overlapped and exposed communication, with gradient bytes and bucket count
  ranks        traces of several ranks of one job: per collective call size, algbw / busbw, skew, straggler;
               exposed communication per rank
  scale        the scaling model: step time, comm_share and speed-up per worker count on a fabric preset

Under torchrun (its environment variables) collectives and ddp run as one rank of that job; otherwise they
start --nproc local processes. docs/comm.md has the definitions and the measured numbers.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from microbench.core.errors import InputError


def _add_world(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nproc", type=int, default=2, help="local processes to start (ignored under torchrun)")
    p.add_argument("--backend", choices=("gloo", "nccl"), default=None,
                   help="default: nccl where PyTorch sees a GPU (RCCL on ROCm builds), else gloo")
    p.add_argument("--timeout", type=float, default=120.0, metavar="S",
                   help="seconds a rank may wait on the rendezvous or a collective before the run fails")
    p.add_argument("--port", type=int, default=0, help="rendezvous port for local runs; 0: a free one")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m microbench.comm", description=__doc__.split("\n\n")[0],
                                 epilog="Exit codes: 0 done, 1 a collective gave wrong results (`wrong` > 0), "
                                        "2 bad input or a failed rank (one line).")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collectives", help="benchmark collectives (time, algbw, busbw, wrong)")
    _add_world(c)
    c.add_argument("--ops", default="allreduce,allgather,reducescatter,broadcast,alltoall")
    c.add_argument("--sizes", default=None, help="e.g. 8,4K,16M; deepbench; buckets:resnet9 (comma-separated)")
    c.add_argument("--iters", type=int, default=5, help="calls per timed sample")
    c.add_argument("--reps", type=int, default=5, help="timed samples per size")
    c.add_argument("--out", type=Path, default=Path("results-comm"))
    c.add_argument("--no-plot", action="store_true")
    d = sub.add_parser("ddp", help="a DDP training step split into compute and communication")
    _add_world(d)
    d.add_argument("--model", default="resnet9")
    d.add_argument("--batch", type=int, default=8, help="batch per rank")
    d.add_argument("--steps", type=int, default=3, help="profiled steps (after one warm-up step)")
    d.add_argument("--bucket-mb", type=float, default=None, help="DDP bucket cap; default: DDP's own (1 MiB first, then 25)")
    d.add_argument("--json", type=Path, default=None, metavar="OUT")
    r = sub.add_parser("ranks", help="collectives across the traces of several ranks")
    r.add_argument("traces", nargs="+", type=Path)
    r.add_argument("--json", type=Path, default=None, metavar="OUT")
    s = sub.add_parser("scale", help="predict step time, comm_share and speed-up per worker count")
    s.add_argument("--model", default=None, help="one of our models: its gradient bytes (and CPU step time)")
    s.add_argument("--workers", default="1,2,4,8,16,32,64,128")
    s.add_argument("--fabric", default="v100_nvlink", help="a preset of microbench/data/fabrics.toml, or a "
                   "results.json of `comm collectives` (its measured all-reduce)")
    s.add_argument("--step-ms", type=float, default=None, help="single-worker step time (default: measured "
                   "here on the CPU for --model)")
    s.add_argument("--gradient-bytes", type=int, default=None)
    s.add_argument("--bucket-mb", type=float, default=25.0)
    s.add_argument("--backward-fraction", type=float, default=2 / 3)
    s.add_argument("--overlap", choices=("buckets", "none"), default="buckets")
    s.add_argument("--algorithm", choices=("ring", "tree"), default="ring")
    s.add_argument("--paper", action="store_true", help="print the two reproduced figures of the paper")
    s.add_argument("--json", type=Path, default=None, metavar="OUT")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .dist.report import run_collectives, run_ddp, run_ranks, run_scale

    try:
        return {"collectives": run_collectives, "ddp": run_ddp, "ranks": run_ranks, "scale": run_scale}[args.cmd](args)
    except InputError as e:
        line = e.line() if e.path else e.line().replace("<input>: ", "", 1)  # an option, not a file
        print(f"error: {line}", file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
