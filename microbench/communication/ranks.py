"""Traces of several ranks of one job, side by side: every collective call with its message size, its
algbw / busbw, the skew of its start and end across ranks, the straggler, and exposed communication per rank.

A call is the profiler's `nccl:<op>` annotation (its `Input Dims` / `Input type` give the message size). Its
GPU kernel is found through the launch: kernel -> its cudaLaunchKernel / hipLaunchKernel (same
`correlation`) -> the innermost `nccl:` annotation of the launching thread that contains the launch. Calls
are matched across ranks by collective (and message bytes, except all-to-all, whose sizes differ per rank)
among those whose kernels overlap in time (a collective cannot finish on one rank before it starts on
another), nearest end first; a sampled trace may hold a call on one rank only: it stays unmatched.

A matched call's time is the shortest of its kernels (the last rank to arrive waits for no one, so its
kernel time is the transfer); algbw = bytes / that time, busbw = algbw x the nccl-tests factor over the
group size. The straggler is the rank whose kernel started last; start skew = latest - earliest start.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from microbench.core.errors import InputError
from .busbw import bus_factor, canonical_op
from .events import intersect, length, read_events, union

ELEMENT_BYTES = {"float": 4, "c10::Half": 2, "c10::BFloat16": 2, "double": 8, "int": 4, "long": 8,
                 "long int": 8, "unsigned char": 1, "signed char": 1, "char": 1, "bool": 1, "short": 2,
                 "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1}
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "hipLaunchKernel", "hipExtLaunchKernel",
            "cuLaunchKernel", "cuLaunchKernelEx")
SIZE_SYMMETRIC = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce")


@dataclass
class Call:
    rank: int
    op: str
    name: str
    bytes: int | None
    group_size: int
    cpu_ts: float
    kernel_ts: float | None = None
    kernel_end: float | None = None

    @property
    def kernel_us(self) -> float | None:
        return None if self.kernel_ts is None else self.kernel_end - self.kernel_ts


@dataclass
class RankTrace:
    path: Path
    rank: int
    world_size: int | None
    calls: list[Call] = field(default_factory=list)
    comm_us: float = 0.0
    exposed_comm_us: float = 0.0
    span_us: float = 0.0
    comm_kernels: int = 0
    unlinked_kernels: int = 0


def _is_comm_kernel(name: str) -> bool:
    low = name.lower()
    return "nccl" in low or "rccl" in low


def _message(ev: dict, path: Path) -> int | None:
    args = ev.get("args") or {}
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not dims or not isinstance(dims, list) or not isinstance(dims[0], list):
        return None
    if not all(isinstance(d, int) and not isinstance(d, bool) for d in dims[0]):
        raise InputError(path, "expected integer dimensions", key=f"{ev.get('name')}.args.Input Dims", value=dims[0])
    size = ELEMENT_BYTES.get((types or [None])[0]) if isinstance(types, list) else None
    return math.prod(dims[0]) * size if size else None


def _group_size(ann: dict, outer: list[dict], world: int | None) -> int:
    """All-gather: output / input elements of the enclosing c10d op; otherwise the world size."""
    dims = (ann.get("args") or {}).get("Input Dims") or [[]]
    for op in outer:
        od = (op.get("args") or {}).get("Input Dims") or []
        if "allgather" in op["name"].replace("_", "") and len(od) >= 2 and od[0] and od[1] and dims[0]:
            if math.prod(od[0]) % max(math.prod(od[1]), 1) == 0 and math.prod(od[1]) == math.prod(dims[0]):
                return math.prod(od[0]) // math.prod(od[1])
    return world or 1


def _contains(ev: dict, ts: float) -> bool:
    return ev["ts"] <= ts <= ev["ts"] + ev.get("dur", 0)


def load_rank(path: str | Path, fallback_rank: int) -> RankTrace:
    """One rank's trace -> its collective calls (with kernels where linked) and its comm overlap."""
    path = Path(path)
    events, meta = read_events(path)
    info = meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else {}
    rt = RankTrace(path, int(info.get("rank", fallback_rank)), info.get("world_size"))
    anns = [e for e in events if str(e.get("name", "")).startswith("nccl:")]
    c10d = [e for e in events if str(e.get("name", "")).startswith("c10d::")]
    launches = {(e.get("args") or {}).get("correlation"): e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and e.get("name") in LAUNCHES}
    kernels = [e for e in events if e.get("cat") == "kernel"]
    by_ann: dict[int, Call] = {}
    for a in anns:
        outer = [c for c in c10d if c.get("tid") == a.get("tid") and _contains(c, a["ts"])]
        op = canonical_op(a["name"])
        nbytes = _message(a, path)
        group = _group_size(a, outer, rt.world_size)
        if op == "allgather" and nbytes is not None:
            nbytes *= group  # nccl-tests counts the gathered output
        by_ann[id(a)] = Call(rt.rank, op, a["name"], nbytes, group, a["ts"])
    comm_k = [k for k in kernels if _is_comm_kernel(str(k.get("name", "")))]
    for k in comm_k:
        launch = launches.get((k.get("args") or {}).get("correlation"))
        owners = [a for a in anns if launch and a.get("tid") == launch.get("tid") and _contains(a, launch["ts"])]
        if not owners:
            rt.unlinked_kernels += 1
            continue
        call = by_ann[id(max(owners, key=lambda a: a["ts"]))]  # the innermost: latest start
        call.kernel_ts = k["ts"] if call.kernel_ts is None else min(call.kernel_ts, k["ts"])
        call.kernel_end = max(call.kernel_end or 0.0, k["ts"] + k["dur"])
    rt.calls = sorted(by_ann.values(), key=lambda c: c.cpu_ts)
    comm = union([(k["ts"], k["ts"] + k["dur"]) for k in comm_k])
    other = union([(k["ts"], k["ts"] + k["dur"]) for k in kernels if not _is_comm_kernel(str(k.get("name", "")))])
    rt.comm_kernels, rt.comm_us = len(comm_k), length(comm)
    rt.exposed_comm_us = rt.comm_us - length(intersect(comm, other))
    if kernels:
        rt.span_us = max(k["ts"] + k["dur"] for k in kernels) - min(k["ts"] for k in kernels)
    return rt


def _overlaps(a: Call, b: Call) -> bool:
    return a.kernel_ts < b.kernel_end and b.kernel_ts < a.kernel_end


def _same(a: Call, b: Call) -> bool:
    return a.op == b.op and (a.op not in SIZE_SYMMETRIC or a.bytes == b.bytes) and _overlaps(a, b)


def match(ranks: list[RankTrace]) -> list[list[Call]]:
    """Calls matched across all ranks (the first rank's calls as anchors), each call used once."""
    used: set[int] = set()
    groups = []
    for anchor in (c for c in ranks[0].calls if c.kernel_ts is not None):
        group = [anchor]
        for other in ranks[1:]:
            cands = [c for c in other.calls if c.kernel_ts is not None and id(c) not in used and _same(anchor, c)]
            if not cands:
                break
            best = min(cands, key=lambda c: abs(c.kernel_end - anchor.kernel_end))
            group.append(best)
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
    factor = bus_factor(op, n) if op in ("allreduce", "allgather", "reducescatter", "broadcast", "alltoall") else None
    return {"op": op, "name": group[0].name, "bytes": {c.rank: c.bytes for c in group}, "group_size": n,
            "time_ms": t_s * 1e3, "algbw_gbps": alg, "busbw_gbps": alg * factor if alg and factor else None,
            "start_skew_ms": (max(starts.values()) - min(starts.values())) / 1e3,
            "end_skew_ms": (max(ends.values()) - min(ends.values())) / 1e3,
            "straggler_rank": max(starts, key=starts.get), "start_us": min(starts.values()),
            "kernel_ms": {c.rank: c.kernel_us / 1e3 for c in group}}


def _check_one_job(ranks: list[RankTrace]) -> None:
    """Traces that are not ranks of one job (no collective calls, different world sizes) are refused."""
    for r in ranks:
        if not r.calls:
            raise InputError(r.path, "no collective calls (nccl:* annotations): not a rank of a distributed job")
    sizes = {r.world_size for r in ranks}
    if len(sizes) > 1:
        raise InputError(ranks[0].path, "the traces are not ranks of one job (world sizes differ)",
                         key="distributedInfo.world_size", value=sorted(sizes, key=str))


def analyze(paths: list[str | Path]) -> dict:
    """The report of `comm ranks`."""
    if len(paths) < 2:
        raise InputError(None, "give the traces of at least two ranks of one job", key="traces")
    ranks = sorted((load_rank(p, i) for i, p in enumerate(paths)), key=lambda r: r.rank)
    if len({r.rank for r in ranks}) < len(ranks):
        raise InputError(paths[0], "two traces claim the same rank", key="distributedInfo.rank",
                         value=[r.rank for r in ranks])
    _check_one_job(ranks)
    groups = match(ranks)
    records = [collective_record(g) for g in groups]
    matched = {id(c) for g in groups for c in g}
    strag: dict[int, dict] = {r.rank: {"times": 0, "wait_caused_ms": 0.0} for r in ranks}
    for rec in records:
        strag[rec["straggler_rank"]]["times"] += 1
        strag[rec["straggler_rank"]]["wait_caused_ms"] += rec["start_skew_ms"]
    per_rank = [{"rank": r.rank, "file": str(r.path), "world_size": r.world_size, "calls": len(r.calls),
                 "calls_with_kernel": sum(c.kernel_ts is not None for c in r.calls),
                 "unmatched_calls": sum(c.kernel_ts is not None and id(c) not in matched for c in r.calls),
                 "comm_kernels": r.comm_kernels, "unlinked_comm_kernels": r.unlinked_kernels,
                 "comm_ms": r.comm_us / 1e3, "exposed_comm_ms": r.exposed_comm_us / 1e3,
                 "kernel_span_ms": r.span_us / 1e3,
                 "exposed_comm_share": r.exposed_comm_us / r.span_us if r.span_us else None, **strag[r.rank]}
                for r in ranks]
    worst = max(strag, key=lambda k: strag[k]["wait_caused_ms"]) if records else None
    return {"schema": "dawnscope.comm.ranks/1", "ranks": per_rank, "collectives": records,
            "straggler_rank": worst}
