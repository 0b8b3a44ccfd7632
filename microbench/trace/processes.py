"""Several processes in one file: ranks merged into one trace (TraceLens TraceFusion offsets each rank's pid and
correlation ids and keeps every event; a `cat` of rank traces; an Nsight Systems capture of a whole torchrun job).
Their steps interleave, so a step's figures would mix the ranks. A process is a rank here when it records its own
steps and launches its own kernels; `split` cuts the timeline into one timeline per such process, each read as a
rank's own trace (the job view: comm/job.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .timeline import GPU_RANGE, KERNEL, NO_ID, Timeline, Windows

# a GPU-side annotation goes to the rank that launched this share of the activity on its track, or to none: on a
# track several ranks share (a `cat` of traces that all wrote device 0 as pid 0) it would be any rank's
GPU_RANGE_OWNER_SHARE = 0.9


def ranks_in(tl: Timeline, windows: Windows) -> list[int]:
    """The processes (pid keys, ascending: TraceFusion's offsets keep the ranks' order) that record steps of their
    own and launch kernels of their own; empty where fewer than two do (one process's trace, whatever its
    devices). `windows`: the trace's steps (Timeline.step_windows)."""
    with_steps = {int(p) for p in np.unique(windows.pid)}
    if len(with_steps) < 2:
        return []
    kernels = np.flatnonzero(tl.activities.category == KERNEL)
    has, _, _, pid = tl.launch_of(kernels)
    launching = {int(p) for p in np.unique(pid[has])}
    found = sorted(with_steps & launching)
    return found if len(found) >= 2 else []


def _activity_owner(tl: Timeline) -> np.ndarray:
    """Per activity row, the process that launched it; an activity with no launch recorded (a copy the runtime
    started itself) goes to the process that launched most kernels on its device, -1 where none did."""
    has, _, _, pid = tl.launch_of(np.arange(len(tl.activities)))
    owner = np.where(has, pid, -1)
    device = tl.activities.device
    for d in np.unique(device[~has]):
        on = has & (device == d)
        if on.any():
            values, counts = np.unique(pid[on], return_counts=True)
            owner[~has & (device == d)] = values[np.argmax(counts)]
    return owner


def _range_owner(tl: Timeline, owner: np.ndarray) -> np.ndarray:
    """Per range row, its process: a CPU range its own pid; a GPU-side annotation (Kineto's gpu_user_annotation,
    on the GPU's track) the process that launched the activity on that track (GPU_RANGE_OWNER_SHARE), else -1."""
    r = tl.ranges
    out = np.where(r.kind == GPU_RANGE, NO_ID, r.pid)
    track = tl.activities.pid
    for g in np.unique(r.pid[r.kind == GPU_RANGE]):
        on = owner[(track == g) & (owner != NO_ID)]
        if len(on):
            values, counts = np.unique(on, return_counts=True)
            if counts.max() >= GPU_RANGE_OWNER_SHARE * len(on):
                out[(r.kind == GPU_RANGE) & (r.pid == g)] = values[np.argmax(counts)]
    return out


def _span(tl: Timeline) -> tuple[float, float] | None:
    starts, ends = [], []
    for t in (tl.activities, tl.launches, tl.cpu_ops, tl.ranges):
        if len(t):
            starts.append(float(t.ts_us.min()))
            ends.append(float((t.ts_us + t.dur_us).max()))
    return (min(starts), max(ends)) if starts else None


def split(tl: Timeline, step_range: str | None = None) -> list[tuple[int, Timeline]]:
    """One timeline per rank process (`ranks_in`), in pid order; empty where the file is one process's. Each holds
    that process's CPU operators, ranges and launches and the GPU activity it launched (the names, threads and
    kernel classifications are shared). The file's `distributedInfo` rank, if any, names one of them only: it is
    dropped, the world size kept."""
    pids = ranks_in(tl, tl.step_windows(step_range))
    if not pids:
        return []
    owner = _activity_owner(tl)
    range_owner = _range_owner(tl, owner)
    distributed = {k: v for k, v in tl.distributed.items() if k != "rank"}
    parts = []
    for p in pids:
        rows = np.flatnonzero(owner == p)
        new_row = {int(old): i for i, old in enumerate(rows)}
        activities = tl.activities.take(rows)
        devices = {int(d) for d in np.unique(activities.device)}
        part = replace(
            tl,
            activities=activities,
            launches=tl.launches.take(tl.launches.pid == p),
            cpu_ops=tl.cpu_ops.take(tl.cpu_ops.pid == p),
            ranges=tl.ranges.take(range_owner == p),
            device_properties={d: v for d, v in tl.device_properties.items() if d in devices},
            distributed=distributed,
            meta=tl.meta | {"process": p, "processes_in_file": len(pids)},
            counters={new_row[r]: c for r, c in tl.counters.items() if r in new_row},
            pm_samples={d: v for d, v in tl.pm_samples.items() if d in devices},
        )
        parts.append((p, replace(part, span_us=_span(part))))
    return parts
