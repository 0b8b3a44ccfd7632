"""Where a job's ranks are read: each rank's trace read and reduced to its summary (ranks.summarize_rank) in a
worker of an existing engine, never all events in one process.

- a local process pool (concurrent.futures, spawned processes: a worker holds one rank's timeline at a time);
- `workers=0`: in this process, one rank after the other (tests, debugging);
- Dask distributed, given a scheduler address (or Dask's own `DASK_SCHEDULER_ADDRESS`): the workers read the
  files by path, so the traces must be where the workers see them (a shared file system).
A rank that fails to read comes back as a `Failed` with the reason; the others are still reported.
"""

from __future__ import annotations

import glob
import os
import signal
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path

import tomllib

from microbench.core.errors import InputError
from microbench.core.resources import data_file

from .ranks import RankSummary, summarize_rank

JOB_TOML = data_file("job.toml")
GLOB_CHARS = "*?["


@dataclass
class Failed:
    path: Path
    reason: str


@dataclass
class EngineRun:
    kind: str  # "processes", "dask", "inline"
    workers: int
    wall_s: float
    results: list = field(default_factory=list)  # RankSummary or Failed, in path order
    address: str | None = None


def job_settings() -> dict:
    return tomllib.loads(JOB_TOML.read_text())


def _is_trace(p: Path, suffixes: tuple[str, ...]) -> bool:
    return p.is_file() and p.name.lower().endswith(suffixes)


def _deeper(folder: Path, suffixes: tuple[str, ...], shown: int = 3) -> str:
    """Where a folder's traces are when they are in its subfolders (a TensorBoard log folder keeps them under
    plugins/profile/RUN/): said, not read, since traces of several runs are no job."""
    found = sorted(q for q in folder.rglob("*") if _is_trace(q, suffixes))
    if not found:
        return ""
    names = ", ".join(str(q.relative_to(folder)) for q in found[:shown]) + (", ..." if len(found) > shown else "")
    return f"; {len(found)} in its subfolders ({names}): give one trace, or the folder that holds one job's ranks"


def find_traces(specs: list[str | Path]) -> list[Path]:
    """The rank traces named by files, folders (their trace files, not recursing) and glob patterns, sorted and
    each once. A folder or pattern that names no trace is bad input."""
    suffixes = tuple(job_settings()["traces"]["suffixes"])
    out: list[Path] = []
    for spec in map(str, specs):
        p = Path(spec)
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if _is_trace(q, suffixes))
            if not found:
                raise InputError(
                    p, f"no traces in this folder (files ending {', '.join(suffixes)})" + _deeper(p, suffixes)
                )
        elif any(ch in spec for ch in GLOB_CHARS) and not p.exists():
            found = sorted(Path(q) for q in glob.glob(spec) if _is_trace(Path(q), suffixes))
            if not found:
                raise InputError(spec, "the pattern matches no trace file")
        else:
            found = [p]
        out += found
    seen: set[Path] = set()
    return [p for p in out if not (p.resolve() in seen or seen.add(p.resolve()))]


def summarize_or_fail(
    path: Path, fallback_rank: int, step_range: str | None, reader: Callable | None = None
) -> RankSummary | Failed:
    """One rank in a worker, by `reader` (path, fallback_rank, step_range) -> RankSummary (default: the summary
    alone, comm/ranks.py summarize_rank); a failure becomes its reason (or_failed)."""
    return or_failed(path, reader or summarize_rank, path, fallback_rank, step_range)


def or_failed(path: Path, read: Callable, *args) -> RankSummary | Failed:
    """`read(*args)`, the summary of one rank of the trace at `path`; every failure becomes its reason (bad input in
    one line, or the exception)."""
    try:
        return read(*args)
    except InputError as e:
        return Failed(Path(path), e.line())
    except Exception as e:  # noqa: BLE001 - whatever breaks one rank is that rank's reason; the others go on
        return Failed(Path(path), f"{type(e).__name__}: {e}")


def dask_address(scheduler: str | None) -> str | None:
    """The scheduler to use: --scheduler, else Dask's own setting (its DASK_SCHEDULER_ADDRESS variable, read
    now, then its `scheduler-address` configuration where dask is installed), else none: the local pool."""
    if scheduler:
        return scheduler
    if os.environ.get("DASK_SCHEDULER_ADDRESS"):
        return os.environ["DASK_SCHEDULER_ADDRESS"]
    try:
        import dask.config
    except ImportError:
        return None
    return dask.config.get("scheduler-address", None) or None


def _ignore_interrupt() -> None:
    """A pool worker leaves Ctrl-C to the command (one line, exit 130), not a traceback of its own."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_ranks(
    paths: list[Path],
    workers: int | None = None,
    scheduler: str | None = None,
    timeout_s: float = 60.0,
    step_range: str | None = None,
    reader: Callable | None = None,
) -> EngineRun:
    """Every rank's summary (or failure), in the order of `paths`. `workers`: processes of the local pool
    (default: the CPUs); `scheduler`: a Dask scheduler address, which replaces the pool; `reader`: a module-level
    function (picklable) that reads one rank into its RankSummary, where the caller wants more from the same read."""
    address = dask_address(scheduler)
    t0 = time.perf_counter()
    if address:
        results, n = _dask(paths, address, timeout_s, step_range, reader)
        return EngineRun("dask", n, time.perf_counter() - t0, results, address)
    if workers == 0:
        results = [summarize_or_fail(p, i, step_range, reader) for i, p in enumerate(paths)]
        return EngineRun("inline", 1, time.perf_counter() - t0, results)
    n = min(workers or os.cpu_count() or 1, len(paths))
    from concurrent.futures.process import BrokenProcessPool

    try:
        results = _pool(paths, n, step_range, reader)
    except BrokenProcessPool:  # the readers died starting (a machine out of memory or processes): read them here
        print("note: the reader processes could not start: the ranks are read in this process", file=sys.stderr)
        results = [summarize_or_fail(p, i, step_range, reader) for i, p in enumerate(paths)]
        return EngineRun("inline", 1, time.perf_counter() - t0, results)
    return EngineRun("processes", n, time.perf_counter() - t0, results)


def _pool(paths: list[Path], n: int, step_range: str | None, reader: Callable | None) -> list:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # spawned, not forked: a worker starts small (the peak memory it reports is its own) and holds no lock
    # or thread of this process. One rank per task: ranks take 40 ms to seconds each, against well under a
    # millisecond to hand one over, and a larger chunk leaves one worker finishing its last chunk alone (with 16
    # ranks a chunk, 256 ranks on 2 workers ended 0.6 s apart)
    with (
        _main_not_rerun(),
        ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"), initializer=_ignore_interrupt) as ex,
    ):
        try:
            return list(
                ex.map(summarize_or_fail, paths, range(len(paths)), repeat(step_range), repeat(reader), chunksize=1)
            )
        except BaseException:
            ex.shutdown(wait=False, cancel_futures=True)
            raise


@contextmanager
def _main_not_rerun():
    """While the readers start: the caller's __main__ without the file or spec that a spawned process re-runs it
    from (multiprocessing.spawn.get_preparation_data reads them), so a reader never executes the user's script
    (its prints, its training, its own Job): a reader needs only microbench's module-level functions."""
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
    try:
        for k in saved:
            if k == "__spec__":
                main.__spec__ = None
            else:
                del main.__dict__[k]
        yield
    finally:
        for k, v in saved.items():
            setattr(main, k, v)


def _dask(
    paths: list[Path], address: str, timeout_s: float, step_range: str | None, reader: Callable | None = None
) -> tuple[list, int]:
    try:
        from distributed import Client
    except ImportError:
        raise InputError(
            None,
            "a Dask scheduler needs Dask distributed: pip install 'dawnscope[dask]'",
            key="--scheduler",
            value=address,
        ) from None
    try:
        client = Client(address, timeout=f"{timeout_s}s", set_as_default=False)
    except (OSError, TimeoutError, ValueError) as e:
        raise InputError(
            None,
            f"cannot reach the Dask scheduler within {timeout_s:g} s ({type(e).__name__})",
            key="--scheduler",
            value=address,
        ) from None
    with client:
        n = len(client.scheduler_info().get("workers", {}))
        futures = client.map(
            summarize_or_fail,
            [str(p) for p in paths],
            range(len(paths)),
            step_range=step_range,
            reader=reader,
            pure=False,
        )
        try:
            results = client.gather(futures)
        except Exception as e:  # a worker lost: name it, one line
            raise InputError(
                None, f"the Dask workers failed: {type(e).__name__}: {e}", key="--scheduler", value=address
            ) from None
    return [Failed(r.path, r.reason) if isinstance(r, Failed) else r for r in results], n
