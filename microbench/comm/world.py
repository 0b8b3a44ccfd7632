"""Running a function on every rank of a process group: under torchrun (its standard environment
variables, so it runs across nodes unchanged) or on N local processes started here.

Local runs choose their port without a race: the parent starts the rendezvous store itself on port 0
(the kernel picks a free port) and keeps it open while the ranks connect to it as clients. Every wait is
bounded: the store connection, init_process_group and the collectives get `timeout_s`, and the parent
watches its children, so a rank that dies or hangs ends the run with one line (CommError), never a hang.
"""

from __future__ import annotations

import datetime
import math
import os
import pickle
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from microbench.core.errors import InputError

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
LOOPBACK = "127.0.0.1"


class CommError(InputError):
    """A distributed run that cannot go on (a dead rank, a timeout, a taken port): one line, exit code 2."""

    def __init__(self, problem: str):
        super().__init__(None, problem)

    def line(self) -> str:
        return self.problem


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int
    backend: str


def under_torchrun() -> bool:
    return all(v in os.environ for v in TORCHRUN_VARS)


def default_backend() -> str:
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"  # RCCL answers to "nccl" in ROCm builds


def _timeout(timeout_s: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=timeout_s)


def _init(rank: int, world: int, backend: str, timeout_s: float, store=None) -> None:
    import torch
    import torch.distributed as dist

    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    if store is None:  # torchrun: env:// rendezvous
        dist.init_process_group(backend, rank=rank, world_size=world, timeout=_timeout(timeout_s))
    else:
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=_timeout(timeout_s))


def _rank_main(rank: int, fn, args, world: int, backend: str, port: int, timeout_s: float, out_dir: str):
    """Entry of a spawned rank: connect, run, leave the result (or the error's one line) in a file."""
    import torch.distributed as dist

    try:
        store = dist.TCPStore(LOOPBACK, port, world, is_master=False, timeout=_timeout(timeout_s))
        _init(rank, world, backend, timeout_s, store)
        result = ("ok", fn(RankInfo(rank, world, rank, backend), *args))
    except BaseException as e:  # noqa: BLE001 - the parent reports it as one line
        result = ("error", _one_line(e), traceback.format_exc())
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    tmp = Path(out_dir, f"{rank}.pkl.tmp")  # the parent polls for the file: it must appear whole
    tmp.write_bytes(pickle.dumps(result))
    os.replace(tmp, Path(out_dir, f"{rank}.pkl"))


def _spawned_rank_main(rank: int, *args) -> None:
    """The entry point of a process started by `run_local`, and only of those: `_rank_main`, then leave at
    once. After its result file is written a rank has nothing left to do, but a normal interpreter exit runs
    C++ teardown with gloo and profiler threads that may still be alive, and that teardown sometimes aborts
    ("terminate called without an active exception", exit code -6: about one run in 18), which the parent
    would report as a dead rank. `os._exit` skips it; the process group is already destroyed and the file
    already replaced, so nothing is lost. (`_rank_main` itself returns normally: tests call it in-process.)"""
    try:
        _rank_main(rank, *args)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return f"{type(e).__name__}: {text[:300]}"


def master_store(port: int, world: int, timeout_s: float):
    """The rendezvous store, served by this process; port 0 lets the kernel choose a free one."""
    import torch.distributed as dist

    try:
        return dist.TCPStore(
            LOOPBACK, port, world + 1, is_master=True, timeout=_timeout(timeout_s), wait_for_workers=False
        )
    except (RuntimeError, OSError) as e:
        raise CommError(f"cannot serve the rendezvous on {LOOPBACK}:{port}: {_one_line(e)}") from None


def run_local(
    fn,
    args: tuple,
    nproc: int,
    backend: str = "gloo",
    timeout_s: float = 60.0,
    port: int = 0,
    start_method: str = "spawn",
    deadline_s: float | None = None,
    startup_s: float | None = None,
) -> list:
    """fn(RankInfo, *args) on `nproc` new local processes; its return values, by rank.

    Raises CommError naming the first rank that failed or died, after stopping the others. A rank that
    hangs makes the others fail within `timeout_s` at their next collective; `deadline_s`, if given,
    bounds the whole run as well, plus `startup_s` (default STARTUP_ALLOWANCE_S) for a process to start.
    """
    import torch.multiprocessing as mp

    if nproc < 1:
        raise CommError(f"--nproc must be >= 1, got {nproc}")
    store = master_store(port, nproc, timeout_s)
    with tempfile.TemporaryDirectory(prefix="dawnscope-comm-") as out_dir:
        ctx = mp.start_processes(
            _spawned_rank_main,
            args=(fn, args, nproc, backend, store.port, timeout_s, out_dir),
            nprocs=nproc,
            join=False,
            start_method=start_method,
        )
        try:
            _watch(ctx.processes, out_dir, deadline_s, STARTUP_ALLOWANCE_S if startup_s is None else startup_s)
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
            for p in ctx.processes:
                p.join(5)
                if p.is_alive():
                    p.kill()
        return _collect(out_dir, nproc)


# A spawned process imports torch before it can time anything: allowed on top of the run's own timeout.
STARTUP_ALLOWANCE_S = 30.0


def _watch(procs, out_dir: str, deadline_s: float | None, startup_s: float) -> None:
    deadline = time.monotonic() + deadline_s + startup_s if deadline_s is not None else math.inf
    while True:
        codes = [p.exitcode for p in procs]
        for rank, code in enumerate(codes):
            if code is not None and code != 0:
                raise CommError(_failure(rank, out_dir, f"rank {rank} died (exit code {code})"))
        for rank in range(len(procs)):
            f = Path(out_dir, f"{rank}.pkl")
            if f.exists() and pickle.loads(f.read_bytes())[0] == "error":
                raise CommError(_failure(rank, out_dir, ""))
        if all(c == 0 for c in codes):
            return
        if time.monotonic() > deadline:
            late = [r for r, c in enumerate(codes) if c is None]
            raise CommError(
                f"ranks {late} did not finish within {deadline_s:g} s (+{startup_s:g} s start-up): stopped them"
            )
        time.sleep(0.05)


def _failure(rank: int, out_dir: str, fallback: str) -> str:
    f = Path(out_dir, f"{rank}.pkl")
    if f.exists():
        res = pickle.loads(f.read_bytes())
        if res[0] == "error":
            if os.environ.get("DAWNSCOPE_COMM_DEBUG"):
                print(res[2])
            return f"rank {rank} failed: {res[1]}"
    return fallback


def _collect(out_dir: str, nproc: int) -> list:
    results = []
    for rank in range(nproc):
        f = Path(out_dir, f"{rank}.pkl")
        if not f.exists():
            raise CommError(f"rank {rank} exited without a result")
        res = pickle.loads(f.read_bytes())
        if res[0] != "ok":
            raise CommError(f"rank {rank} failed: {res[1]}")
        results.append(res[1])
    return results


def run_torchrun(fn, args: tuple, backend: str, timeout_s: float):
    """This process is one rank of a torchrun job: fn's result on this rank."""
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    info = RankInfo(rank, world, int(os.environ.get("LOCAL_RANK", rank)), backend)
    try:
        _init(rank, world, backend, timeout_s)
        return fn(info, *args)
    except (RuntimeError, ValueError, OSError) as e:
        raise CommError(f"rank {rank} failed: {_one_line(e)}") from None
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run(fn, args: tuple, nproc: int, backend: str | None = None, timeout_s: float = 60.0, port: int = 0):
    """Rank 0's result (torchrun: this rank's, None on the others) and the world size."""
    backend = backend or default_backend()
    if under_torchrun():
        return run_torchrun(fn, args, backend, timeout_s), int(os.environ["WORLD_SIZE"])
    return run_local(fn, args, nproc, backend, timeout_s, port)[0], nproc
