"""One timeline of GPU work, whatever profiler wrote it: typed columns, not a dict per event.

A reader (microbench/trace/kineto.py; later Nsight Systems SQLite, Nsight Compute CSV) fills a
`TimelineBuilder` event by event and calls `build()`; every metric (microbench/trace/metrics.py) and the
step attribution (microbench/decompose/attribution.py) read the resulting `Timeline`.

Tables (each a set of numpy columns of equal length; names are ids into `Timeline.names`):
- `activities`: GPU activities: kernels, memcpys and memsets (`category`), with device, stream, the correlation
  id of the launching call and the kernel's class and Tensor Core verdict (microbench/trace/classify.py);
- `launches`: runtime / driver calls that carry a correlation id (cudaLaunchKernel, hipMemcpyAsync, ...);
- `cpu_ops`: framework operators (aten::mm, autograd::engine::evaluate_function: ...), with the argument
  columns attribution and the per-op model need (`seq`, `input_dims`, `input_types`: ids into
  `Timeline.arg_values`, -1 when absent);
- `ranges`: user annotations (record_function, NVTX) and profiler steps on the CPU side (`kind` CPU_RANGE)
  and their GPU-side copies (`kind` GPU_RANGE).
Times are microseconds (float64) on the trace's own clock; `pid` is a process key (the trace's pid, or a
negative key for a non-numeric one) and `thread` an id into `Timeline.threads` ((pid, tid) pairs).

The rules every consumer shares (docs/traces.md):
- correlation: a GPU activity's launch is the launch with the same correlation id (`launch_index`);
- steps: a named step range (`step_range`) where the trace has one, else the profiler's `ProfilerStep#N`
  ranges, whichever category the profiler filed them under (`step_windows`);
- windows: an activity belongs to a window (step, annotation) of a process when its launch started inside
  the window's CPU time, [ts, ts + dur + EPS_US], in that process, on any thread (`in_windows`).
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass, field, fields, replace

import numpy as np

from microbench.trace.classify import TENSOR_CORE_VALUES as TC_VALUES  # `activities.tensor_cores` indexes these
from microbench.trace.classify import Classification, classify_kernel

# Activity categories (the `category` column of `activities`).
KERNEL, MEMCPY, MEMSET = 0, 1, 2
CATEGORIES = ("kernel", "memcpy", "memset")
# Range kinds.
CPU_RANGE, GPU_RANGE = 0, 1
STEP_RE = re.compile(r"^ProfilerStep#\d+$")
NO_ID = -1
# Kineto writes nanoseconds as fractions of a microsecond: a launch at a window's very end is inside it.
EPS_US = 1e-3


class Names:
    """Interned strings: each distinct string kept once; tables hold its integer id."""

    def __init__(self):
        self.strings: list = []
        self._ids: dict = {}

    def id(self, s) -> int:
        i = self._ids.get(s)
        if i is None:
            i = self._ids[s] = len(self.strings)
            self.strings.append(s)
        return i

    def find(self, s) -> int:
        """The id of `s`, or NO_ID when no event carries it."""
        return self._ids.get(s, NO_ID)

    def __getitem__(self, i: int):
        return self.strings[i]

    def __len__(self) -> int:
        return len(self.strings)


@dataclass
class Table:
    """Columns of equal length. Subclasses declare their columns as fields with an `array` typecode in
    the field metadata; `Table.empty()` and the builder use it."""

    def __len__(self) -> int:
        return len(getattr(self, fields(self)[0].name))

    @classmethod
    def typecodes(cls) -> dict[str, str]:
        return {f.name: f.metadata["code"] for f in fields(cls)}

    @classmethod
    def from_arrays(cls, cols: dict[str, array]):
        return cls(
            **{
                k: np.frombuffer(a, dtype=a.typecode) if len(a) else np.empty(0, dtype=a.typecode)
                for k, a in cols.items()
            }
        )

    def take(self, mask_or_index):
        return type(self)(**{f.name: getattr(self, f.name)[mask_or_index] for f in fields(self)})


def _col(code: str):
    return field(metadata={"code": code})


def positions_by_key(keys: np.ndarray) -> dict[int, np.ndarray]:
    """For each distinct key >= 0 of `keys` (a kernel's owning operator, a call's step), the positions holding it,
    ascending: one sort, where a pass of `keys == k` per key was quadratic in a long trace (a 200 MB TorchRec
    trace spent 3.4 s of 24 there)."""
    keep = np.flatnonzero(keys >= 0)
    order = keep[np.argsort(keys[keep], kind="stable")]
    ordered = keys[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if len(order) else np.empty(0, dtype=np.int64)
    ends = np.r_[starts[1:], len(order)]
    return {int(ordered[a]): order[a:z] for a, z in zip(starts, ends)}


@dataclass
class Activities(Table):
    name: np.ndarray = _col("i")  # id into Timeline.names
    ts_us: np.ndarray = _col("d")
    dur_us: np.ndarray = _col("d")
    device: np.ndarray = _col("i")
    stream: np.ndarray = _col("q")
    correlation: np.ndarray = _col("q")  # NO_ID: none
    external_id: np.ndarray = _col("q")  # the framework op's External id (Kineto), NO_ID: none
    category: np.ndarray = _col("b")  # KERNEL, MEMCPY, MEMSET
    # the process key of the activity's own track (Kineto: the GPU's pid, offset per rank in a merged file of
    # ranks), NO_ID where the reader has none: what ties a GPU-side annotation to its rank (trace/processes.py)
    pid: np.ndarray = _col("q")
    cls: np.ndarray = _col("h")  # index into Timeline.classes
    tensor_cores: np.ndarray = _col("b")  # index into TC_VALUES

    @property
    def end_us(self) -> np.ndarray:
        return self.ts_us + self.dur_us


@dataclass
class Launches(Table):
    name: np.ndarray = _col("i")
    ts_us: np.ndarray = _col("d")
    dur_us: np.ndarray = _col("d")
    pid: np.ndarray = _col("q")
    thread: np.ndarray = _col("i")  # id into Timeline.threads
    correlation: np.ndarray = _col("q")
    # the kernel a launch names in its args (Kineto records it for launches captured into a CUDA / HIP graph,
    # where no kernel runs then): id into Timeline.names, NO_ID where absent (microbench/trace/graphs.py)
    kernel: np.ndarray = _col("i")


@dataclass
class CpuOps(Table):
    name: np.ndarray = _col("i")
    ts_us: np.ndarray = _col("d")
    dur_us: np.ndarray = _col("d")
    pid: np.ndarray = _col("q")
    thread: np.ndarray = _col("i")
    external_id: np.ndarray = _col("q")
    seq: np.ndarray = _col("q")  # autograd `Sequence number`, NO_ID: none
    input_dims: np.ndarray = _col("i")  # id into Timeline.arg_values, NO_ID: none
    input_types: np.ndarray = _col("i")
    concrete_inputs: np.ndarray = _col("i")  # `Concrete Inputs` (stride, padding, is_causal, ...), NO_ID: none
    input_strides: np.ndarray = _col("i")  # `Input Strides` (memory layout), NO_ID: none
    # `Group size` of a collective's record_param_comms (PyTorch 2.1 and later): its process group's ranks, 0: none
    group_size: np.ndarray = _col("i")


@dataclass
class Ranges(Table):
    name: np.ndarray = _col("i")
    ts_us: np.ndarray = _col("d")
    dur_us: np.ndarray = _col("d")
    pid: np.ndarray = _col("q")
    thread: np.ndarray = _col("i")
    kind: np.ndarray = _col("b")  # CPU_RANGE, GPU_RANGE
    # A collective's message size is on its `nccl:<op>` annotation only (microbench/comm/ranks.py)
    input_dims: np.ndarray = _col("i")  # id into Timeline.arg_values, NO_ID: none
    input_types: np.ndarray = _col("i")


@dataclass
class Windows:
    """Time windows of one process each (steps, one annotation's calls), sorted by start."""

    names: list[str]
    ts_us: np.ndarray
    dur_us: np.ndarray
    pid: np.ndarray
    note: str = ""

    def __len__(self) -> int:
        return len(self.names)

    @property
    def end_us(self) -> np.ndarray:
        return self.ts_us + self.dur_us


@dataclass
class Timeline:
    source: str  # the file read
    format: str  # "kineto", ...
    names: Names
    activities: Activities
    launches: Launches
    cpu_ops: CpuOps
    ranges: Ranges
    threads: Names  # (pid, tid) pairs
    arg_values: list  # decoded argument values (Input Dims, Input type), interned
    classes: tuple[Classification, ...]  # kernel classifications, indexed by activities.cls
    device_properties: dict[int, dict] = field(default_factory=dict)  # device id -> the profiler's entry
    distributed: dict = field(default_factory=dict)  # backend, rank, world_size, ...
    meta: dict = field(default_factory=dict)  # the trace's own header (traceName, schemaVersion, ...)
    span_us: tuple[float, float] | None = None  # earliest start, latest end of all recorded activity
    skipped: dict[str, int] = field(default_factory=dict)  # what the reader left out, and how many
    counters: dict[int, dict] = field(default_factory=dict)  # kernel row -> hardware counters (ncu, CUPTI ranges)
    # CUPTI PM sampling (Kineto's `hardware_counters` counter events): device -> metric -> (sample starts in us,
    # values), sorted by start; attributed to the kernels they measured by trace/counters.py pm_sample_counters
    pm_samples: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)

    def name(self, i: int) -> str:
        return self.names[i]

    @property
    def wall_span_us(self) -> float:
        return self.span_us[1] - self.span_us[0] if self.span_us and self.span_us[1] > self.span_us[0] else 0.0

    def class_names(self) -> np.ndarray:
        """Each kernel's class name (`tc_gemm`, `comm`, ...), via the interned classifications."""
        return np.array([c.cls for c in self.classes], dtype=object)[self.activities.cls]

    def class_mask(self, cls: str) -> np.ndarray:
        ids = [i for i, c in enumerate(self.classes) if c.cls == cls]
        return np.isin(self.activities.cls, ids)

    def with_tensor_cores(self, tensor_cores: np.ndarray) -> Timeline:
        """A view of this timeline whose activities carry other Tensor Core verdicts (hardware counters' where they
        settle it): every other column and table shared, this timeline unchanged."""
        return replace(self, activities=replace(self.activities, tensor_cores=tensor_cores))

    def with_classes(self, classes: tuple, cls: np.ndarray, tensor_cores: np.ndarray) -> Timeline:
        """This timeline with other kernel classifications (trace/launchers.py: by the launching operator)."""
        return replace(self, classes=classes, activities=replace(self.activities, cls=cls, tensor_cores=tensor_cores))

    def launch_index(self) -> np.ndarray:
        """Per kernel row, the row of its launch in `launches` (same correlation id; the first such launch
        in trace order), NO_ID where the trace has none."""
        if "launch_index" not in self._cache:
            out = np.full(len(self.activities), NO_ID, dtype=np.int64)
            corr = self.launches.correlation
            if len(corr) and len(self.activities):
                order = np.argsort(corr, kind="stable")
                sc = corr[order]
                k = self.activities.correlation
                pos = np.minimum(np.searchsorted(sc, k), len(sc) - 1)
                hit = (sc[pos] == k) & (k != NO_ID)
                out[hit] = order[pos[hit]]
            self._cache["launch_index"] = out
        return self._cache["launch_index"]

    def launch_time(self) -> tuple[np.ndarray, np.ndarray]:
        """Per kernel row: its launch's start (NaN without one) and process (0 without)."""
        has, ts, _, pid = self.launch_of(np.arange(len(self.activities)))
        return ts, np.where(has, pid, 0)  # a string pid's key is negative (TimelineBuilder.process): not a max

    def launch_of(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per activity row of `rows`: whether it has a launch, the launch's start (NaN without), its thread and its
        process (-1 without); also for a trace with kernels and no launches at all."""
        li = self.launch_index()[rows]
        has = li != NO_ID
        la, at = self.launches, li[has]
        ts = np.full(len(li), np.nan)
        thread, pid = np.full(len(li), -1, dtype=np.int64), np.full(len(li), -1, dtype=np.int64)
        ts[has], thread[has], pid[has] = la.ts_us[at], la.thread[at], la.pid[at]
        return has, ts, thread, pid

    def step_rows(self, step_range: str | None = None) -> np.ndarray:
        """The one step rule: the rows of the CPU ranges named `step_range` where there are any, else those
        of the profiler's ProfilerStep#N ranges; in step order. A range of no duration is no step (a trace whose
        writer lost the steps' end times): left out, and step_windows says so."""
        rows = self._step_candidates(step_range)
        return rows[self.ranges.dur_us[rows] > 0]

    def _step_candidates(self, step_range: str | None) -> np.ndarray:
        cpu = self.ranges.kind == CPU_RANGE
        if step_range is not None and (sid := self.names.find(step_range)) != NO_ID:
            sel = np.flatnonzero(cpu & (self.ranges.name == sid))
            if len(sel):
                return sel[np.argsort(self.ranges.ts_us[sel], kind="stable")]
        ids = [i for i, s in enumerate(self.names.strings) if isinstance(s, str) and STEP_RE.match(s)]
        sel = np.flatnonzero(cpu & np.isin(self.ranges.name, ids))
        return sel[np.argsort([int(self.names[n].split("#")[1]) for n in self.ranges.name[sel]], kind="stable")]

    def step_windows(self, step_range: str | None = None) -> Windows:
        """The step windows (`step_rows`), with a note where `step_range` was asked for but is missing, or where
        step ranges of no duration were left out."""
        w = self.windows(self.step_rows(step_range))
        notes = []
        if step_range is not None and len(w) and (not w.names or w.names[0] != step_range):
            notes.append(f"no {step_range!r} ranges: step windows are the profiler's ProfilerStep# ranges")
        empty = len(self._step_candidates(step_range)) - len(w)
        if empty:
            notes.append(
                f"{empty} step range{'s' if empty > 1 else ''} of 0 us left out (no end time recorded): "
                + ("the other steps are the steps" if len(w) else "the trace is read as having no steps")
            )
        if notes:
            w.note = "; ".join(notes)
        return w

    def windows(self, rows: np.ndarray) -> Windows:
        """Windows from rows of `ranges`, in the given order."""
        r = self.ranges
        return Windows([self.names[n] for n in r.name[rows]], r.ts_us[rows], r.dur_us[rows], r.pid[rows])

    def __post_init__(self):
        self._cache: dict = {}


class TimelineBuilder:
    """What a reader fills, one event at a time. Appends go to `array`s (no object per event); `build()`
    turns them into numpy columns and classifies each distinct kernel name once."""

    def __init__(self, source: str, fmt: str):
        self.source, self.format = source, fmt
        self.names = Names()
        self.threads = Names()
        self._processes = Names()
        self.arg_values = Names()  # keyed by the value's JSON text: equal values share an id
        self.cols = {
            t: {k: array(code) for k, code in t.typecodes().items()} for t in (Activities, Launches, CpuOps, Ranges)
        }
        self._rows: dict[type, list[tuple]] = {t: [] for t in self.cols}
        self.device_properties: dict[int, dict] = {}
        self.distributed: dict = {}
        self.meta: dict = {}
        self.span_lo, self.span_hi = float("inf"), float("-inf")
        self.skipped: dict[str, int] = {}
        self.counters: dict[int, dict] = {}
        self.pm_samples: dict[int, dict[str, tuple[array, array]]] = {}
        self._steps_seen: set = set()
        # flow events (start or end, the (pid, tid) key of their thread or stream, ts, id) and the activities and
        # runtime calls whose own args carry no correlation id, linked through them at build()
        self.flows = {k: array(c) for k, c in (("start", "b"), ("key", "q"), ("ts", "d"), ("id", "q"))}
        self.unlinked_activities: list[tuple[int, int, float]] = []
        self.unlinked_launches: list[tuple] = []

    def first_step(self, name: str, pid: int, ts: float) -> bool:
        """Whether a ProfilerStep#N range of this process and start is new (a profiler that files it under two
        categories writes it twice: one window, not two)."""
        key = (name, pid, ts)
        if key in self._steps_seen:
            return False
        self._steps_seen.add(key)
        return True

    def add_flow(self, start: bool, pid, tid, ts: float, flow_id: int) -> None:
        """A flow event (Chrome trace `ph` s / f): its id is the correlation id of the launch it starts at and
        the activity it ends at. Kept compactly; used only for events that have no correlation of their own."""
        for k, v in (("start", start), ("key", hash((str(pid), str(tid)))), ("ts", ts), ("id", flow_id)):
            self.flows[k].append(v)

    def add_unlinked_activity(self, pid, tid, ts: float) -> None:
        """The kernel row added last has no correlation id in its args: link it by the flow ending at it."""
        self.unlinked_activities.append(
            (len(self.cols[Activities]["name"]) + len(self._rows[Activities]) - 1, hash((str(pid), str(tid))), ts)
        )

    def add_unlinked_launch(
        self, raw_pid, raw_tid, name: str, ts: float, dur: float, pid: int, thread: int, kernel: str | None
    ) -> None:
        """A runtime call without a correlation id in its args: a launch if a flow starts at it."""
        self.unlinked_launches.append((hash((str(raw_pid), str(raw_tid))), name, ts, dur, pid, thread, kernel))

    def _link_by_flows(self) -> None:
        """Correlation ids from flow events where the events' args have none (the flow's start binds the runtime
        call at its thread and ts, its end the activity at its stream and ts); counted in meta["linked_by_flows"]."""
        if not (self.unlinked_activities or self.unlinked_launches) or not len(self.flows["id"]):
            return
        f = self.flows
        ends = {(k, t): i for s, k, t, i in zip(f["start"], f["key"], f["ts"], f["id"]) if not s}
        starts = {(k, t): i for s, k, t, i in zip(f["start"], f["key"], f["ts"], f["id"]) if s}
        corr, linked = self.cols[Activities]["correlation"], 0
        for row, key, ts in self.unlinked_activities:
            if (i := ends.get((key, ts))) is not None:
                corr[row], linked = i, linked + 1
        for key, name, ts, dur, pid, thread, kernel in self.unlinked_launches:
            if (i := starts.get((key, ts))) is not None:
                self.add_launch(name, ts, dur, pid, thread, i, kernel)
                linked += 1
        self.flush()
        self.meta["linked_by_flows"] = linked

    def unread_category(self, cat: str) -> None:
        """Count a complete event in a category no rule of the reader knows (`meta["unread_categories"]`)."""
        seen = self.meta.setdefault("unread_categories", {})
        seen[cat] = seen.get(cat, 0) + 1

    def skip(self, what: str) -> None:
        self.skipped[what] = self.skipped.get(what, 0) + 1

    def cover(self, ts: float, end: float) -> None:
        """Widen the traced span to include [ts, end]."""
        if ts < self.span_lo:
            self.span_lo = ts
        if end > self.span_hi:
            self.span_hi = end

    def process(self, pid) -> int:
        """A process key: the pid where it is a number; Chrome traces also allow strings, which get negative
        keys apart from every real pid."""
        if type(pid) is int:
            return pid
        return -(self._processes.id(str(pid)) + 1) * 1_000_000_007

    def thread(self, pid: int, tid) -> int:
        return self.threads.id((pid, tid))

    def arg_value(self, key) -> int:
        return self.arg_values.id(key)

    # The add_* methods keep a row as a tuple; `_flush` moves a table's rows into its arrays column by column
    # (array.extend over a column runs in C, and no object outlives a batch).
    def add_activity(
        self,
        name: str,
        ts: float,
        dur: float,
        device: int,
        stream: int,
        correlation: int,
        external_id: int,
        category: int,
        pid: int = NO_ID,
    ) -> None:
        self._rows[Activities].append(
            (self.names.id(name), ts, dur, device, stream, correlation, external_id, category, pid)
        )

    def add_launch(
        self, name: str, ts: float, dur: float, pid: int, thread: int, correlation: int, kernel: str | None = None
    ) -> None:
        self._rows[Launches].append(
            (self.names.id(name), ts, dur, pid, thread, correlation, NO_ID if kernel is None else self.names.id(kernel))
        )

    def add_cpu_op(
        self,
        name: str,
        ts: float,
        dur: float,
        pid: int,
        thread: int,
        external_id: int,
        seq: int,
        input_dims: int,
        input_types: int,
        concrete_inputs: int = NO_ID,
        input_strides: int = NO_ID,
        group_size: int = 0,
    ) -> None:
        self._rows[CpuOps].append(
            (
                self.names.id(name),
                ts,
                dur,
                pid,
                thread,
                external_id,
                seq,
                input_dims,
                input_types,
                concrete_inputs,
                input_strides,
                group_size,
            )
        )

    def add_counters(self, metrics: dict) -> None:
        """Hardware counters (metric name -> value) of the kernel row added last (Nsight Compute, CUPTI
        range profiler): the strongest Tensor Core evidence (microbench/trace/counters.py)."""
        self.counters[len(self.cols[Activities]["name"]) + len(self._rows[Activities]) - 1] = metrics

    def add_pm_sample(self, device: int, metric: str, ts: float, value: float) -> None:
        """One CUPTI PM-sampling value: `metric` on `device` over the sample that starts at `ts`."""
        times, values = self.pm_samples.setdefault(device, {}).setdefault(metric, (array("d"), array("d")))
        times.append(ts)
        values.append(value)

    def _pm_sample_columns(self) -> dict[int, dict[str, tuple[np.ndarray, np.ndarray]]]:
        out: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
        for device, metrics in self.pm_samples.items():
            for metric, (times, values) in metrics.items():
                t, v = np.frombuffer(times, dtype="d"), np.frombuffer(values, dtype="d")
                order = np.argsort(t, kind="stable")
                out.setdefault(device, {})[metric] = (t[order], v[order])
        return out

    def add_range(
        self,
        name: str,
        ts: float,
        dur: float,
        pid: int,
        thread: int,
        kind: int,
        input_dims: int = NO_ID,
        input_types: int = NO_ID,
    ) -> None:
        self._rows[Ranges].append((self.names.id(name), ts, dur, pid, thread, kind, input_dims, input_types))

    def flush(self) -> None:
        """Move the rows kept so far into the columns (a reader calls it after each batch of events)."""
        for table, rows in self._rows.items():
            if rows:
                for col, values in zip(self.cols[table].values(), zip(*rows)):
                    col.extend(values)
                rows.clear()

    def build(self, decode_arg=lambda key: key) -> Timeline:
        """The finished timeline. `decode_arg` turns an interned argument key back into its value."""
        self.flush()
        self._link_by_flows()
        c = self.cols[Activities]
        c["cls"], c["tensor_cores"] = array("h"), array("b")
        classes: list[Classification] = []
        cls_ids: dict[Classification, int] = {}
        per_name = np.zeros(len(self.names), dtype=np.int16)
        for i in set(c["name"]):
            cl = classify_kernel(self.names[i])
            per_name[i] = cls_ids.setdefault(cl, len(classes))
            if per_name[i] == len(classes):
                classes.append(cl)
        activities = Activities.from_arrays(c)
        activities.cls = per_name[activities.name] if len(activities) else np.empty(0, dtype=np.int16)
        tc = np.array([TC_VALUES.index(cl.tensor_cores) for cl in classes], dtype=np.int8)
        activities.tensor_cores = tc[activities.cls] if len(activities) else np.empty(0, dtype=np.int8)
        return Timeline(
            source=self.source,
            format=self.format,
            names=self.names,
            activities=activities,
            launches=Launches.from_arrays(self.cols[Launches]),
            cpu_ops=CpuOps.from_arrays(self.cols[CpuOps]),
            ranges=Ranges.from_arrays(self.cols[Ranges]),
            threads=self.threads,
            arg_values=[decode_arg(k) for k in self.arg_values.strings],
            classes=tuple(classes),
            device_properties=self.device_properties,
            distributed=self.distributed,
            meta=self.meta,
            span_us=(self.span_lo, self.span_hi) if self.span_hi >= self.span_lo else None,
            skipped=dict(self.skipped),
            counters=self.counters,
            pm_samples=self._pm_sample_columns(),
        )
