"""Kernels launched from CUDA / HIP graphs. A graph replay is one `cudaGraphLaunch` / `hipGraphLaunch` call on the
CPU and many kernels on the GPU, all carrying the launch's correlation id; the timeline keeps each kernel as its own
row, so every table (classes, Tensor Cores, top kernels) counts them one by one. What a replay lacks is the
operator that issued each kernel: that happened once, when the graph was captured.

Given the trace of the capture (vLLM and SGLang record one), each replayed kernel is attributed to the operator
that captured it: the capture trace's kernel launches made between `*StreamBeginCapture` and `*StreamEndCapture`
(each launch names its kernel in `args.kernel`), in order, are aligned with a replay's kernels in start order,
matching kernel names (a replay runs its kernels in the order they were captured, for the one-stream graphs these
frameworks capture); a kernel whose name does not line up stays unattributed. The capturing operator is the
innermost CPU operator around the launch on its thread. Where the capture holds several graphs, each replay takes
the one its kernels match best.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from microbench.core.ops.aten import trace_work
from microbench.trace.timeline import KERNEL, NO_ID, Timeline

GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch", "cudaGraphLaunch_v10000")
CAPTURE_BEGIN = (
    "cudaStreamBeginCapture",
    "cudaStreamBeginCapture_v10000",
    "hipStreamBeginCapture",
    "cuStreamBeginCapture",
    "cudaStreamBeginCaptureToGraph",
    "hipStreamBeginCaptureToGraph",
)
CAPTURE_END = ("cudaStreamEndCapture", "cudaStreamEndCapture_v10000", "hipStreamEndCapture", "cuStreamEndCapture")


@dataclass
class CapturedLaunch:
    kernel: str
    op: str | None  # the innermost CPU operator around the launch
    op_row: int  # its row in the capture's cpu_ops, NO_ID for none


@dataclass
class GraphKernels:
    """Per kernel row of the replay timeline: whether a graph launched it, and the captured launch it matched."""

    mask: np.ndarray  # bool per kernel row: launched by a graph launch
    launches: int  # graph launch calls that launched kernels
    captured: dict[int, CapturedLaunch] = field(default_factory=dict)  # kernel row -> its captured launch
    captures: int = 0  # graphs found in the capture trace
    notes: list[str] = field(default_factory=list)


def graph_kernel_mask(tl: Timeline) -> np.ndarray:
    """Kernel rows whose launch is a graph launch."""
    ids = [tl.names.find(n) for n in GRAPH_LAUNCHES]
    ids = [i for i in ids if i != NO_ID]
    li = tl.launch_index()
    out = np.zeros(len(tl.activities), dtype=bool)
    if ids and len(li):
        linked = li != NO_ID
        out[linked] = np.isin(tl.launches.name[li[linked]], ids)
    return out & (tl.activities.category == KERNEL)


def _innermost_op(cap: Timeline, thread: int, ts: float) -> int:
    ops = cap.cpu_ops
    inside = np.flatnonzero((ops.thread == thread) & (ops.ts_us <= ts) & (ts <= ops.ts_us + ops.dur_us))
    return int(inside[np.argmax(ops.ts_us[inside])]) if len(inside) else NO_ID


def captures_graphs(tl: Timeline) -> bool:
    """The trace records a graph capture (a *StreamBeginCapture call): the kernels it ran were its warm-up and
    capture, a one-off, not a step it repeats."""
    ids = [i for i in (tl.names.find(n) for n in CAPTURE_BEGIN) if i != NO_ID]
    return bool(ids) and bool(np.isin(tl.launches.name, ids).any())


def captured_graphs(cap: Timeline) -> list[list[CapturedLaunch]]:
    """Each capture (BeginCapture .. EndCapture on one thread) of the capture trace: its kernel launches in order."""
    la = cap.launches
    names = np.array([cap.names[n] for n in la.name], dtype=object)
    order = np.argsort(la.ts_us, kind="stable")
    graphs, open_at = [], {}
    for r in order:
        n, th = names[r], int(la.thread[r])
        if n in CAPTURE_BEGIN:
            open_at[th] = []
        elif n in CAPTURE_END and th in open_at:
            graphs.append(open_at.pop(th))
        elif th in open_at and la.kernel[r] != NO_ID:
            op = _innermost_op(cap, th, float(la.ts_us[r]))
            open_at[th].append(
                CapturedLaunch(cap.names[la.kernel[r]], cap.names[cap.cpu_ops.name[op]] if op != NO_ID else None, op)
            )
    return graphs


def align(replayed: list[str], captured: list[str]) -> list[int]:
    """For each replayed kernel name, the index of the captured launch it matches (-1 for none): in order, each
    captured launch used once, a name skipped over on either side when it does not line up."""
    out, j = [], 0
    for name in replayed:
        k = j
        while k < len(captured) and captured[k] != name:
            k += 1
        if k < len(captured):
            out.append(k)
            j = k + 1
        else:
            out.append(-1)
    return out


def graph_kernels(tl: Timeline, capture: Timeline | None = None) -> GraphKernels:
    """The graph-launched kernels of `tl` and, given the capture's timeline, the captured launch of each."""
    mask = graph_kernel_mask(tl)
    li = tl.launch_index()
    by_launch: dict[int, list[int]] = defaultdict(list)
    for r in np.flatnonzero(mask):
        by_launch[int(li[r])].append(int(r))
    out = GraphKernels(mask, len(by_launch))
    if capture is None:
        return out
    graphs = captured_graphs(capture)
    out.captures = len(graphs)
    if not graphs:
        out.notes.append(
            f"{capture.source}: no stream capture (BeginCapture .. EndCapture with kernel launches): "
            "graph kernels are not attributed to operators"
        )
        return out
    for rows in by_launch.values():
        rows.sort(key=lambda r: tl.activities.ts_us[r])
        names = [tl.names[tl.activities.name[r]] for r in rows]
        best = max(graphs, key=lambda g: sum(i >= 0 for i in align(names, [c.kernel for c in g])))
        for r, i in zip(rows, align(names, [c.kernel for c in best])):
            if i >= 0:
                out.captured[r] = best[i]
    return out


def graph_summary(tl: Timeline, gk: GraphKernels, with_capture: bool) -> dict:
    """summary keys: graph kernel count and time, and the share of that time attributed to a capturing operator
    (None without a capture trace)."""
    k = tl.activities
    t = float(k.dur_us[gk.mask].sum())
    rows = np.fromiter(gk.captured, dtype=np.int64, count=len(gk.captured))
    attributed = float(k.dur_us[rows].sum()) if len(rows) else 0.0
    return {
        "graph_launches": gk.launches,
        "graph_kernel_count": int(gk.mask.sum()),
        "graph_kernel_time_us": t,
        "graph_attributed_share": (attributed / t if t > 0 else None) if with_capture else None,
    }


def _arg(cap: Timeline, col: str, row: int):
    ids = getattr(cap.cpu_ops, col)
    return cap.arg_values[ids[row]] if row != NO_ID and ids[row] != NO_ID else None


def graph_ops(tl: Timeline, gk: GraphKernels, capture: Timeline) -> list[dict]:
    """Per capturing operator (name and recorded shapes): its calls replayed (one per graph launch that replayed
    any of its kernels), the kernels attributed to it, their time and classes, and for an operator with a work
    model (core.ops.aten.trace_work) its FLOPs and achieved TFLOP/s over those kernels; most time first."""
    li = tl.launch_index()
    groups: dict[tuple, dict] = {}
    seen: set[tuple[int, int]] = set()
    for r, c in gk.captured.items():
        dims = _arg(capture, "input_dims", c.op_row)
        key = (c.op or "(no operator)", repr(dims))
        g = groups.setdefault(
            key,
            {
                "op": key[0],
                "input_dims": dims,
                "calls": 0,
                "kernels": 0,
                "kernel_time_us": 0.0,
                "classes": {},
                "flops": None,
            },
        )
        g["kernels"] += 1
        g["kernel_time_us"] += float(tl.activities.dur_us[r])
        cls = tl.classes[tl.activities.cls[r]].cls
        g["classes"][cls] = g["classes"].get(cls, 0.0) + float(tl.activities.dur_us[r])
        if (c.op_row, int(li[r])) not in seen:  # one call of the operator per replay
            seen.add((c.op_row, int(li[r])))
            g["calls"] += 1
            work = (
                trace_work(
                    key[0], dims, _arg(capture, "input_types", c.op_row), _arg(capture, "concrete_inputs", c.op_row)
                )
                if c.op_row != NO_ID
                else None
            )
            if work is not None and work.flops:
                g["flops"] = (g["flops"] or 0) + work.flops
    for g in groups.values():
        t = g["kernel_time_us"]
        g["achieved_tflops"] = g["flops"] / (t * 1e6) if g["flops"] and t > 0 else None
    return sorted(groups.values(), key=lambda g: -g["kernel_time_us"])
