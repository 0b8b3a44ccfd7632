"""Attribute the time of profiled training steps to layers and phases, from a torch.profiler (Kineto)
Chrome trace.

What is counted (the profiled total), per step window (the `step` range, else `ProfilerStep#N`):
- GPU: the duration of every kernel, memcpy and memset whose launch (the CUDA/HIP runtime or driver call
  with the same correlation id) happened inside the window. Kernels on concurrent streams both count.
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
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from microbench.timeline.classify import classify_kernel, classify_operator
from microbench.core.errors import InputError

GPU_ACTIVITY = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH = ("cuda_runtime", "cuda_driver")
EVALUATE = "autograd::engine::evaluate_function: "
_EPS_US = 1e-3  # Kineto timestamps carry nanoseconds as fractions of a microsecond


def load_trace(path: str | Path) -> list[dict]:
    """The events of a Kineto trace (plain or gzip), through the trace reader's decoder and its errors."""
    from microbench.timeline.kineto import trace_events

    return trace_events(path)[0]


@dataclass
class Ev:
    name: str
    cat: str
    tid: object
    ts: float
    dur: float
    args: dict
    parent: int = -1
    children_us: float = 0.0

    @property
    def end(self) -> float:
        return self.ts + self.dur

    @property
    def mid(self) -> float:
        return self.ts + self.dur / 2


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

    def __init__(self, ranges: list[Ev]):
        self.ranges = sorted(ranges, key=lambda r: (r.ts, -r.dur))
        self.i = 0
        self.stack: list[Ev] = []

    def at(self, t: float) -> Ev | None:
        while self.i < len(self.ranges) and self.ranges[self.i].ts <= t:
            self.stack.append(self.ranges[self.i])
            self.i += 1
        while self.stack and self.stack[-1].end <= t:
            self.stack.pop()
        return self.stack[-1] if self.stack else None


def _windows(evs: list[Ev]) -> list[tuple[float, float]]:
    return sorted((e.ts, e.end) for e in evs)


def _window_index(windows: list[tuple[float, float]], t: float) -> int:
    i = bisect_right([w[0] for w in windows], t) - 1
    return i if i >= 0 and t <= windows[i][1] + _EPS_US else -1


def attribute(events: list[dict], *, layer_names: set[str] = frozenset(), seq_map: dict[int, str] | None = None,
              step_range: str = "step", phase_ranges: dict[str, str] | None = None) -> Attribution:
    """Buckets of time per (layer, phase) over the step windows of a Kineto trace's events.

    `phase_ranges` maps range names to phases (default: forward, backward, optimizer under their own
    names); `layer_names` are the names of the layer ranges; `seq_map` maps autograd sequence numbers to
    the layer whose forward created the node.
    """
    phase_ranges = phase_ranges or {p: p for p in ("forward", "backward", "optimizer")}
    seq_map = seq_map or {}
    ops_by_tid: dict[object, list[Ev]] = defaultdict(list)
    layer_by_tid: dict[object, list[Ev]] = defaultdict(list)
    steps, phases, gpu, launches = [], [], [], {}
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        cat = e.get("cat", "")
        ev = Ev(e.get("name", ""), cat, (e.get("pid"), e.get("tid")), float(e["ts"]), float(e["dur"]), e.get("args") or {})
        if cat == "cpu_op":
            ops_by_tid[ev.tid].append(ev)
        elif cat == "user_annotation":
            if ev.name == step_range:
                steps.append(ev)
            elif ev.name in phase_ranges:
                phases.append(ev)
            elif ev.name in layer_names:
                layer_by_tid[ev.tid].append(ev)
        elif cat in GPU_ACTIVITY:
            gpu.append(ev)
        elif cat in LAUNCH and "correlation" in ev.args:
            launches[ev.args["correlation"]] = ev
            ops_by_tid[ev.tid].append(ev)  # nests inside its operator: finds the launching op
    notes = []
    if not steps:
        steps = [Ev(e["name"], "", None, float(e["ts"]), float(e["dur"]), {}) for e in events
                 if e.get("ph") == "X" and e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")]
        if steps:
            notes.append(f"no {step_range!r} ranges: step windows are the profiler's ProfilerStep# ranges")
    if not steps:
        raise InputError(None, f"the trace has no {step_range!r} or ProfilerStep# ranges: cannot tell the steps apart")
    step_w = _windows(steps)
    phase_list = sorted(((p.ts, p.end, phase_ranges[p.name]) for p in phases))
    phase_starts = [p[0] for p in phase_list]

    def phase_at(t: float) -> str:
        i = bisect_right(phase_starts, t) - 1
        while i >= 0:  # phases do not nest; the last one started before t may have ended
            s, end, name = phase_list[i]
            if t <= end + _EPS_US:
                return name
            if end < t:
                break
            i -= 1
        return "step"

    # Operator trees per thread: parent links and self time.
    for tid, evs in ops_by_tid.items():
        evs.sort(key=lambda e: (e.ts, -e.dur))
        stack: list[int] = []
        for i, e in enumerate(evs):
            while stack and evs[stack[-1]].end <= e.ts + _EPS_US:
                stack.pop()
            if stack and e.end <= evs[stack[-1]].end + _EPS_US:
                e.parent = stack[-1]
                if e.cat == "cpu_op":
                    evs[stack[-1]].children_us += e.dur
            stack.append(i)

    # Where each operator goes: (step index, layer, phase, seq layer, hook layer).
    where: dict[int, tuple] = {}
    for tid, evs in ops_by_tid.items():
        ranges = _Innermost(layer_by_tid.get(tid, []))
        order = sorted(range(len(evs)), key=lambda i: evs[i].mid)
        for i in order:
            e = evs[i]
            step = _window_index(step_w, e.mid)
            phase = phase_at(e.mid)
            r = ranges.at(e.mid)
            hook_layer = r.name if r is not None else None
            seq_layer = None
            if phase == "backward":
                j = i
                while j >= 0 and not evs[j].name.startswith(EVALUATE):
                    j = evs[j].parent
                if j >= 0:
                    seq = evs[j].args.get("Sequence number")
                    if seq is not None:
                        seq_layer = seq_map.get(int(seq))
                layer = seq_layer or hook_layer
            elif phase == "forward":
                layer = hook_layer
            else:
                layer = None
            where[id(e)] = (step, layer if layer is not None else f"({phase})", phase, seq_layer, hook_layer)

    buckets: dict[tuple[str, str], Bucket] = {}
    att = Attribution("kernel" if gpu else "operator", len(step_w), buckets, [], 0.0, notes=notes)

    def add(step, layer, phase, seq_layer, hook_layer, us, name, cls, tc):
        b = buckets.get((layer, phase))
        if b is None:
            b = buckets[(layer, phase)] = Bucket(layer, phase, [StepPart() for _ in step_w])
        part = b.steps[step]
        part.us += us
        part.by_class[cls] += us
        part.tensor_cores[tc] += us
        b.items[name] += us
        if cls in ("gemm", "tc_gemm"):
            part.gemm_tensor_cores[tc] += us
            b.gemm_items[name] += us
        if phase == "backward" and seq_layer is not None:
            att.backward_seq_us += us
            if hook_layer is not None:
                att.backward_hook_us += us
                att.backward_agree_us += us if hook_layer == seq_layer else 0.0

    if gpu:
        by_ext = {e.args.get("External id"): e for evs in ops_by_tid.values() for e in evs if e.cat == "cpu_op"}
        for k in gpu:
            launch = launches.get(k.args.get("correlation"))
            op = None
            if launch is not None:
                evs = ops_by_tid[launch.tid]
                op = evs[launch.parent] if launch.parent >= 0 else launch
            elif k.args.get("External id") in by_ext:
                op = by_ext[k.args["External id"]]
            if op is not None:
                step, layer, phase, seq_layer, hook_layer = where[id(op)]
            else:  # no launch record: place the activity by its own start time
                step, phase = _window_index(step_w, k.ts), phase_at(k.ts)
                layer, seq_layer, hook_layer = f"({phase})", None, None
            if step < 0:
                att.outside_steps_us += k.dur
                continue
            c = classify_kernel(k.name)
            add(step, layer, phase, seq_layer, hook_layer, k.dur, k.name, c.cls, c.tensor_cores)
        att.total_per_step_us = gpu_total_us(gpu, launches, step_w)
    else:
        for evs in ops_by_tid.values():
            for e in evs:
                if e.cat != "cpu_op":
                    continue
                step, layer, phase, seq_layer, hook_layer = where[id(e)]
                self_us = max(0.0, e.dur - e.children_us)
                if step < 0:
                    att.outside_steps_us += self_us
                    continue
                c = classify_operator(e.name)
                add(step, layer, phase, seq_layer, hook_layer, self_us, e.name, c.cls, c.tensor_cores)
        att.total_per_step_us = cpu_total_us(ops_by_tid, step_w)
    return att


def cpu_total_us(ops_by_tid: dict, step_w) -> list[float]:
    """Per step: the summed duration of the outermost operators (equal to the sum of self times)."""
    out = [0.0] * len(step_w)
    for evs in ops_by_tid.values():
        for e in evs:
            if e.cat == "cpu_op" and e.parent < 0 and (i := _window_index(step_w, e.mid)) >= 0:
                out[i] += e.dur
    return out


def gpu_total_us(gpu: list[Ev], launches: dict, step_w) -> list[float]:
    """Per step: the summed duration of the kernels, memcpys and memsets launched inside it."""
    out = [0.0] * len(step_w)
    for k in gpu:
        launch = launches.get(k.args.get("correlation"))
        if (i := _window_index(step_w, launch.ts if launch is not None else k.ts)) >= 0:
            out[i] += k.dur
    return out
