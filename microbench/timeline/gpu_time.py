"""Where a GPU's time goes in a window (a step, or the whole trace): the common definitions, as TraceLens' GPU
timeline and HTA's temporal breakdown use them, with kernel intervals merged across streams.

For one device, with U(.) the union of intervals (overlapping kernels on several streams count once):
- gpu_span_us: from the first to the last GPU activity (kernel, memcpy, memset) in the window;
- computation_us: |U(non-communication kernels)|;
- exposed_comm_us: |U(communication kernels) minus U(computation)|: communication nothing hides;
- exposed_memcpy_us: |U(memcpy, memset) minus U(all kernels)|;
- busy_us = computation + exposed_comm + exposed_memcpy = |U(all GPU activity)|;
- idle_us = gpu_span - busy.
Several devices: each quantity summed over devices (a trace is usually one rank, one device).
"""
from __future__ import annotations

import numpy as np

from microbench.timeline.metrics import union

KINDS = ("compute", "comm", "memcpy")
FIELDS = ("gpu_span_us", "busy_us", "computation_us", "exposed_comm_us", "exposed_memcpy_us", "idle_us")


def covered(starts: np.ndarray, ends: np.ndarray) -> float:
    s, e = union(starts, ends)
    return float((e - s).sum())


def breakdown(starts, ends, kinds, devices=None) -> dict[str, float]:
    """The fields above for activities given as parallel arrays: start and end (us), kind (0 compute kernel,
    1 communication kernel, 2 memcpy/memset) and device."""
    starts, ends = np.asarray(starts, dtype=float), np.asarray(ends, dtype=float)
    kinds = np.asarray(kinds, dtype=int)
    devices = np.zeros(len(starts), dtype=int) if devices is None else np.asarray(devices)
    out = dict.fromkeys(FIELDS, 0.0)
    for dev in np.unique(devices):
        on = devices == dev
        s, e, k = starts[on], ends[on], kinds[on]
        compute = covered(s[k == 0], e[k == 0])
        kernels = covered(s[k != 2], e[k != 2])
        busy = covered(s, e)
        out["gpu_span_us"] += float(e.max() - s.min()) if len(s) else 0.0
        out["computation_us"] += compute
        out["exposed_comm_us"] += kernels - compute  # |U(comm) - U(compute)| = |U(kernels)| - |U(compute)|
        out["exposed_memcpy_us"] += busy - kernels
        out["busy_us"] += busy
    out["idle_us"] = out["gpu_span_us"] - out["busy_us"]
    return out
