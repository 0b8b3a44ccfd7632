"""Attribute the time of profiled training steps to layers and phases, over the timeline of a profiler trace
(microbench/trace: the same reader, correlation, step rule and window rule as `dawnscope trace`).

What is counted (the profiled total), per step window (the `step` range, else `ProfilerStep#N`: the
timeline's one step rule):
- GPU: the duration of every kernel, memcpy and memset whose launch (the CUDA/HIP runtime or driver call
  with the same correlation id) happened inside the window (the timeline's window rule,
  microbench.trace.metrics.in_windows). Kernels on concurrent streams both count; activities without a
  launch in the trace are in no step (a note says how much).
- CPU (no kernels): the self time of every operator inside the window (its duration minus that of the
  operators nested in it on the same thread), so that nested operators are not counted twice. The sum
  equals the summed duration of the outermost operators; the gaps between operators (Python, the hooks)
  are not operator time and are not counted.

Where each piece goes:
- a GPU kernel goes where its launching operator goes (correlation id -> runtime call -> the innermost
  operator around that call on the launching thread);
- phase: the phase range (`forward`, `backward`, `optimizer`) containing the operator in time, on any
  thread (backward may run on an autograd thread while the main thread waits inside `backward`); no phase:
  `step`;
- forward layer: the innermost layer range around the operator on its own thread;
- backward layer: the layer whose forward created the autograd node being evaluated: the `Sequence number`
  of the enclosing `autograd::engine::evaluate_function` operator, looked up in the sequence numbers each
  layer's forward created (models.ranges.StepRanges.seq_map). Nodes without a sequence number (gradient
  accumulation) fall back to the innermost backward layer range on the same thread;
- no layer: the phase's own bucket, `(forward)`, `(backward)`, `(optimizer)`, `(step)`. Nothing is dropped.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from microbench.core.errors import InputError
from microbench.trace.analysis import read_trace
from microbench.trace.classify import class_set, classify_operator
from microbench.trace.metrics import in_windows
from microbench.trace.timeline import CATEGORIES, CPU_RANGE, EPS_US, NO_ID, TC_VALUES, Timeline, Windows

EVALUATE = "autograd::engine::evaluate_function: "


def load_trace(path: str | Path) -> Timeline:
    """The timeline of a profiler trace (plain or gzip), through the trace reader and its one-line errors."""
    return read_trace(path)


@dataclass
class StepPart:
    """One bucket's time in one profiled step, by class and by Tensor Core verdict."""

    us: float = 0.0
    by_class: Counter = field(default_factory=Counter)  # class -> us
    tensor_cores: Counter = field(default_factory=Counter)  # yes / no / unknown -> us
    gemm_tensor_cores: Counter = field(default_factory=Counter)  # the same, GEMM/conv classes only


@dataclass
class Bucket:
    layer: str
    phase: str
    steps: list[StepPart]
    items: Counter = field(default_factory=Counter)  # kernel or operator name -> us, all steps
    gemm_items: Counter = field(default_factory=Counter)

    @property
    def per_step_us(self) -> list[float]:
        return [p.us for p in self.steps]

    @property
    def time_us(self) -> float:
        return sum(self.per_step_us)

    def _sum(self, attr: str) -> Counter:
        out: Counter = Counter()
        for p in self.steps:
            out.update(getattr(p, attr))
        return out

    @property
    def by_class(self) -> Counter:
        return self._sum("by_class")

    @property
    def tensor_cores(self) -> Counter:
        return self._sum("tensor_cores")


@dataclass
class Attribution:
    unit: str  # "kernel" (GPU) or "operator" (CPU)
    steps: int
    buckets: dict[tuple[str, str], Bucket]
    total_per_step_us: list[float]  # the profiled total of each step, counted independently of the buckets
    outside_steps_us: float  # activity in the trace outside every step window (not in the total)
    unlaunched_us: float = 0.0  # GPU activity whose launch is not in the trace: in no step (not in the total)
    backward_seq_us: float = 0.0  # backward time attributed by sequence number
    backward_hook_us: float = 0.0  # ... of which a backward layer range was also open
    backward_agree_us: float = 0.0  # ... of which that range was the same layer
    notes: list[str] = field(default_factory=list)

    @property
    def total_us(self) -> float:
        return sum(self.total_per_step_us)

    @property
    def attributed_us(self) -> float:
        return sum(b.time_us for b in self.buckets.values())

    def attributed_step_us(self, step: int) -> float:
        return sum(b.steps[step].us for b in self.buckets.values())

    def median_step(self) -> int:
        """The step whose profiled total is the median (the lower one of an even count): one disturbed step
        (another process, a page fault storm) does not move it."""
        order = sorted(range(self.steps), key=lambda i: self.total_per_step_us[i])
        return order[(self.steps - 1) // 2]


class _Innermost:
    """Innermost (latest-started, still open) range at increasing query times, for one thread."""

    def __init__(self, ranges: list[tuple[float, float, str]]):
        self.ranges = sorted(ranges, key=lambda r: (r[0], -(r[1] - r[0])))  # (ts, end, name)
        self.i = 0
        self.stack: list[tuple[float, float, str]] = []

    def at(self, t: float) -> str | None:
        while self.i < len(self.ranges) and self.ranges[self.i][0] <= t:
            self.stack.append(self.ranges[self.i])
            self.i += 1
        while self.stack and self.stack[-1][1] <= t:
            self.stack.pop()
        return self.stack[-1][2] if self.stack else None


def _window_index(starts: list[float], ends: list[float], t: float) -> int:
    """The window containing t (closed, EPS_US at the end: the timeline's window rule), -1 for none."""
    i = bisect_right(starts, t) - 1
    return i if i >= 0 and t <= ends[i] + EPS_US else -1


@dataclass
class _Items:
    """The CPU operators and the launches of a timeline in one list per thread, nested into trees: a launch
    nests inside the operator that made it. Index i < n_ops is cpu_ops row i; the rest are launches."""

    n_ops: int
    ts: list[float]
    dur: list[float]
    thread: list[int]
    name: list[int]
    parent: list[int]
    children_us: list[float]
    by_thread: dict[int, list[int]]  # item indices, sorted by (ts, -dur)

    @classmethod
    def of(cls, tl: Timeline) -> _Items:
        ops, launches = tl.cpu_ops, tl.launches
        ts = np.concatenate([ops.ts_us, launches.ts_us])
        dur = np.concatenate([ops.dur_us, launches.dur_us])
        thread = np.concatenate([ops.thread, launches.thread])
        order = np.lexsort((-dur, ts, thread)).tolist()
        it = cls(
            len(ops),
            ts.tolist(),
            dur.tolist(),
            thread.tolist(),
            np.concatenate([ops.name, launches.name]).tolist(),
            [-1] * len(ts),
            [0.0] * len(ts),
            {},
        )
        for i in order:
            it.by_thread.setdefault(it.thread[i], []).append(i)
        for items in it.by_thread.values():
            it._nest(items)
        return it

    def _nest(self, items: list[int]) -> None:
        """Parent links and the time of nested operators (for self time), on one thread."""
        ts, dur = self.ts, self.dur
        stack: list[int] = []
        for i in items:
            while stack and ts[stack[-1]] + dur[stack[-1]] <= ts[i] + EPS_US:
                stack.pop()
            if stack and ts[i] + dur[i] <= ts[stack[-1]] + dur[stack[-1]] + EPS_US:
                self.parent[i] = stack[-1]
                if i < self.n_ops:
                    self.children_us[stack[-1]] += dur[i]
            stack.append(i)


class _Places:
    """Where each item goes: (step index, layer, phase, sequence-number layer, hook layer)."""

    def __init__(
        self,
        tl: Timeline,
        items: _Items,
        steps: Windows,
        phase_ranges: dict[str, str],
        layer_names,
        seq_map: dict[int, str],
    ):
        self.tl, self.items, self.seq_map = tl, items, seq_map
        self.step_starts, self.step_ends = steps.ts_us.tolist(), steps.end_us.tolist()
        r = tl.ranges
        cpu = np.flatnonzero(r.kind == CPU_RANGE)
        names = [tl.names[n] for n in r.name[cpu]]
        self.phases = sorted(
            (float(r.ts_us[i]), float(r.ts_us[i] + r.dur_us[i]), phase_ranges[n])
            for i, n in zip(cpu, names)
            if n in phase_ranges
        )
        self.phase_starts = [p[0] for p in self.phases]
        self.layers: dict[int, list] = {}
        for i, n in zip(cpu, names):
            if n in layer_names:
                self.layers.setdefault(int(r.thread[i]), []).append(
                    (float(r.ts_us[i]), float(r.ts_us[i] + r.dur_us[i]), n)
                )
        self.is_eval = [isinstance(s, str) and s.startswith(EVALUATE) for s in tl.names.strings]
        self.where: dict[int, tuple] = {}
        for thread, its in items.by_thread.items():
            self._place_thread(thread, its)

    def phase_at(self, t: float) -> str:
        i = bisect_right(self.phase_starts, t) - 1
        while i >= 0:  # phases do not nest; the last one started before t may have ended
            s, end, name = self.phases[i]
            if t <= end + EPS_US:
                return name
            if end < t:
                break
            i -= 1
        return "step"

    def step_at(self, t: float) -> int:
        return _window_index(self.step_starts, self.step_ends, t)

    def _seq_layer(self, i: int) -> str | None:
        """The layer whose forward created the autograd node being evaluated around item i."""
        it = self.items
        while i >= 0 and not self.is_eval[it.name[i]]:
            i = it.parent[i]
        if i < 0 or i >= it.n_ops:
            return None
        seq = int(self.tl.cpu_ops.seq[i])
        return self.seq_map.get(seq) if seq != NO_ID else None

    def _place_thread(self, thread: int, its: list[int]) -> None:
        it = self.items
        ranges = _Innermost(self.layers.get(thread, []))
        for i in sorted(its, key=lambda i: it.ts[i] + it.dur[i] / 2):
            mid = it.ts[i] + it.dur[i] / 2
            phase = self.phase_at(mid)
            hook_layer = ranges.at(mid)
            seq_layer = None
            if phase == "backward":
                seq_layer = self._seq_layer(i)
                layer = seq_layer or hook_layer
            else:
                layer = hook_layer if phase == "forward" else None
            self.where[i] = (
                self.step_at(mid),
                layer if layer is not None else f"({phase})",
                phase,
                seq_layer,
                hook_layer,
            )


def attribute(
    tl: Timeline,
    *,
    layer_names: set[str] = frozenset(),
    seq_map: dict[int, str] | None = None,
    step_range: str = "step",
    phase_ranges: dict[str, str] | None = None,
) -> Attribution:
    """Buckets of time per (layer, phase) over the step windows of a trace's timeline.

    `phase_ranges` maps range names to phases (default: forward, backward, optimizer under their own
    names); `layer_names` are the names of the layer ranges; `seq_map` maps autograd sequence numbers to
    the layer whose forward created the node.
    """
    phase_ranges = phase_ranges or {p: p for p in ("forward", "backward", "optimizer")}
    steps = tl.step_windows(step_range)
    if not len(steps):
        raise InputError(None, f"the trace has no {step_range!r} or ProfilerStep# ranges: cannot tell the steps apart")
    items = _Items.of(tl)
    places = _Places(tl, items, steps, phase_ranges, layer_names, seq_map or {})
    gpu = len(tl.activities) > 0
    att = Attribution(
        "kernel" if gpu else "operator", len(steps), {}, [], 0.0, notes=[steps.note] if steps.note else []
    )
    if gpu:
        _attribute_gpu(tl, att, items, places, steps)
    else:
        _attribute_cpu(tl, att, items, places)
    return att


def _add(att: Attribution, where: tuple, us: float, name: str, cls: str, tc: str) -> None:
    step, layer, phase, seq_layer, hook_layer = where
    b = att.buckets.get((layer, phase))
    if b is None:
        b = att.buckets[(layer, phase)] = Bucket(layer, phase, [StepPart() for _ in range(att.steps)])
    part = b.steps[step]
    part.us += us
    part.by_class[cls] += us
    part.tensor_cores[tc] += us
    b.items[name] += us
    if cls in class_set("gemm"):
        part.gemm_tensor_cores[tc] += us
        b.gemm_items[name] += us
    if phase == "backward" and seq_layer is not None:
        att.backward_seq_us += us
        if hook_layer is not None:
            att.backward_hook_us += us
            att.backward_agree_us += us if hook_layer == seq_layer else 0.0


def _attribute_gpu(tl: Timeline, att: Attribution, items: _Items, places: _Places, steps: Windows) -> None:
    """A kernel, memcpy or memset goes to the step its launch falls in (the window rule), and to the layer
    and phase of the operator around its launch (or of the launch itself, outside every operator)."""
    k = tl.activities
    totals = in_windows(tl, steps, categories=range(len(CATEGORIES)))
    att.total_per_step_us = totals.time_us.tolist()
    step_of = np.full(len(k), -1, dtype=np.int64)
    for j, rows in enumerate(totals.rows):
        step_of[rows] = j
    launch = tl.launch_index()
    dur = k.dur_us.tolist()
    for row in range(len(k)):
        if launch[row] == NO_ID:
            att.unlaunched_us += dur[row]
            continue
        if step_of[row] < 0:
            att.outside_steps_us += dur[row]
            continue
        item = items.n_ops + int(launch[row])
        op = items.parent[item] if items.parent[item] >= 0 else item
        c = tl.classes[k.cls[row]]
        _add(
            att,
            (int(step_of[row]),) + places.where[op][1:],
            dur[row],
            tl.names[k.name[row]],
            c.cls,
            TC_VALUES[k.tensor_cores[row]],
        )
    if att.unlaunched_us:
        att.notes.append(
            f"{att.unlaunched_us:,.1f} us of GPU activity has no launching runtime call in the trace "
            "(no matching correlation id): in no step"
        )


def _attribute_cpu(tl: Timeline, att: Attribution, items: _Items, places: _Places) -> None:
    """No GPU activity: each operator's self time (its duration minus its nested operators'), placed by its
    midpoint; the per-step total is the summed duration of the outermost operators."""
    totals = [0.0] * att.steps
    for i in range(items.n_ops):
        where = places.where[i]
        step = where[0]
        if items.parent[i] < 0 and step >= 0:
            totals[step] += items.dur[i]
        self_us = max(0.0, items.dur[i] - items.children_us[i])
        if step < 0:
            att.outside_steps_us += self_us
            continue
        name = tl.names[items.name[i]]
        c = classify_operator(name)
        _add(att, where, self_us, name, c.cls, c.tensor_cores)
    att.total_per_step_us = totals
