"""What a fix really saved, for the checks of docs/findings.md: the training steps of two workloads (before and after
the fix) timed in one process, in alternating blocks of steps, so that both see the same machine (the measurement:
microbench/verify/pair.py, which `dawnscope verify` runs; this is its command line, with DDP pairs over it).

One `decompose` run per setting measured each step in its own process, and on our 2-core machines the runs fall
into speed modes (a configuration's step 12 - 14 ms in one run, 17 - 23 ms in the next): paired differences of
whole runs spread over -4 to +11 ms, wider than the savings being checked. Blocks of a few steps each, A B A B ...,
put both settings in every mode; the saving is the median of the paired differences of the blocks' median steps.

    python -m devtools.pair --before tests.findings_models:digits_loader_one_thread \\
        --after tests.findings_models:digits_loader_worker_core --batch 128 --blocks 40 --steps 5

Each workload keeps the intra-op thread count its factory set (torch.set_num_threads), set again before each of its
blocks; `--processes K` runs K such processes and takes the median of their savings (the checks of
docs/findings.md did that by hand); `--dtype-before` / `--dtype-after` make an AMP pair of one model, `--workers-before` / `--workers-after` a
DataLoader pair (the workload's DataLoader with that many workers), `--threads-before` / `--threads-after` set a
side's thread count; `--nproc N` a DDP pair: N local ranks (gloo), each holding both settings' models wrapped in
DistributedDataParallel (`--bucket-mb-before` / `--bucket-mb-after`: the cap of each, default DDP's own), every rank
running the same side's block at the same time; rank 0's blocks are the result. The timer is roofline.timing's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile

from microbench.comm import world
from microbench.core.errors import InputError
from microbench.verify.pair import Setting, measure_pair


def _ddp_wrap(model, setting: Setting):
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, bucket_cap_mb=setting.bucket_mb)


def _ddp_rank(info, a) -> dict | None:
    """One rank of a DDP pair: both sides' blocks, in the same order on every rank (DDP's collectives pair up)."""
    doc = _one(a, ddp=True)
    return doc | {"nproc": info.world_size, "backend": info.backend} if info.rank == 0 else None


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m devtools.pair", description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="the workload before the fix (a decompose --model spec)")
    ap.add_argument("--after", required=True, help="the workload after it")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--blocks", type=int, default=40, help="blocks of each side (default 40)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per block (default 5)")
    ap.add_argument("--dtype-before", default="fp32")
    ap.add_argument("--dtype-after", default="fp32")
    ap.add_argument(
        "--workers-before",
        type=int,
        default=None,
        metavar="N",
        help="the before workload's DataLoader with N workers (decompose --num-workers)",
    )
    ap.add_argument("--workers-after", type=int, default=None, metavar="N", help="the after workload's likewise")
    ap.add_argument(
        "--threads-before",
        type=int,
        default=None,
        metavar="T",
        help="the before side's intra-op threads (default: what its factory set)",
    )
    ap.add_argument("--threads-after", type=int, default=None, metavar="T", help="the after side's likewise")
    ap.add_argument(
        "--nproc", type=int, default=1, metavar="N", help="a DDP pair over N local ranks (gloo); default 1: no DDP"
    )
    ap.add_argument(
        "--bucket-mb-before",
        type=float,
        default=None,
        metavar="MB",
        help="with --nproc: the before side's DDP bucket_cap_mb (default DDP's own)",
    )
    ap.add_argument("--bucket-mb-after", type=float, default=None, metavar="MB", help="the after side's likewise")
    ap.add_argument(
        "--processes",
        type=int,
        default=1,
        metavar="K",
        help="K pair processes one after another, the saving the median of theirs (default 1): each "
        "process has a speed of its own, and on a 2-core CPU one process's saving is good to a few "
        "ms only (docs/findings.md)",
    )
    ap.add_argument("--json", help="write the result here")
    return ap


def _bad(a) -> bool:
    return (
        a.blocks < 2
        or a.steps < 1
        or a.batch < 1
        or a.processes < 1
        or a.nproc < 1
        or any(b is not None and b <= 0 for b in (a.bucket_mb_before, a.bucket_mb_after))
        or min(a.workers_before or 0, a.workers_after or 0) < 0
        or any(t is not None and t < 1 for t in (a.threads_before, a.threads_after))
    )


def _one(a, ddp: bool = False) -> dict:
    if a.nproc > 1 and not ddp:
        return world.run_local(_ddp_rank, (a,), a.nproc, "gloo", timeout_s=600.0)[0]
    before = Setting(a.before, a.dtype_before, a.workers_before, a.threads_before, bucket_mb=a.bucket_mb_before)
    after = Setting(a.after, a.dtype_after, a.workers_after, a.threads_after, bucket_mb=a.bucket_mb_after)
    doc = measure_pair(before, after, a.batch, a.blocks, a.steps, wrap=_ddp_wrap if ddp else None)
    if ddp:
        for side, s in (("before", before), ("after", after)):
            doc[side]["ddp_bucket_cap_mb"] = s.bucket_mb if s.bucket_mb is not None else "DDP's default"
    return doc


def _processes(argv: list[str], k: int) -> dict:
    """K runs of this command in processes of their own (--processes 1, each its --json): the median of their savings,
    with the lowest and the highest."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="dawnscope-pair-") as tmp:
        for i in range(k):
            out = f"{tmp}/{i}.json"
            p = subprocess.run(
                [sys.executable, "-m", "devtools.pair", *argv, "--processes", "1", "--json", out],
                capture_output=True,
                text=True,
                check=False,
            )
            if p.returncode != 0:
                lines = (p.stderr or p.stdout).strip().splitlines() or [f"exit {p.returncode}"]
                raise ValueError(f"process {i + 1} of {k}: {lines[-1].removeprefix('pair: ')}")
            with open(out) as fh:
                runs.append(json.load(fh))
            print(f"process {i + 1} of {k}: {runs[-1]['saving_us']['median']:,.0f} us", flush=True)
    each = [r["saving_us"]["median"] for r in runs]
    return {"processes": runs, "saving_us": {"median": statistics.median(each), "min": min(each), "max": max(each)}}


def _without(argv: list[str], flag: str) -> list[str]:
    """`argv` less `flag` and its value (either spelling: `--flag V` or `--flag=V`)."""
    out, skip = [], False
    for x in argv:
        if skip:
            skip = False
        elif x == flag:
            skip = True
        elif not x.startswith(flag + "="):
            out.append(x)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a = _parser().parse_args(argv)
    if _bad(a):
        print(
            "pair: --blocks must be at least 2, --steps, --batch, --processes, --nproc and --threads-* at least 1, "
            "--workers-* at least 0, --bucket-mb-* above 0",
            file=sys.stderr,
        )
        return 2
    try:
        doc = (
            _one(a) if a.processes == 1 else _processes(_without(_without(argv, "--json"), "--processes"), a.processes)
        )
    except (InputError, ValueError, ImportError) as e:  # a bad model spec, batch or dtype: one line
        print(f"pair: {e}", file=sys.stderr)
        return 2
    s = doc["saving_us"]
    if a.processes == 1:
        print(
            f"saving per step: {s['median']:,.0f} us (paired blocks' quartiles {s['q1']:,.0f} - {s['q3']:,.0f}; "
            f"difference of the medians {s['of_medians']:,.0f}), {a.blocks} blocks of {a.steps} steps each side"
        )
    else:
        print(
            f"saving per step: {s['median']:,.0f} us, the median of {a.processes} processes ({s['min']:,.0f} - "
            f"{s['max']:,.0f}), {a.blocks} blocks of {a.steps} steps each side in each"
        )
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(doc, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
