"""The one place this package reads profiler traces: the project's typed timeline
(microbench.timeline.kineto.read), handed on as plain event records so the analyses stay small.

Each record: name, ts, dur (microseconds), cat (`kernel`, `cuda_runtime` for launches, `cpu_op`,
`user_annotation` for CPU ranges, `gpu_user_annotation`), tid (an id of the (pid, tid) pair, shared by
launches, operators and ranges; a kernel's stream for kernels) and args (correlation, Input Dims, Input type).
"""
from __future__ import annotations

from pathlib import Path

from microbench.timeline.model import CATEGORIES, CPU_RANGE, KERNEL, NO_ID


def _args(tl, dims: int, types: int) -> dict:
    out = {}
    if dims != NO_ID:
        out["Input Dims"] = tl.arg_values[dims]
    if types != NO_ID:
        out["Input type"] = tl.arg_values[types]
    return out


def read_events(path: str | Path, keep=lambda ev: True) -> tuple[list[dict], dict]:
    """(the trace's events that `keep` accepts, {"distributedInfo": ...} as the profiler recorded it)."""
    from microbench.timeline.kineto import read

    tl = read(path)
    events = []
    k = tl.kernels
    for n, ts, dur, cat, stream, corr, dev in zip(k.name.tolist(), k.ts_us.tolist(), k.dur_us.tolist(),
                                                  k.category.tolist(), k.stream.tolist(), k.correlation.tolist(),
                                                  k.device.tolist()):
        events.append({"name": tl.name(n), "ts": ts, "dur": dur, "cat": "kernel" if cat == KERNEL else
                       f"gpu_{CATEGORIES[cat]}", "tid": stream, "args": {"correlation": corr, "device": dev}})
    la = tl.launches
    for n, ts, dur, th, corr in zip(la.name.tolist(), la.ts_us.tolist(), la.dur_us.tolist(), la.thread.tolist(),
                                    la.correlation.tolist()):
        events.append({"name": tl.name(n), "ts": ts, "dur": dur, "cat": "cuda_runtime", "tid": th,
                       "args": {"correlation": corr}})
    for table, cat in ((tl.cpu_ops, None), (tl.ranges, "range")):
        kinds = table.kind.tolist() if cat else [None] * len(table)
        for n, ts, dur, th, dims, types, kind in zip(table.name.tolist(), table.ts_us.tolist(),
                                                     table.dur_us.tolist(), table.thread.tolist(),
                                                     table.input_dims.tolist(), table.input_types.tolist(), kinds):
            events.append({"name": tl.name(n), "ts": ts, "dur": dur, "tid": th, "args": _args(tl, dims, types),
                           "cat": "cpu_op" if kind is None else
                           ("user_annotation" if kind == CPU_RANGE else "gpu_user_annotation")})
    return [e for e in events if keep(e)], {"distributedInfo": dict(tl.distributed or {})}


def union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted disjoint intervals covering the given (start, end) pairs."""
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def length(intervals: list[tuple[float, float]]) -> float:
    return sum(e - s for s, e in intervals)


def intersect(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Intersection of two sorted disjoint interval lists."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def clip(intervals: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    return [(max(s, lo), min(e, hi)) for s, e in intervals if min(e, hi) > max(s, lo)]
