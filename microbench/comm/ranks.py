"""Traces of several ranks of one job: each rank reduced on its own to a small summary (its collective calls, its
GPU time breakdown per step), then the summaries matched across ranks: every collective call with its message
size, its algbw / busbw, the skew of its start and end across ranks and the straggler.

Communication is what the kernel rules call `comm` (microbench/data/kernel_rules.toml), never a name match of
this module's own. A call is the profiler's `nccl:<op>` annotation (its `Input Dims` / `Input type` give the
message size). Its GPU kernel is found through the launch (the timeline's correlation rule): the `comm`
kernel's launch -> the innermost `nccl:` annotation of the launching thread that contains it. Calls are
matched across ranks by collective (and message bytes, except all-to-all, whose sizes differ per rank) among
those whose kernels overlap in time (a collective cannot finish on one rank before it starts on another),
nearest end first; a sampled trace may hold a call on one rank only: it stays unmatched.

A matched call's time is the shortest of its kernels (the last rank to arrive waits for no one, so its
kernel time is the transfer); algbw = bytes / that time, busbw = algbw x the nccl-tests factor over the
group size. The straggler is the rank whose kernel started last; skew_us = latest - earliest start.
"""

from __future__ import annotations

import math
import os
import resource
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from microbench.core.errors import InputError
from microbench.core.ops.aten import element_bytes
from microbench.trace import gpu_time
from microbench.trace.analysis import read_trace
from microbench.trace.timeline import CPU_RANGE, KERNEL, NO_ID, Timeline

from .busbw import bus_factor, canonical_op

SIZE_SYMMETRIC = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce")
BUS_OPS = ("allreduce", "allgather", "reducescatter", "broadcast", "alltoall")
STEP_FIELDS = ("name", "wall_us", "kernel_count") + gpu_time.FIELDS


@dataclass
class Call:
    rank: int
    op: str
    name: str
    bytes: int | None
    group_size: int | None  # None: neither the trace's distributedInfo nor the call records it
    cpu_ts: float
    kernel_ts: float | None = None
    kernel_end: float | None = None

    @property
    def kernel_us(self) -> float | None:
        return None if self.kernel_ts is None else self.kernel_end - self.kernel_ts


@dataclass
class RankSummary:
    """What one worker returns for one rank: small (calls and per-step numbers), never the rank's events."""

    path: Path
    rank: int
    world_size: int | None
    backend: str | None = None
    file_bytes: int = 0
    trace_bytes: int = 0  # decompressed (gzip's own record of it), else the file's size
    calls: list[Call] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)  # per step: STEP_FIELDS
    outside_steps: dict = field(default_factory=dict)  # gpu_time's breakdown of the activity outside the steps
    whole: dict = field(default_factory=dict)  # gpu_time.breakdown over the whole trace
    comm_us: float = 0.0  # |U(comm kernels)|
    comm_kernels: int = 0
    unlinked_kernels: int = 0
    gpu_first_us: float | None = None  # the first and last GPU activity on the trace's clock
    gpu_last_us: float | None = None
    read_s: float = 0.0  # wall seconds to read and reduce this rank
    cpu_s: float = 0.0  # CPU seconds of it (on a shared machine the steadier figure)
    worker: str = ""  # host:pid of the worker that did it
    worker_peak_rss_bytes: int = 0  # that worker's peak resident memory after this rank
    process: int | None = None  # the rank's process in a file of several (trace/processes.py), else None
    # what the caller's reader made of the same timeline while it was read (the trace command: this rank's trace
    # document, or its findings keys), so that no rank is read twice; None from the plain reader
    report: dict | None = None

    @property
    def exposed_comm_us(self) -> float:
        return self.whole.get("exposed_comm_us", 0.0)

    @property
    def span_us(self) -> float:
        return self.whole.get("gpu_span_us", 0.0)


def _message(tl: Timeline, row: int, path: Path) -> int | None:
    r = tl.ranges
    dims = tl.arg_values[r.input_dims[row]] if r.input_dims[row] != NO_ID else None
    types = tl.arg_values[r.input_types[row]] if r.input_types[row] != NO_ID else None
    if not dims or not isinstance(dims, list) or not isinstance(dims[0], list):
        return None
    if not all(isinstance(d, int) and not isinstance(d, bool) for d in dims[0]):
        raise InputError(
            path, "expected integer dimensions", key=f"{tl.names[r.name[row]]}.args.Input Dims", value=dims[0]
        )
    size = element_bytes((types or [None])[0]) if isinstance(types, list) else None
    return math.prod(dims[0]) * size if size else None


def _group_size(tl: Timeline, row: int, world: int | None) -> int | None:
    """All-gather: output / input elements of the enclosing c10d op; otherwise the recorded group size, else the
    world size; None where the trace says neither (a merged file of ranks keeps no distributedInfo)."""
    r, ops = tl.ranges, tl.cpu_ops
    dims = tl.arg_values[r.input_dims[row]] if r.input_dims[row] != NO_ID else [[]]
    ts = r.ts_us[row]
    for o in np.flatnonzero((ops.thread == r.thread[row]) & (ops.ts_us <= ts) & (ts <= ops.ts_us + ops.dur_us)):
        name = tl.names[ops.name[o]]
        od = tl.arg_values[ops.input_dims[o]] if ops.input_dims[o] != NO_ID else []
        if (
            name.startswith("c10d::")
            and "allgather" in name.replace("_", "")
            and len(od) >= 2
            and od[0]
            and od[1]
            and dims
            and dims[0]
        ):
            if math.prod(od[0]) % max(math.prod(od[1]), 1) == 0 and math.prod(od[1]) == math.prod(dims[0]):
                return math.prod(od[0]) // math.prod(od[1])
    recorded = _recorded_group_size(tl, row)
    return recorded or world or None


def _recorded_group_size(tl: Timeline, row: int) -> int:
    """The `Group size` PyTorch records on the collective's record_param_comms (2.1 and later) around this range,
    or on the one it follows on its thread: the process group's size where distributedInfo says nothing."""
    r, ops = tl.ranges, tl.cpu_ops
    ts = r.ts_us[row]
    mine = np.flatnonzero((ops.thread == r.thread[row]) & (ops.group_size > 0) & (ops.ts_us <= ts + r.dur_us[row]))
    if not len(mine):
        return 0
    around = mine[(ops.ts_us[mine] <= ts) & (ts <= ops.ts_us[mine] + ops.dur_us[mine])]
    pick = around[-1] if len(around) else mine[np.argmax(ops.ts_us[mine])]
    return int(ops.group_size[pick])


def _annotations(tl: Timeline) -> np.ndarray:
    ids = [i for i, s in enumerate(tl.names.strings) if isinstance(s, str) and s.startswith("nccl:")]
    return np.flatnonzero((tl.ranges.kind == CPU_RANGE) & np.isin(tl.ranges.name, ids))


def _link_kernels(tl: Timeline, anns: np.ndarray, calls: dict[int, Call], comm_rows: np.ndarray) -> int:
    """Give each comm kernel to the innermost annotation around its launch; returns the kernels left unlinked."""
    r = tl.ranges
    li = tl.launch_index()
    unlinked = 0
    for k in comm_rows:
        launch = li[k]
        if launch == NO_ID:
            unlinked += 1
            continue
        lts, lth = tl.launches.ts_us[launch], tl.launches.thread[launch]
        own = anns[(r.thread[anns] == lth) & (r.ts_us[anns] <= lts) & (lts <= r.ts_us[anns] + r.dur_us[anns])]
        if not len(own):
            unlinked += 1
            continue
        call = calls[int(own[np.argmax(r.ts_us[own])])]  # the innermost: latest start
        ts, end = float(tl.activities.ts_us[k]), float(tl.activities.end_us[k])
        call.kernel_ts = ts if call.kernel_ts is None else min(call.kernel_ts, ts)
        call.kernel_end = end if call.kernel_end is None else max(call.kernel_end, end)
    return unlinked


def calls_of(tl: Timeline, rank: int, world: int | None, path: Path) -> tuple[list[Call], int]:
    """A rank's collective calls (with their kernel times where linked) and the count of comm kernels that no
    call claims."""
    anns = _annotations(tl)
    calls: dict[int, Call] = {}
    for a in anns:
        name = tl.names[tl.ranges.name[a]]
        op = canonical_op(name)
        nbytes = _message(tl, int(a), path)
        group = _group_size(tl, int(a), world)
        if op == "allgather" and nbytes is not None and group:
            nbytes *= group  # nccl-tests counts the gathered output
        calls[int(a)] = Call(rank, op, name, nbytes, group, float(tl.ranges.ts_us[a]))
    comm_rows = np.flatnonzero(tl.class_mask("comm") & (tl.activities.category == KERNEL))
    unlinked = _link_kernels(tl, anns, calls, comm_rows)
    return sorted(calls.values(), key=lambda c: c.cpu_ts), unlinked


def _steps(tl: Timeline, step_range: str | None) -> tuple[list[dict], dict]:
    """The per-step GPU time breakdown of the trace report (the one definition), trimmed to its numbers, and
    what lies outside the steps (activity before the first step, between and after them)."""
    _, steps, outside = gpu_time.step_breakdowns(tl, step_range)
    return [{k: s.get(k) for k in STEP_FIELDS} for s in steps], outside


def _trace_bytes(path: Path) -> int:
    """The decompressed size of a gzip file from its trailer (modulo 4 GiB, as gzip records it), else the size."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b" or size < 18:
            return size
        f.seek(-4, 2)
        return int.from_bytes(f.read(4), "little")


def _count(info: dict, key: str, path: Path) -> int | None:
    """distributedInfo's `key` as a count, None where absent; anything but a JSON integer (a string "3", 3.0,
    true, -1) is refused by name: taken for another rank, a job's calls would be matched to the wrong rank."""
    value = info.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InputError(path, "expected a non-negative integer", key=f"distributedInfo.{key}", value=value)
    return value


def _rank_and_world(info: dict, path: Path, fallback_rank: int) -> tuple[int, int | None]:
    """The rank (the file's place among the job's files where the trace names none) and the world size."""
    rank, world = _count(info, "rank", path), _count(info, "world_size", path)
    if rank is not None and world is not None and rank >= world:
        raise InputError(path, f"rank {rank} is not below world_size {world}", key="distributedInfo.rank", value=rank)
    return (fallback_rank if rank is None else rank), world


def summarize_rank(path: str | Path, fallback_rank: int, step_range: str | None = None) -> RankSummary:
    """One rank's trace -> its summary. Runs in a worker: the timeline lives and dies here."""
    t0, c0 = time.perf_counter(), time.process_time()
    path = Path(path)
    return summarize_timeline(read_trace(path), path, fallback_rank, step_range, t0, c0)


def summarize_timeline(
    tl: Timeline,
    path: Path,
    fallback_rank: int,
    step_range: str | None,
    t0: float | None = None,
    c0: float | None = None,
) -> RankSummary:
    """A rank's timeline, read at wall time t0 and CPU time c0 (perf_counter, process_time; default: now, for a
    rank cut from a file already read) -> its summary."""
    t0 = time.perf_counter() if t0 is None else t0
    c0 = time.process_time() if c0 is None else c0
    info = tl.distributed or {}
    rank, world = _rank_and_world(info, path, fallback_rank)
    if world is None and len(tl.cpu_ops) and tl.cpu_ops.group_size.max() > 0:
        world = int(tl.cpu_ops.group_size.max())  # no distributedInfo: the largest process group recorded
        rank = rank if rank < world else fallback_rank
    s = RankSummary(path, rank, world, info.get("backend"), path.stat().st_size, _trace_bytes(path))
    s.process = tl.meta.get("process")
    s.calls, s.unlinked_kernels = calls_of(tl, rank, world, path)
    origin = tl.meta.get("ts_origin_us", 0)  # the reader's times are relative to it; ranks meet on the clock's
    for c in s.calls:
        if c.kernel_ts is not None:
            c.kernel_ts, c.kernel_end = c.kernel_ts + origin, c.kernel_end + origin
    k = tl.activities
    comm = tl.class_mask("comm") & (k.category == KERNEL)
    s.comm_kernels, s.comm_us = int(comm.sum()), gpu_time.covered(k.ts_us[comm], k.end_us[comm])
    s.whole = gpu_time.breakdown(tl)
    s.steps, s.outside_steps = _steps(tl, step_range)
    if len(k):
        s.gpu_first_us, s.gpu_last_us = float(k.ts_us.min()) + origin, float(k.end_us.max()) + origin
    s.read_s, s.cpu_s = time.perf_counter() - t0, time.process_time() - c0
    s.worker = f"{os.uname().nodename}:{os.getpid()}"
    s.worker_peak_rss_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    return s


def _overlaps(a: Call, b: Call) -> bool:
    return a.kernel_ts < b.kernel_end and b.kernel_ts < a.kernel_end


def _same(a: Call, b: Call) -> bool:
    return a.op == b.op and (a.op not in SIZE_SYMMETRIC or a.bytes == b.bytes) and _overlaps(a, b)


def match(ranks: list[RankSummary]) -> list[list[Call]]:
    """Calls matched across all ranks (the first rank's calls as anchors), each call used once."""
    used: set[int] = set()
    by_op = [defaultdict(list) for _ in ranks]  # per rank: op -> its calls with a kernel
    for i, r in enumerate(ranks):
        for c in r.calls:
            if c.kernel_ts is not None:
                by_op[i][c.op].append(c)
    groups = []
    for anchor in (c for c in ranks[0].calls if c.kernel_ts is not None):
        group = [anchor]
        for other in by_op[1:]:
            cands = [c for c in other.get(anchor.op, ()) if id(c) not in used and _same(anchor, c)]
            if not cands:
                break
            group.append(min(cands, key=lambda c: abs(c.kernel_end - anchor.kernel_end)))
        if len(group) == len(ranks):
            used.update(id(c) for c in group)
            groups.append(group)
    return groups


def collective_record(group: list[Call]) -> dict:
    starts = {c.rank: c.kernel_ts for c in group}
    ends = {c.rank: c.kernel_end for c in group}
    fastest = min(group, key=lambda c: c.kernel_us)
    op, nbytes, n = group[0].op, group[0].bytes, group[0].group_size
    t_s = fastest.kernel_us / 1e6
    alg = nbytes / t_s / 1e9 if nbytes and t_s > 0 else None
    factor = bus_factor(op, n) if op in BUS_OPS and n else None
    skew_us = max(starts.values()) - min(starts.values())
    return {
        "op": op,
        "name": group[0].name,
        "bytes": {c.rank: c.bytes for c in group},
        "group_size": n,
        "time_ms": t_s * 1e3,
        "algbw_gbps": alg,
        "busbw_gbps": alg * factor if alg and factor else None,
        "skew_us": skew_us,
        "start_skew_ms": skew_us / 1e3,
        "end_skew_ms": (max(ends.values()) - min(ends.values())) / 1e3,
        "straggler_rank": max(starts, key=starts.get),
        "start_us": min(starts.values()),
        "kernel_ms": {c.rank: c.kernel_us / 1e3 for c in group},
    }
