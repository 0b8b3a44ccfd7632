"""A whole job: the rank summaries (read in workers: microbench/comm/engine.py) combined into one
report: per rank its GPU time breakdown per step (timeline/gpu_time, the one definition), per matched
collective its skew and straggler (ranks.py), the ranks whose step time or busy time is an outlier (modified
z-score, data/job.toml; metrics: median step time, GPU busy time, computation time), the slowest step, and the rank x step matrix of step times for the heat map.
Definitions: docs/comm.md, "A whole job"."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from functools import cached_property
from pathlib import Path

from microbench.core.errors import InputError
from microbench.core.frames import Tables, unknown_table
from microbench.trace import processes
from microbench.trace.analysis import read_trace
from microbench.trace.timeline import Timeline

from .engine import EngineRun, Failed, find_traces, job_settings, or_failed, run_ranks
from .ranks import RankSummary, collective_record, match, summarize_timeline

SCHEMA = "dawnscope.comm.ranks/2"
MAX_NAMED = 3  # files named per group in an error line


def _names(paths) -> str:
    paths = [Path(p).name for p in paths]
    more = f" and {len(paths) - MAX_NAMED} more" if len(paths) > MAX_NAMED else ""
    return ", ".join(paths[:MAX_NAMED]) + more


MAX_MISSING_LISTED = 32  # rank ids listed in the JSON; the count is always whole


def check_one_job(ranks: list[RankSummary]) -> None:
    """Refuse traces that are not ranks of one job, naming which: no collective calls, different world sizes,
    two traces of one rank, or GPU activity at times that never meet (another run of the job)."""
    lone = [r.path for r in ranks if not r.calls]
    if lone:
        raise InputError(
            lone[0],
            f"no collective calls (nccl:* annotations): not a rank of a distributed job "
            f"({len(lone)} such trace{'s' if len(lone) > 1 else ''}: {_names(lone)})",
        )
    by_world: dict = {}
    for r in ranks:
        by_world.setdefault(r.world_size, []).append(r.path)
    if len(by_world) > 1:
        groups = "; ".join(f"world_size {w}: {_names(p)}" for w, p in sorted(by_world.items(), key=str))
        raise InputError(
            ranks[0].path.parent, f"the traces are not ranks of one job: {groups}", key="distributedInfo.world_size"
        )
    by_rank: dict[int, list[Path]] = {}
    for r in ranks:
        by_rank.setdefault(r.rank, []).append(r.path)
    dup = {k: v for k, v in by_rank.items() if len(v) > 1}
    if dup:
        k, v = next(iter(dup.items()))
        raise InputError(v[0], f"two traces claim rank {k}: {_names(v)}", key="distributedInfo.rank")
    timed = [r for r in ranks if r.gpu_first_us is not None]
    if len(timed) > 1:
        lo = statistics.median(r.gpu_first_us for r in timed)
        hi = statistics.median(r.gpu_last_us for r in timed)
        apart = [r.path for r in timed if r.gpu_last_us < lo or r.gpu_first_us > hi]
        if apart:
            raise InputError(
                apart[0], f"GPU activity never meets the other ranks' (another run of the job?): {_names(apart)}"
            )


def outliers(values: dict[int, float], metric: str) -> list[dict]:
    """Ranks whose value is an outlier by the modified z-score and by at least a minimum share of the median
    (data/job.toml, [outliers]: the z-score alone names a rank a few percent off when the others agree closely)."""
    cfg = job_settings()["outliers"]
    if len(values) < cfg["min_ranks"]:
        return []
    xs = list(values.values())
    med = statistics.median(xs)
    mad = statistics.median(abs(x - med) for x in xs)
    if mad > 0:
        scale, stat = mad / 0.6745, "modified z-score 0.6745*(x-median)/MAD"
    else:
        mean_ad = statistics.fmean(abs(x - med) for x in xs)
        scale, stat = mean_ad / 0.7979, "modified z-score 0.7979*(x-median)/meanAD (MAD is 0)"
    if scale <= 0:
        return []
    out = []
    for rank, x in values.items():
        z = (x - med) / scale
        effect = abs(x - med) / abs(med) if med else float("inf")
        if abs(z) > cfg["modified_z"] and effect >= cfg["min_relative_effect"]:
            out.append(
                {
                    "rank": rank,
                    "metric": metric,
                    "value": x,
                    "median": med,
                    "z": z,
                    "statistic": stat,
                    "threshold": cfg["modified_z"],
                    "relative_effect": effect,
                    "min_relative_effect": cfg["min_relative_effect"],
                }
            )
    return sorted(out, key=lambda o: -abs(o["z"]))


def step_matrix(ranks: list[RankSummary]) -> dict:
    """Rank x step matrices by step name, in the steps' order of first appearance: the heat map. `values_ms`:
    step wall time (a synchronous job evens it out across ranks); `computation_ms`: the step's computation
    (non-communication kernels, gpu_time), where a slow rank shows."""
    steps: list[str] = []
    for r in ranks:
        for s in r.steps:
            if s["name"] not in steps:
                steps.append(s["name"])
    col = {n: i for i, n in enumerate(steps)}
    out = {
        "metric": "step wall time (ms)",
        "ranks": [r.rank for r in ranks],
        "steps": steps,
        "values_ms": [],
        "computation_ms": [],
    }
    for r in ranks:
        wall, comp = [None] * len(steps), [None] * len(steps)
        for s in r.steps:
            j = col[s["name"]]
            wall[j] = s["wall_us"] / 1e3 if s.get("wall_us") is not None else None
            comp[j] = s["computation_us"] / 1e3 if s.get("computation_us") is not None else None
        out["values_ms"].append(wall)
        out["computation_ms"].append(comp)
    return out


def slowest_step(matrix: dict) -> dict | None:
    """The step whose slowest rank took longest (a synchronous step ends when its last rank does)."""
    best = None
    for j, name in enumerate(matrix["steps"]):
        col = [(v[j], rank) for v, rank in zip(matrix["values_ms"], matrix["ranks"]) if v[j] is not None]
        if col:
            t, rank = max(col)
            if best is None or t > best["time_ms"]:
                best = {
                    "step": name,
                    "time_ms": t,
                    "slowest_rank": rank,
                    "median_rank_ms": statistics.median(v for v, _ in col),
                }
    return best


def _rank_entry(r: RankSummary, matched: set[int], strag: dict) -> dict:
    steps = [s["wall_us"] for s in r.steps if s.get("wall_us") is not None]
    w = r.whole
    return {
        "rank": r.rank,
        "file": str(r.path),
        "process": r.process,
        "world_size": r.world_size,
        "calls": len(r.calls),
        "calls_with_kernel": sum(c.kernel_ts is not None for c in r.calls),
        "unmatched_calls": sum(c.kernel_ts is not None and id(c) not in matched for c in r.calls),
        "comm_kernels": r.comm_kernels,
        "unlinked_comm_kernels": r.unlinked_kernels,
        "comm_ms": r.comm_us / 1e3,
        "exposed_comm_ms": r.exposed_comm_us / 1e3,
        "kernel_span_ms": r.span_us / 1e3,
        "exposed_comm_share": r.exposed_comm_us / r.span_us if r.span_us else None,
        "median_step_us": statistics.median(steps) if steps else None,
        "busy_us": w.get("busy_us"),
        "gpu_time": w,
        "steps": r.steps,
        "outside_steps": r.outside_steps,
        **strag,
    }


def combine(ranks: list[RankSummary], failed: list[Failed]) -> dict:
    """The job report from the ranks' summaries (sorted by rank here)."""
    ranks = sorted(ranks, key=lambda r: r.rank)
    check_one_job(ranks)
    groups = match(ranks)
    records = [collective_record(g) for g in groups]
    matched = {id(c) for g in groups for c in g}
    strag: dict[int, dict] = {r.rank: {"times": 0, "wait_caused_ms": 0.0} for r in ranks}
    for rec in records:
        strag[rec["straggler_rank"]]["times"] += 1
        strag[rec["straggler_rank"]]["wait_caused_ms"] += rec["start_skew_ms"]
    per_rank = [_rank_entry(r, matched, strag[r.rank]) for r in ranks]
    worst = max(strag, key=lambda k: strag[k]["wait_caused_ms"]) if records else None
    matrix = step_matrix(ranks)
    found = outliers(
        {e["rank"]: e["median_step_us"] for e in per_rank if e["median_step_us"] is not None}, "median_step_us"
    )
    for metric in ("busy_us", "computation_us"):
        found += outliers({e["rank"]: e["gpu_time"][metric] for e in per_rank if metric in e["gpu_time"]}, metric)
    return {
        "schema": SCHEMA,
        "ranks": per_rank,
        "collectives": records,
        "straggler_rank": worst,
        "outliers": found,
        "slowest_step": slowest_step(matrix),
        "heatmap": matrix,
        "failed": [{"file": str(f.path), "reason": f.reason} for f in failed],
        **missing_ranks(ranks),
    }


def missing_ranks(ranks: list[RankSummary]) -> dict:
    """The job's size as its traces state it against the ranks read: a straggler and outliers found among 2 of
    128 ranks are findings about those 2 only, and the report must say so."""
    world = ranks[0].world_size if ranks else None
    if not isinstance(world, int) or world < 1:
        return {"world_size": None, "missing_ranks": None}
    present = {r.rank for r in ranks}
    absent = [k for k in range(world) if k not in present]
    return {"world_size": world, "missing_ranks": len(absent), "missing_rank_ids": absent[:MAX_MISSING_LISTED]}


def engine_section(run: EngineRun) -> dict:
    """How the ranks were read: the engine, wall time, and per worker its ranks, bytes, MB/s and peak memory."""
    per: dict[str, dict] = {}
    for r in run.results:
        if isinstance(r, RankSummary):
            w = per.setdefault(
                r.worker,
                {
                    "worker": r.worker,
                    "ranks": 0,
                    "file_bytes": 0,
                    "trace_bytes": 0,
                    "busy_s": 0.0,
                    "cpu_s": 0.0,
                    "peak_rss_bytes": 0,
                },
            )
            w["ranks"] += 1
            w["file_bytes"] += r.file_bytes
            w["trace_bytes"] += r.trace_bytes
            w["busy_s"] += r.read_s
            w["cpu_s"] += r.cpu_s
            w["peak_rss_bytes"] = max(w["peak_rss_bytes"], r.worker_peak_rss_bytes)
    for w in per.values():  # MB/s of the files as stored, and of the decompressed trace text
        w["mb_per_s"] = w["file_bytes"] / 1e6 / w["busy_s"] if w["busy_s"] > 0 else None
        w["trace_mb_per_s"] = w["trace_bytes"] / 1e6 / w["busy_s"] if w["busy_s"] > 0 else None
    total = sum(w["file_bytes"] for w in per.values())
    text = sum(w["trace_bytes"] for w in per.values())
    return {
        "kind": run.kind,
        "workers": run.workers,
        "address": run.address,
        "wall_s": run.wall_s,
        "file_bytes": total,
        "trace_bytes": text,
        "mb_per_s": total / 1e6 / run.wall_s if run.wall_s > 0 else None,
        "per_worker": sorted(per.values(), key=lambda w: w["worker"]),
    }


def analyze_job(
    specs: list,
    workers: int | None = None,
    scheduler: str | None = None,
    timeout_s: float = 60.0,
    step_range: str | None = None,
) -> dict:
    """The report of a job from its rank traces: files, folders or glob patterns."""
    return job_with_reports(specs, workers, scheduler, timeout_s, step_range)[0]


def job_with_reports(
    specs: list,
    workers: int | None = None,
    scheduler: str | None = None,
    timeout_s: float = 60.0,
    step_range: str | None = None,
    reader: Callable | None = None,
) -> tuple[dict, dict[int, dict]]:
    """The job's report, and what `reader` (engine.run_ranks) made of each rank while reading it, by rank: each
    rank is read once, whatever the caller wants of it beside the summary."""
    paths = find_traces(specs)
    if len(paths) == 1:  # a file of several ranks' processes is a job of its own
        found = job_of_processes(read_trace(paths[0]), paths[0], step_range)
        if found is not None:
            return found
    if len(paths) < 2:
        raise InputError(
            paths[0] if paths else None,
            "give the traces of at least two ranks of one job"
            + (" (this file holds one process's steps)" if paths else ""),
            key=None if paths else "traces",
        )
    return _job_of(run_ranks(paths, workers, scheduler, timeout_s, step_range, reader), paths)


def job_of_processes(
    tl: Timeline, path: Path, step_range: str | None = None, reader: Callable | None = None
) -> tuple[dict, dict[int, dict]] | None:
    """A file whose processes are ranks (trace/processes.py: a merged file of ranks) as a job: each process's
    timeline read as that rank's trace, here (the file is read once), by `reader` (timeline, path, fallback_rank,
    step_range) -> RankSummary (default: the summary alone); the job's report and the readers' reports as
    job_with_reports returns them. None where the file is one process's."""
    t0 = time.perf_counter()
    parts = processes.split(tl, step_range)
    if not parts:
        return None
    read = reader or summarize_timeline
    results = [or_failed(path, read, part, Path(path), i, step_range) for i, (_, part) in enumerate(parts)]
    doc, reports = _job_of(EngineRun("inline", 1, time.perf_counter() - t0, results), [Path(path)] * len(parts))
    doc["processes_in_one_file"] = {"file": str(path), "pids": [p for p, _ in parts]}
    return doc, reports


def _job_of(run: EngineRun, paths: list[Path]) -> tuple[dict, dict[int, dict]]:
    ok = [r for r in run.results if isinstance(r, RankSummary)]
    failed = [r for r in run.results if isinstance(r, Failed)]
    if len(ok) < 2:
        # named by the first that failed (its reason once: a reader's reason already starts with its path)
        first = failed[0] if failed else None
        why = (
            ""
            if first is None
            else "; this one: " + first.reason.removeprefix(f"{first.path}: ").removeprefix(f"{first.path.name}: ")
        )
        raise InputError(
            first.path if first else paths[0].parent,
            f"{len(failed)} of {len(paths)} rank traces failed to read: fewer than two ranks left{why}",
        )
    doc = combine(ok, failed)
    doc["engine"] = engine_section(run)
    return doc, {r.rank: r.report for r in ok if r.report is not None}


class Job(Tables):
    """A job of many ranks for notebooks (docs/api.md): the report `dawnscope comm ranks` prints
    (`analyze_job`: the traces found, each rank read in a worker, combined), computed once on first use, with
    its tables as lists of dicts and, with pandas (the `frames` extra), DataFrames. `traces`: files, folders or
    glob patterns; `readers`: local reader processes (default: the CPUs; 0: in this process); `scheduler`: a
    Dask scheduler address instead; `step_range`: the name of the step ranges (default: ProfilerStep#N)."""

    TABLES = ("ranks", "steps", "stragglers", "collectives", "outliers", "failed")

    def __init__(
        self,
        traces,
        readers: int | None = None,
        scheduler: str | None = None,
        timeout_s: float = 60.0,
        step_range: str | None = None,
    ):
        self.traces = [traces] if isinstance(traces, (str, Path)) else list(traces)
        self.readers, self.scheduler, self.timeout_s, self.step_range = readers, scheduler, timeout_s, step_range

    @cached_property
    def report(self) -> dict:
        """The combined report (schema dawnscope.comm.ranks/2), as `comm ranks --json` writes it."""
        return analyze_job(self.traces, self.readers, self.scheduler, self.timeout_s, self.step_range)

    @property
    def ranks(self) -> list[dict]:
        """Per rank, in rank order: its file, calls, communication and exposed communication, GPU time, steps."""
        return self.report["ranks"]

    @property
    def steps(self) -> list[dict]:
        """One row per rank and step: the rank's GPU time breakdown of that step (gpu_time, as `trace` shows)."""
        return [{"rank": r["rank"]} | st for r in self.ranks for st in r["steps"]]

    @property
    def straggler_rank(self) -> int | None:
        """The rank that caused the most start wait across matched collectives (None without any)."""
        return self.report["straggler_rank"]

    @property
    def stragglers(self) -> list[dict]:
        """Per rank: how often it was a matched collective's last to start and the wait that caused, most first."""
        rows = [{"rank": r["rank"], "times": r["times"], "wait_caused_ms": r["wait_caused_ms"]} for r in self.ranks]
        return sorted(rows, key=lambda r: (-r["wait_caused_ms"], r["rank"]))

    @property
    def collectives(self) -> list[dict]:
        """Per collective matched across ranks: its size, start skew and straggler rank."""
        return self.report["collectives"]

    @property
    def outliers(self) -> list[dict]:
        return self.report["outliers"]

    @property
    def slowest_step(self) -> dict | None:
        return self.report["slowest_step"]

    def table(self, name: str) -> list[dict]:
        """One of TABLES as a list of dicts; the ranks table without each rank's steps (the steps table)."""
        if name not in self.TABLES:
            raise unknown_table(name, self.TABLES, "a job")
        if name == "ranks":
            return [{k: v for k, v in r.items() if k not in ("steps", "outside_steps")} for r in self.ranks]
        if name == "failed":
            return list(self.report["failed"])
        return list(getattr(self, name))

    def __repr__(self) -> str:  # nothing read until a result is asked for
        state = f"{len(self.ranks)} ranks read" if "report" in self.__dict__ else "not read yet"
        return f"<Job of {', '.join(map(str, self.traces))} ({state})>"
