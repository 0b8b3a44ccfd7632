"""Trace metrics: each one function over a Timeline (microbench/trace/timeline.py), used by the trace report
(microbench/trace/analysis.py) and the step attribution (microbench/decompose/attribution.py) alike.
Definitions: docs/traces.md. Times are microseconds."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from microbench.trace.classify import class_set
from microbench.trace.timeline import CATEGORIES, EPS_US, GPU_RANGE, KERNEL, NO_ID, TC_VALUES, Timeline, Windows


def kernel_rows(tl: Timeline) -> np.ndarray:
    """The rows of `tl.activities` that are kernels (not memcpy / memset)."""
    return np.flatnonzero(tl.activities.category == KERNEL)


def kernel_time(tl: Timeline) -> tuple[int, float]:
    """Number of kernels and the sum of their durations."""
    rows = kernel_rows(tl)
    return len(rows), float(tl.activities.dur_us[rows].sum())


def time_by_class(tl: Timeline) -> dict[str, tuple[int, float]]:
    """Kernel class -> (kernels, time), largest time first."""
    rows = kernel_rows(tl)
    k = tl.activities
    counts = np.bincount(k.cls[rows], minlength=len(tl.classes))
    times = np.bincount(k.cls[rows], weights=k.dur_us[rows], minlength=len(tl.classes))
    out: dict[str, list] = {}
    for c, n, t in zip(tl.classes, counts, times):
        if n:
            acc = out.setdefault(c.cls, [0, 0.0])
            acc[0] += int(n)
            acc[1] += float(t)
    return {c: (n, t) for c, (n, t) in sorted(out.items(), key=lambda x: -x[1][1])}


def matrix_unit_time(tl: Timeline) -> dict[str, float]:
    """Kernel time by Tensor Core verdict: yes / no / unknown (the kernel rules' evidence)."""
    rows = kernel_rows(tl)
    t = np.bincount(tl.activities.tensor_cores[rows], weights=tl.activities.dur_us[rows], minlength=len(TC_VALUES))
    return {v: float(x) for v, x in zip(TC_VALUES, t)}


def matrix_unit_time_by_class(tl: Timeline) -> dict[str, float]:
    """Kernel class -> the time of its kernels whose verdict is yes: a class keeps its name rule's label (`gemm`,
    "other GEMM/conv") where an inference or counters put its kernels on Tensor Cores, so the class table says how
    much of each class the Tensor Core share holds."""
    rows = kernel_rows(tl)
    yes = rows[tl.activities.tensor_cores[rows] == TC_VALUES.index("yes")]
    times = np.bincount(tl.activities.cls[yes], weights=tl.activities.dur_us[yes], minlength=len(tl.classes))
    out: dict[str, float] = {}
    for c, t in zip(tl.classes, times):
        out[c.cls] = out.get(c.cls, 0.0) + float(t)
    return out


def matrix_unit_evidence_time(tl: Timeline, counter_settled: np.ndarray | None = None) -> dict[str, dict[str, float]]:
    """Kernel time by the evidence layer of its Tensor Core verdict (classify.EVIDENCE_LAYERS: counters where
    `counter_settled` marks the row, else its classification's basis: name rule, structure (inferred), ...),
    each split by verdict. Inferred time is this table's, never folded silently into a rule's."""
    rows = kernel_rows(tl)
    basis = (
        np.array([c.basis for c in tl.classes], dtype=object)[tl.activities.cls[rows]] if len(rows) else np.array([])
    )
    if counter_settled is not None and len(rows):
        basis = np.where(counter_settled[rows], "counters", basis)
    out: dict[str, dict[str, float]] = {}
    for layer in dict.fromkeys(basis.tolist()):
        sel = rows[basis == layer]
        t = np.bincount(tl.activities.tensor_cores[sel], weights=tl.activities.dur_us[sel], minlength=len(TC_VALUES))
        out[layer] = {v: float(x) for v, x in zip(TC_VALUES, t) if x}
    return out


def comm_time(tl: Timeline) -> float:
    """Kernel time in communication kernels (NCCL, RCCL, gloo)."""
    rows = kernel_rows(tl)
    return float(tl.activities.dur_us[rows][tl.class_mask("comm")[rows]].sum())


def copy_time(tl: Timeline) -> dict[str, tuple[int, float]]:
    """memcpy / memset activities: (count, time) each."""
    k = tl.activities
    return {
        CATEGORIES[c]: (int((k.category == c).sum()), float(k.dur_us[k.category == c].sum()))
        for c in range(1, len(CATEGORIES))
    }


def devices_with_kernels(tl: Timeline) -> list[int]:
    return sorted(int(d) for d in np.unique(tl.activities.device[kernel_rows(tl)]))


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted disjoint intervals covering the given ones."""
    if len(starts) == 0:
        return np.empty(0), np.empty(0)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], run_end[last]


def intersection_length(a_s, a_e, b_s, b_e) -> float:
    """Total length of the intersection of two sorted disjoint interval lists."""
    if len(a_s) == 0 or len(b_s) == 0:
        return 0.0
    # Each a-interval meets the b-intervals from the first ending after its start to the last starting
    # before its end; with both lists disjoint and sorted, clipping every pair in those ranges is exact.
    total = 0.0
    lo = np.searchsorted(b_e, a_s, "right")
    hi = np.searchsorted(b_s, a_e, "left")
    for i in np.flatnonzero(hi > lo):
        s = np.maximum(b_s[lo[i] : hi[i]], a_s[i])
        e = np.minimum(b_e[lo[i] : hi[i]], a_e[i])
        total += float(np.clip(e - s, 0, None).sum())
    return total


@dataclass
class WindowTotals:
    """Per window: the activities launched inside it, their summed duration, and the GPU span from the
    first one's start to the last one's end."""

    count: np.ndarray
    time_us: np.ndarray
    gpu_span_us: np.ndarray
    rows: list[np.ndarray]  # kernel rows per window


def in_windows(tl: Timeline, w: Windows, categories=(KERNEL,)) -> WindowTotals:
    """The window rule: an activity of `categories` belongs to every window of its launching process whose
    CPU time [ts, ts + dur + EPS_US] contains its launch (the runtime call with its correlation id), on any
    thread: the backward pass launches its kernels from autograd's threads, not from the thread that opened
    `## backward ##`. Activities without a launch belong to no window."""
    k = tl.activities
    launch_ts, launch_pid = tl.launch_time()
    sel = np.isin(k.category, categories) & ~np.isnan(launch_ts)
    count, time_us, span = np.zeros(len(w), dtype=np.int64), np.zeros(len(w)), np.zeros(len(w))
    rows_out = []
    by_pid: dict[int, tuple] = {}
    for j in range(len(w)):
        pid = int(w.pid[j])
        if pid not in by_pid:
            rows = np.flatnonzero(sel & (launch_pid == pid))
            rows = rows[np.argsort(launch_ts[rows], kind="stable")]
            by_pid[pid] = (rows, launch_ts[rows], np.concatenate([[0.0], np.cumsum(k.dur_us[rows])]))
        rows, t, csum = by_pid[pid]
        lo = np.searchsorted(t, w.ts_us[j], "left")
        hi = np.searchsorted(t, w.ts_us[j] + w.dur_us[j] + EPS_US, "right")
        count[j], time_us[j] = hi - lo, csum[hi] - csum[lo]
        if hi > lo:
            span[j] = k.end_us[rows[lo:hi]].max() - k.ts_us[rows[lo:hi]].min()
        rows_out.append(rows[lo:hi])
    return WindowTotals(count, time_us, span, rows_out)


def unlaunched_kernels(tl: Timeline) -> int:
    """Kernels whose launching runtime call is not in the trace (no matching correlation id)."""
    return int(((tl.launch_index() == NO_ID) & (tl.activities.category == KERNEL)).sum())


def annotation_times(tl: Timeline) -> list[dict]:
    """Per user annotation name (steps apart): calls, summed CPU duration, kernels launched inside its calls
    and their time (nested annotations each count their kernels), and the summed duration of the GPU-side
    annotation of that name where the profiler wrote one. Most kernel time first."""
    r = tl.ranges
    step_ids = np.unique(tl.ranges.name[tl.step_rows()])
    # a step with a GPU-side annotation of its name is listed too, with its own CPU calls, wall time and kernels
    # (the step table's numbers), never as 0 calls beside its GPU time
    step_ids = step_ids[~np.isin(step_ids, r.name[r.kind == GPU_RANGE])]
    cpu = np.flatnonzero((r.kind != GPU_RANGE) & ~np.isin(r.name, step_ids))
    tot = in_windows(tl, tl.windows(cpu))
    out: dict[str, dict] = {}
    for j, row in enumerate(cpu):  # trace order: ties in the sort below keep it
        name = tl.names[r.name[row]]
        a = out.setdefault(name, {"name": name, "calls": 0, "wall_us": 0.0, "kernel_count": 0, "kernel_time_us": 0.0})
        a["calls"] += 1
        a["wall_us"] += float(r.dur_us[row])
        a["kernel_count"] += int(tot.count[j])
        a["kernel_time_us"] += float(tot.time_us[j])
    for row in np.flatnonzero(r.kind == GPU_RANGE):
        name = tl.names[r.name[row]]
        a = out.setdefault(name, {"name": name, "calls": 0, "wall_us": 0.0, "kernel_count": 0, "kernel_time_us": 0.0})
        a["gpu_annotation_us"] = a.get("gpu_annotation_us", 0.0) + float(r.dur_us[row])
    return sorted(out.values(), key=lambda a: (-a["kernel_time_us"], -a["wall_us"]))


@dataclass
class KernelGroup:
    """One distinct kernel (name, device): its calls' durations and total."""

    name: str
    device: int
    cls: int  # index into Timeline.classes
    durations_us: np.ndarray
    total_us: float


def top_kernels(tl: Timeline) -> list[KernelGroup]:
    """Every distinct (kernel name, device), most total time first (ties: first seen first)."""
    rows = kernel_rows(tl)
    k = tl.activities
    if not len(rows):
        return []
    dev = k.device[rows].astype(np.int64)
    keys = k.name[rows].astype(np.int64) * (int(dev.max() - dev.min()) + 1) + (dev - dev.min())
    uniq, first, inv = np.unique(keys, return_index=True, return_inverse=True)
    bounds = np.cumsum(np.bincount(inv, minlength=len(uniq)))[:-1]
    durs = np.split(k.dur_us[rows][np.argsort(inv, kind="stable")], bounds)
    groups = sorted(zip(first, durs), key=lambda x: x[0])
    out = [
        KernelGroup(tl.names[k.name[rows[f]]], int(k.device[rows[f]]), int(k.cls[rows[f]]), d, float(d.sum()))
        for f, d in groups
    ]
    return sorted(out, key=lambda g: -g.total_us)


def matrix_flop_coverage(tl: Timeline, kernel_flops: np.ndarray) -> dict:
    """The matrix kernels' time (classes of kernel_rules.toml [class_sets] gemm) and the part of it in kernels
    that model FLOPs are attributed to (`kernel_flops`, per kernel row): the share of the matrix work that
    MFU, achieved TFLOP/s and the per-op totals can see."""
    gemm = [i for i, c in enumerate(tl.classes) if c.cls in class_set("gemm")]
    rows = np.flatnonzero((tl.activities.category == KERNEL) & np.isin(tl.activities.cls, gemm))
    total = float(tl.activities.dur_us[rows].sum())
    covered = float(tl.activities.dur_us[rows][kernel_flops[rows] > 0].sum()) if len(kernel_flops) else 0.0
    return {"matrix_kernel_time_us": total, "covered_us": covered, "share": covered / total if total > 0 else None}
