"""Where a GPU's time goes: the one definition of busy / computation / exposed communication / exposed memcpy /
idle, for the whole trace, per step, per device (a rank's trace is one device) and per window (a DDP bucket's
all-reduce). Every report that shows these numbers (the trace report, the DDP split, the multi-rank job view,
the step predictor) takes them from here. Definitions: docs/traces.md, "Where the GPU's time goes".

Activities are the timeline's `activities` rows: kernels, memcpys and memsets. Each has a kind:
- compute: a kernel whose rule class is not `comm`;
- comm: a kernel of the `comm` class (NCCL, RCCL, gloo, ...);
- memory: a memcpy or a memset. Memsets go here, with the copies, as HTA files them (its MEMORY kind); TraceLens
  counts them as computation. A memset sets memory and computes nothing; on the shared traces memsets are
  at most 0.12 % of GPU time (V100 ResNet: 585 us of 472,463 us busy).

For one device, with U(.) the union of intervals (overlapping activities on several streams count once):
- gpu_span_us: first activity start to last activity end;
- computation_us = |U(compute)|;
- exposed_comm_us = |U(comm) minus U(compute)|: communication nothing hides;
- exposed_memcpy_us = |U(memory) minus U(all kernels)|;
- busy_us = computation + exposed_comm + exposed_memcpy = |U(all activity)|;
- idle_us = gpu_span - busy;
- comm_us = |U(comm)| (hidden or not); overlapped_comm_us = comm_us - exposed_comm_us.
Several devices: each quantity summed over devices.

Per step (`per_step`), every activity belongs to exactly one step (`assign_steps`): the step whose CPU window
contains its launch (same correlation id, same process, the timeline's window rule); an activity without a
launch in the trace, the step whose GPU-side step annotation (Kineto's `gpu_user_annotation` ProfilerStep#N,
the span of the GPU work that step launched) holds its start, where the trace has them; else it is outside
the steps (before the first step, or after a step's end, or launched where the trace does not show), reported,
not dropped. An activity without a launch is never put into a step by its own start time alone: work still
running from before the profiled step (an MI300X trace whose first 463 kernels, 13 ms, have no launch) would
stretch the step's span and idle time past what the step launched. A step's numbers are then a partition of the device's timeline, so that
steps whose GPU work overlaps (pipelined runs: the next step's copies start while this one computes) count
nothing twice: each busy instant goes to the kind that wins it (compute, then comm, then memory) and to the
earliest step with an activity of that kind there; each idle instant to the earliest step whose own GPU span
(its first activity's start to its last one's end) contains it, else to no step (`between_steps`). So the
steps' busy, computation, ... sum exactly to the whole trace's minus what lies outside the steps, and their
idle never exceeds the whole trace's. A step's gpu_span_us is the time it owns: busy + idle (without overlap:
its first activity's start to its last one's end).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import tomllib

from microbench.core.resources import data_file
from microbench.trace.metrics import union
from microbench.trace.timeline import (
    CATEGORIES,
    CPU_RANGE,
    EPS_US,
    GPU_RANGE,
    KERNEL,
    MEMCPY,
    MEMSET,
    STEP_RE,
    Timeline,
    Windows,
)

COMPUTE, COMM, MEMORY = 0, 1, 2
KINDS = ("compute", "comm", "memory")
FIELDS = ("gpu_span_us", "busy_us", "computation_us", "exposed_comm_us", "exposed_memcpy_us", "idle_us")
COMM_FIELDS = ("comm_us", "overlapped_comm_us")
# assign_steps' codes for activities outside every step
BEFORE_FIRST_STEP, OUTSIDE_STEPS = -1, -2


def covered(starts: np.ndarray, ends: np.ndarray) -> float:
    """|U(intervals)|."""
    s, e = union(np.asarray(starts, dtype=float), np.asarray(ends, dtype=float))
    return float((e - s).sum())


def kinds(tl: Timeline, rows: np.ndarray | None = None) -> np.ndarray:
    """Each activity's kind (COMPUTE, COMM, MEMORY; module docstring), for `rows` of `tl.activities` (default all)."""
    rows = np.arange(len(tl.activities)) if rows is None else np.asarray(rows, dtype=np.int64)
    comm = tl.class_mask("comm")[rows]
    return np.where(tl.activities.category[rows] != KERNEL, MEMORY, np.where(comm, COMM, COMPUTE)).astype(np.int64)


def _empty() -> dict[str, float]:
    return dict.fromkeys(FIELDS + COMM_FIELDS, 0.0)


def of_intervals(starts, ends, kind, devices=None, window: tuple[float, float] | None = None) -> dict[str, float]:
    """The breakdown of activities given as parallel arrays (start and end in us, kind, device). With `window`
    (lo, hi): the activities clipped to it, and the window's length as the span (a DDP bucket's all-reduce, a
    CPU step of gloo collectives and operators)."""
    s, e = np.asarray(starts, dtype=float), np.asarray(ends, dtype=float)
    k = np.asarray(kind, dtype=np.int64)
    d = np.zeros(len(s), dtype=np.int64) if devices is None else np.asarray(devices, dtype=np.int64)
    if window is not None:
        s, e = np.clip(s, *window), np.clip(e, *window)
        keep = e > s
        s, e, k, d = s[keep], e[keep], k[keep], d[keep]
    out = _empty()
    for dev in np.unique(d):
        on = d == dev
        part = _one_device(s[on], e[on], k[on])
        if window is not None:
            part["gpu_span_us"] = float(window[1] - window[0])
            part["idle_us"] = part["gpu_span_us"] - part["busy_us"]
        _add(out, part)
    if window is not None and not len(d):
        out["gpu_span_us"] = out["idle_us"] = float(window[1] - window[0])
    return out


# A collective on a CPU (gloo, or the host side of NCCL): PyTorch's record_function titles of its work
CPU_COLLECTIVE_PREFIXES = ("gloo:", "nccl:")


def cpu_intervals(tl: Timeline, main_thread: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """A CPU-only trace of a data-parallel step (gloo: no kernels) as activities for `of_intervals`: the
    collectives (ranges or operators named gloo:* / nccl:*, on the process group's worker threads) as
    communication, the training thread's `aten::` operators as computation. Starts, ends, kinds and names."""
    parts = []
    for table, cpu in ((tl.ranges, tl.ranges.kind == CPU_RANGE), (tl.cpu_ops, np.ones(len(tl.cpu_ops), bool))):
        names = [tl.names[n] for n in table.name]
        is_comm = np.array([n.startswith(CPU_COLLECTIVE_PREFIXES) for n in names], dtype=bool) & cpu
        is_compute = (
            np.array([n.startswith("aten::") for n in names], dtype=bool)
            & (table.thread == main_thread)
            & (table is tl.cpu_ops)
        )
        for sel, kind in ((is_comm, COMM), (is_compute, COMPUTE)):
            rows = np.flatnonzero(sel)
            parts.append(
                (
                    table.ts_us[rows],
                    table.ts_us[rows] + table.dur_us[rows],
                    np.full(len(rows), kind),
                    [names[r] for r in rows],
                )
            )
    return (
        np.concatenate([p[0] for p in parts]),
        np.concatenate([p[1] for p in parts]),
        np.concatenate([p[2] for p in parts]),
        [n for p in parts for n in p[3]],
    )


def has_cpu_collectives(tl: Timeline) -> bool:
    """The trace records collectives on the CPU (a gloo job's rank, or NCCL's host-side ranges)."""
    return any(isinstance(n, str) and n.startswith(CPU_COLLECTIVE_PREFIXES) for n in tl.names.strings)


def _one_device(s: np.ndarray, e: np.ndarray, k: np.ndarray) -> dict[str, float]:
    compute = covered(s[k == COMPUTE], e[k == COMPUTE])
    kernels = covered(s[k != MEMORY], e[k != MEMORY])
    busy = covered(s, e)
    comm = covered(s[k == COMM], e[k == COMM])
    span = float(e.max() - s.min()) if len(s) else 0.0
    # |U(comm) - U(compute)| = |U(kernels)| - |U(compute)|
    return {
        "gpu_span_us": span,
        "busy_us": busy,
        "computation_us": compute,
        "exposed_comm_us": kernels - compute,
        "exposed_memcpy_us": busy - kernels,
        "idle_us": span - busy,
        "comm_us": comm,
        "overlapped_comm_us": comm - (kernels - compute),
    }


def _add(acc: dict, part: dict) -> None:
    for f, v in part.items():
        acc[f] = acc.get(f, 0.0) + v


def breakdown(
    tl: Timeline, rows: np.ndarray | None = None, window: tuple[float, float] | None = None
) -> dict[str, float]:
    """The breakdown (module docstring) of the activities `rows` of `tl.activities` (default: all of them, the
    whole trace), summed over devices; with `window` (lo, hi) clipped to it (see `of_intervals`)."""
    k = tl.activities
    rows = np.arange(len(k)) if rows is None else np.asarray(rows, dtype=np.int64)
    return of_intervals(k.ts_us[rows], k.end_us[rows], kinds(tl, rows), k.device[rows], window)


def several_devices(tl: Timeline) -> bool:
    """The trace's GPU activity is on more than one device (a process driving several GPUs): the sums over devices
    then add their spans, and each device's own breakdown is shown beside them."""
    return len(np.unique(tl.activities.device)) > 1


def per_device(tl: Timeline) -> dict[str, dict[str, float]]:
    """The whole trace's breakdown of each device with GPU activity (keyed by the device id as text, as JSON
    keys are), with its kernel count."""
    k = tl.activities
    return {
        str(d): {
            "kernel_count": int(((k.device == d) & (k.category == KERNEL)).sum()),
            **breakdown(tl, np.flatnonzero(k.device == d)),
        }
        for d in np.unique(k.device)
    }


@dataclass
class StepAssignment:
    """Per activity (row of `tl.activities`): its step (index into `windows`), or BEFORE_FIRST_STEP /
    OUTSIDE_STEPS; and whether it was placed by a GPU-side step annotation (no launch in the trace)."""

    windows: Windows
    step: np.ndarray
    by_gpu_annotation: np.ndarray


def _window_of(t: np.ndarray, pid: np.ndarray, w: Windows) -> np.ndarray:
    """Per time (and process): the latest-starting window of that process whose [ts, ts + dur + EPS_US]
    contains it; else BEFORE_FIRST_STEP when it precedes the process's first window, else OUTSIDE_STEPS."""
    out = np.full(len(t), OUTSIDE_STEPS, dtype=np.int64)
    for p in np.unique(w.pid):
        mine = np.flatnonzero(w.pid == p)
        mine = mine[np.argsort(w.ts_us[mine], kind="stable")]
        at = np.flatnonzero((pid == p) & ~np.isnan(t))
        j = np.searchsorted(w.ts_us[mine], t[at], "right") - 1
        inside = j >= 0
        inside[inside] = t[at][inside] <= (w.end_us[mine] + EPS_US)[j[inside]]
        out[at[inside]] = mine[j[inside]]
        out[at[j < 0]] = BEFORE_FIRST_STEP
    return out


def gpu_step_windows(tl: Timeline, windows: Windows) -> Windows:
    """The GPU-side annotations of the steps (Kineto's `gpu_user_annotation` named as a step), each given the
    index of its step in `windows` (by name; the first step of that name) as its `pid`; empty without any."""
    r = tl.ranges
    index = {}
    for j, n in enumerate(windows.names):
        index.setdefault(n, j)
    ids = {tl.names.find(n): j for n, j in index.items()}
    rows = np.flatnonzero((r.kind == GPU_RANGE) & np.isin(r.name, list(ids)))
    rows = rows[np.argsort(r.ts_us[rows], kind="stable")]
    step = np.array([ids[int(n)] for n in r.name[rows]], dtype=np.int64)
    return Windows([tl.names[n] for n in r.name[rows]], r.ts_us[rows], r.dur_us[rows], step)


def _gpu_window_of(t: np.ndarray, g: Windows) -> np.ndarray:
    """Per activity start: the step of the latest-starting GPU step annotation holding it, else OUTSIDE_STEPS."""
    out = np.full(len(t), OUTSIDE_STEPS, dtype=np.int64)
    if not len(g):
        return out
    j = np.searchsorted(g.ts_us, t, "right") - 1
    inside = j >= 0
    inside[inside] = t[inside] <= (g.end_us + EPS_US)[j[inside]]
    out[inside] = g.pid[j[inside]]
    return out


def assign_steps(tl: Timeline, windows: Windows) -> StepAssignment:
    """Every activity to exactly one step (module docstring): by its launch, else by the GPU-side step
    annotation holding it, else outside the steps."""
    k = tl.activities
    launch_ts, launch_pid = tl.launch_time()
    step = _window_of(launch_ts, launch_pid, windows)
    unlaunched = np.isnan(launch_ts)
    by_gpu = np.zeros(len(k), dtype=bool)
    if unlaunched.any() and len(windows):
        step[unlaunched] = _gpu_window_of(k.ts_us[unlaunched], gpu_step_windows(tl, windows))
        by_gpu[unlaunched] = step[unlaunched] >= 0
    return StepAssignment(windows, step, by_gpu)


def step_ends(tl: Timeline, windows: Windows) -> np.ndarray:
    """Each step's end: the later of its CPU window's end and the end of the last GPU activity it owns
    (assign_steps: by launch). A step whose CPU range closes before the GPU has finished its work (the
    launches are asynchronous) thus lasts until that work is done, as an event-timed step does."""
    a = assign_steps(tl, windows)
    ends = windows.end_us.astype(float).copy()
    mine = a.step >= 0
    if mine.any():
        np.maximum.at(ends, a.step[mine], tl.activities.end_us[mine])
    return ends


def _paint(seg_owner: np.ndarray, i0: np.ndarray, i1: np.ndarray, keys: np.ndarray, free=None) -> None:
    """Give each segment (of one device's elementary segments) the smallest key among the intervals [i0, i1)
    (in segment indices) covering it, where it has none yet (-1) and `free` allows."""
    order = np.argsort(keys, kind="stable")
    bounds = np.flatnonzero(np.diff(keys[order])) + 1
    for grp in np.split(order, bounds):
        if not len(grp):
            continue
        lo, hi = int(i0[grp].min()), int(i1[grp].max())
        if hi <= lo:
            continue
        diff = np.zeros(hi - lo + 1, dtype=np.int64)
        np.add.at(diff, i0[grp] - lo, 1)
        np.add.at(diff, i1[grp] - lo, -1)
        take = (np.cumsum(diff)[:-1] > 0) & (seg_owner[lo:hi] < 0)
        if free is not None:
            take &= free[lo:hi]
        seg_owner[lo:hi][take] = keys[grp[0]]


def _owned(s: np.ndarray, e: np.ndarray, k: np.ndarray, owner: np.ndarray, n_owners: int) -> np.ndarray:
    """One device's partition: an (n_owners + 1) x 5 array of the time each owner holds as computation, exposed
    comm, exposed memory, idle, and all comm (row n_owners: idle between the owners' spans)."""
    out = np.zeros((n_owners + 1, 5))
    if not len(s):
        return out
    b = np.unique(np.concatenate([s, e]))
    seg = np.diff(b)
    i0, i1 = np.searchsorted(b, s), np.searchsorted(b, e)
    busy = np.full(len(seg), -1, dtype=np.int64)
    _paint(busy, i0, i1, k * n_owners + owner)  # compute wins, then comm, then memory; then the earliest owner
    hit = busy >= 0
    out[:n_owners, :3] = np.bincount(busy[hit], weights=seg[hit], minlength=3 * n_owners).reshape(3, n_owners).T
    comm = np.full(len(seg), -1, dtype=np.int64)
    c = k == COMM
    _paint(comm, i0[c], i1[c], owner[c])
    out[:n_owners, 4] = np.bincount(comm[comm >= 0], weights=seg[comm >= 0], minlength=n_owners)
    idle = np.full(len(seg), -1, dtype=np.int64)
    span_lo, span_hi = np.full(n_owners, len(seg), dtype=np.int64), np.zeros(n_owners, dtype=np.int64)
    np.minimum.at(span_lo, owner, i0)  # each owner's own span, in segments (empty for an owner without any)
    np.maximum.at(span_hi, owner, i1)
    _paint(idle, span_lo, span_hi, np.arange(n_owners), free=~hit)
    gap = ~hit
    out[:n_owners, 3] = np.bincount(idle[gap & (idle >= 0)], weights=seg[gap & (idle >= 0)], minlength=n_owners)
    out[n_owners, 3] = float(seg[gap & (idle < 0)].sum())
    return out


def _as_fields(row: np.ndarray) -> dict[str, float]:
    busy = float(row[:3].sum())
    return {
        "gpu_span_us": busy + float(row[3]),
        "busy_us": busy,
        "computation_us": float(row[0]),
        "exposed_comm_us": float(row[1]),
        "exposed_memcpy_us": float(row[2]),
        "idle_us": float(row[3]),
        "comm_us": float(row[4]),
        "overlapped_comm_us": float(row[4] - row[1]),
    }


def per_step(tl: Timeline, windows: Windows) -> tuple[list[dict], dict]:
    """Each step's breakdown over its own activities (module docstring), in `windows` order, with its
    `kernel_count`, `kernel_time_us` and `gpu_time_us` (summed activity time); and what lies outside the steps:
    `before_first_step` and `outside_steps` (their own breakdowns and activity counts), `between_steps_idle_us`,
    `placed_by_gpu_annotation` (activities without a launch, placed by a GPU-side step annotation) and
    `unlaunched_outside_steps` (activities without a launch that no GPU-side step annotation holds)."""
    a = assign_steps(tl, windows)
    n_steps = len(windows)
    # owners: the steps in order, then before-the-first-step, then outside: steps win shared instants
    owner = np.where(a.step >= 0, a.step, np.where(a.step == BEFORE_FIRST_STEP, n_steps, n_steps + 1))
    k, kind = tl.activities, kinds(tl)
    total, parts = np.zeros((n_steps + 3, 5)), {}
    for dev in np.unique(k.device):
        on = k.device == dev
        parts[int(dev)] = _owned(k.ts_us[on], k.end_us[on], kind[on], owner[on], n_steps + 2)
        total += parts[int(dev)]
    is_kernel = k.category == KERNEL
    counts = np.bincount(owner, minlength=n_steps + 2)
    kernel_counts = np.bincount(owner[is_kernel], minlength=n_steps + 2)
    kernel_time = np.bincount(owner[is_kernel], weights=k.dur_us[is_kernel], minlength=n_steps + 2)
    gpu_time = np.bincount(owner, weights=k.dur_us, minlength=n_steps + 2)
    rows = [
        {
            "kernel_count": int(kernel_counts[j]),
            "kernel_time_us": float(kernel_time[j]),
            "gpu_time_us": float(gpu_time[j]),
            **_as_fields(total[j]),
        }
        for j in range(n_steps + 2)
    ]
    if several_devices(tl):  # the sums above add the devices' spans: each device's own, beside them
        per_dev = {d: np.bincount(owner[is_kernel & (k.device == d)], minlength=n_steps + 2) for d in parts}
        for j, row in enumerate(rows):
            row["by_device"] = {
                str(d): {"kernel_count": int(per_dev[d][j]), **_as_fields(p[j])}
                for d, p in parts.items()
                if p[j, :4].any()
            }
    outside = {
        "before_first_step": rows[n_steps] | {"activities": int(counts[n_steps])},
        "outside_steps": rows[n_steps + 1] | {"activities": int(counts[n_steps + 1])},
        "between_steps_idle_us": float(total[n_steps + 2, 3]),
        # the steps' CPU ranges, each instant once: their sum where steps overlap (integrity says so)
        "steps_cpu_us": covered(windows.ts_us, windows.end_us) if n_steps else 0.0,
        "placed_by_gpu_annotation": int(a.by_gpu_annotation.sum()),
        "unlaunched_outside_steps": int((np.isnan(tl.launch_time()[0]) & (a.step < 0)).sum()) if n_steps else 0,
    }
    return rows[:n_steps], outside


def step_breakdowns(tl: Timeline, step_range: str | None = None) -> tuple[Windows, list[dict], dict]:
    """`per_step` over the timeline's step windows (the one step rule, `Timeline.step_windows`), each step
    named and with its CPU duration (`wall_us`)."""
    return window_breakdowns(tl, tl.step_windows(step_range))


# The one window a trace without steps is read as (trace_window), by the findings' step rules.
WHOLE_TRACE = "whole trace"


def trace_window(tl: Timeline) -> Windows:
    """A trace without steps as one step: from its first launch of a GPU activity to the end of its last GPU
    activity (the time the GPU had work issued; the host's lead-in before it may be set-up), where one process
    launched them all (each rank of a job is its own step); empty otherwise."""
    ts, pid = tl.launch_time()
    launched = ~np.isnan(ts)
    if not launched.any() or len(np.unique(pid[launched])) > 1 or not len(tl.activities):
        return Windows([], np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64))
    lo, hi = float(ts[launched].min()), float(tl.activities.end_us.max())
    return Windows([WHOLE_TRACE], np.array([lo]), np.array([max(hi - lo, 0.0)]), pid[launched][:1].astype(np.int64))


def runtime_time_in(tl: Timeline, w: Windows, pattern: str) -> float:
    """The time the host spent in runtime / driver calls whose name matches `pattern`, inside the first window
    of `w` (their union, clipped to it)."""
    if not len(w):
        return 0.0
    la = tl.launches
    rows = np.flatnonzero(_name_mask(tl, la.name, re.compile(pattern)))
    lo, hi = float(w.ts_us[0]), float(w.end_us[0])
    s, e = np.clip(la.ts_us[rows], lo, hi), np.clip(la.ts_us[rows] + la.dur_us[rows], lo, hi)
    return covered(s, e)


def window_breakdowns(tl: Timeline, w: Windows) -> tuple[Windows, list[dict], dict]:
    """`per_step` and the host breakdown over windows `w`, each named and with its CPU duration (`wall_us`)."""
    steps, outside = per_step(tl, w)
    host = host_breakdown(tl, w)
    return (
        w,
        [{"name": w.names[j], "wall_us": float(w.dur_us[j]), **st, **host[j]} for j, st in enumerate(steps)],
        outside,
    )


# The step in the TensorBoard plugin's categories (docs/traces.md, "Where the host was"): each instant of the step
# goes to the first category active then, in this order; GPU first, so `runtime` ... `other` are the GPU's idle
# time, split by what the host was doing.
PLUGIN_CATEGORIES = ("kernel", "memcpy", "memset", "runtime", "dataloader", "cpu_exec", "other")
# The same idle split with synchronization apart (a synchronize is a runtime call, `.item()` a CPU operator).
HOST_CATEGORIES = ("sync", "setup", "runtime", "dataloader", "cpu_ops", "other")


def _host_rules() -> dict:
    host = tomllib.loads(data_file("findings.toml").read_text())["host"]
    return {k: re.compile("|".join(v)) for k, v in host.items()}


def _name_mask(tl: Timeline, ids: np.ndarray, rule) -> np.ndarray:
    hit = np.array([bool(isinstance(s, str) and rule.search(s)) for s in tl.names.strings], dtype=bool)
    return hit[ids] if len(ids) else np.zeros(0, dtype=bool)


def host_intervals(tl: Timeline) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The host's intervals (start, end in us) per kind: `sync_runtime` (runtime calls that block the host),
    `sync_ops` (`.item()`), `setup` (one-off set-up: JIT compilation, module loading, MPI_Init, in operators,
    CPU ranges such as NVTX, or runtime calls), `runtime` (every other runtime / driver call), `dataloader`
    (enumerate(DataLoader) operators or CPU ranges), `cpu_ops` (every other CPU operator). Rules:
    data/findings.toml [host]."""
    rules = _host_rules()
    la, ops, rg = tl.launches, tl.cpu_ops, tl.ranges
    sync_rt = _name_mask(tl, la.name, rules["sync_runtime"])
    sync_op = _name_mask(tl, ops.name, rules["sync_ops"])
    loader_op = _name_mask(tl, ops.name, rules["dataloader"])
    loader_rg = _name_mask(tl, rg.name, rules["dataloader"]) & (rg.kind == CPU_RANGE)
    setup = [_name_mask(tl, t.name, rules["setup"]) for t in (la, ops, rg)]
    setup[2] &= rg.kind == CPU_RANGE

    def iv(table, mask):
        return table.ts_us[mask], table.ts_us[mask] + table.dur_us[mask]

    return {
        "sync_runtime": iv(la, sync_rt),
        "sync_ops": iv(ops, sync_op),
        "setup": _cat(iv(la, setup[0]), iv(ops, setup[1]), iv(rg, setup[2])),
        "runtime": iv(la, ~sync_rt),
        "dataloader": _cat(iv(ops, loader_op), iv(rg, loader_rg)),
        "cpu_ops": iv(ops, ~sync_op & ~loader_op),
    }


def _covering(b: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Per elementary segment [b[i], b[i+1]): whether any interval [s, e) covers it."""
    diff = np.zeros(len(b), dtype=np.int64)
    keep = e > s
    np.add.at(diff, np.searchsorted(b, s[keep]), 1)
    np.add.at(diff, np.searchsorted(b, e[keep]), -1)
    return np.cumsum(diff)[:-1] > 0


def _by_start(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intervals sorted by start, with the running maximum of their ends: a window's intervals are then a slice
    (`_in_window`), not a pass over the whole trace per step."""
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    return s, e, (np.maximum.accumulate(e) if len(e) else e)


def _in_window(lo: float, hi: float, s: np.ndarray, e: np.ndarray, reach: np.ndarray):
    """The intervals (sorted by start, `reach` their running maximum end) that overlap (lo, hi), clipped to it:
    those before the first whose reach passes lo all end by lo; those from the first starting at hi on start after."""
    a, z = np.searchsorted(reach, lo, side="right"), np.searchsorted(s, hi, side="left")
    s, e = s[a:z], e[a:z]
    keep = e > lo
    return np.clip(s[keep], lo, hi), np.clip(e[keep], lo, hi)


def _split(lo: float, hi: float, layers: list[tuple[str, list[tuple]]]) -> dict[str, float]:
    """[lo, hi] split among `layers` (name, the `_by_start` interval sets it is made of), each instant to the first
    layer covering it, the rest to `other`: the parts add up to hi - lo exactly."""
    clipped = []
    for n, sets in layers:
        parts = [_in_window(lo, hi, *x) for x in sets]
        clipped.append((n, np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])))
    b = np.unique(np.concatenate([[lo, hi]] + [x for _, s, e in clipped for x in (s, e)]))
    seg = np.diff(b)
    free = np.ones(len(seg), dtype=bool)
    out = {}
    for n, s, e in clipped:
        take = _covering(b, s, e) & free
        out[n] = out.get(n, 0.0) + float(seg[take].sum())
        free &= ~take
    out["other"] = float(seg[free].sum())
    return out


def plugin_windows(tl: Timeline, windows: Windows) -> tuple[np.ndarray, np.ndarray]:
    """Each step's time as the TensorBoard plugin counts it (tb_plugin profiler/event_parser.py,
    `_update_steps_duration`): from its CPU start (not before the previous step's end) to the later of its CPU
    end and the end of the last GPU activity it launched."""
    lo, hi = windows.ts_us.astype(float), step_ends(tl, windows)
    for j in range(1, len(windows)):
        lo[j] = max(lo[j], hi[j - 1])
        hi[j] = max(hi[j], lo[j])
    return lo, hi


def host_breakdown(tl: Timeline, windows: Windows) -> list[dict]:
    """Per step: `breakdown_us` in the plugin's categories (PLUGIN_CATEGORIES, adding up to `breakdown_span_us`,
    the step's plugin window) and `idle_by_host_us`, the same window's GPU idle time by what the host was doing
    then (HOST_CATEGORIES; it adds up to runtime + dataloader + cpu_exec + other)."""
    k = tl.activities
    sets = {CATEGORIES[c]: (k.ts_us[k.category == c], k.end_us[k.category == c]) for c in (KERNEL, MEMCPY, MEMSET)}
    sets.update(host_intervals(tl))
    sets = {n: _by_start(s, e) for n, (s, e) in sets.items()}  # sorted once, shared by the layers made of them
    gpu = [sets["kernel"], sets["memcpy"], sets["memset"]]
    plugin = [(c, [x]) for c, x in zip(("kernel", "memcpy", "memset"), gpu)] + [
        ("runtime", [sets["sync_runtime"], sets["runtime"]]),
        ("dataloader", [sets["dataloader"]]),
        ("cpu_exec", [sets["sync_ops"], sets["cpu_ops"]]),
    ]
    user = _user_ranges(tl)
    idle_layers = [
        ("busy", gpu),
        ("sync", [sets["sync_runtime"], sets["sync_ops"]]),
        ("setup", [sets["setup"]]),  # one-off: before the per-step kinds, so no host finding counts it
        ("runtime", [sets["runtime"]]),
        ("dataloader", [sets["dataloader"]]),
        ("cpu_ops", [sets["cpu_ops"]]),
    ]
    out = []
    for lo, hi in zip(*plugin_windows(tl, windows)):
        parts = _split(lo, hi, plugin)
        idle = _split(lo, hi, idle_layers)
        idle.pop("busy")
        out.append(
            {
                "breakdown_span_us": float(hi - lo),
                "breakdown_us": {c: parts.get(c, 0.0) for c in PLUGIN_CATEGORIES},
                "idle_by_host_us": {c: idle.get(c, 0.0) for c in HOST_CATEGORIES},
                # the idle the host findings count: one-off set-up is no range's per-step idle
                "idle_in_ranges_us": _idle_in_ranges(tl, lo, hi, gpu + [sets["setup"]], user),
            }
        )
    return out


def _user_ranges(tl: Timeline) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The CPU ranges a user or library put there (record_function, NVTX), not the steps: start, end, name id."""
    rg = tl.ranges
    steps = np.array([isinstance(x, str) and bool(STEP_RE.match(x)) for x in tl.names.strings], dtype=bool)
    keep = (rg.kind == CPU_RANGE) & ~(steps[rg.name] if len(rg.name) else np.zeros(0, dtype=bool))
    return rg.ts_us[keep], rg.ts_us[keep] + rg.dur_us[keep], rg.name[keep]


def _idle_in_ranges(tl: Timeline, lo: float, hi: float, gpu: list, user, top: int = 3) -> dict[str, float]:
    """The GPU idle time of [lo, hi] (outside the intervals of `gpu`: the GPU's activity and the one-off set-up)
    inside each user range (NVTX, record_function), the `top` most: a range holding idle time names the host work
    behind it. A range inside another counts for both (nesting)."""
    rs, re_, names = user
    inside = (rs < hi) & (re_ > lo)
    if not inside.any():
        return {}
    bs = np.concatenate([_in_window(lo, hi, *g)[0] for g in gpu])
    be = np.concatenate([_in_window(lo, hi, *g)[1] for g in gpu])
    us, ue = union(bs, be)
    cum = np.concatenate([[0.0], np.cumsum(ue - us)])

    def idle_upto(x: np.ndarray) -> np.ndarray:  # idle time in [lo, x]
        if not len(us):
            return x - lo
        i = np.searchsorted(us, x, side="right")
        busy = cum[np.maximum(i - 1, 0)] + np.where(i > 0, np.clip(x - us[np.maximum(i - 1, 0)], 0, None), 0.0)
        busy = np.minimum(busy, cum[i])
        return (x - lo) - busy

    x0, x1 = np.clip(rs[inside], lo, hi), np.clip(re_[inside], lo, hi)
    held = idle_upto(x1) - idle_upto(x0)
    ids, inv = np.unique(names[inside], return_inverse=True)
    sums = np.bincount(inv, weights=held, minlength=len(ids))
    order = np.argsort(-sums, kind="stable")[:top]
    return {str(tl.names[int(ids[j])]): float(sums[j]) for j in order if sums[j] > 0}


def _cat(*pairs) -> tuple[np.ndarray, np.ndarray]:
    return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])
