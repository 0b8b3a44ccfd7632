"""python -m microbench.trace FILE [--json OUT]: what a PyTorch profiler (Kineto) trace says about the GPU.

Reads a trace as torch.profiler writes it (`.json` or `.json.gz`, from any machine, NVIDIA or AMD) and
reports: the device(s) and their datasheet peaks; total kernel time; time by kernel class; the share of
kernel time in Tensor Core / matrix-core kernels, each kernel with the rule that recognised it (or
`unknown`); the communication share of kernel time and the exposed (not overlapped) communication as a
share of the traced wall-clock span; the top kernels; time per user annotation and per ProfilerStep.

The `traceEvents` array is streamed: events are decoded one at a time from decompressed chunks, and only
per-kernel aggregates and the few numbers per kernel that the overlap and attribution need are kept (no
event dictionaries). Definitions (docs/traces.md):
- kernel time: the sum of `dur` over complete events of category `kernel` (GPU kernels; memcpy/memset
  activities are reported apart).
- traced wall-clock span: from the earliest start to the latest end of all complete (`ph: X`) events of the
  trace (CPU operators, runtime calls, annotations, kernels, copies), leaving out the profiler's own `Trace`
  envelope, which also covers its warm-up.
- exposed communication: per device, the union of the communication kernels' intervals minus its
  intersection with the union of all other kernels' intervals (any stream); summed over devices and divided
  by span x devices.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from array import array
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from microbench.timeline.classify import Classification, class_labels, classify_kernel
from microbench.core.errors import InputError
from microbench.core.jsonio import read_chunks

SCHEMA = "dawnscope.trace/1"
CHUNK_CHARS = 1 << 20
# One event (or one top-level value) larger than this is not something Kineto writes: refuse it rather
# than read a broken file into memory.
MAX_VALUE_CHARS = 64 * 2**20
STEP_RE = re.compile(r"^ProfilerStep#\d+$")
# Top-level keys worth keeping (all others are decoded and dropped).
META_KEYS = ("schemaVersion", "deviceProperties", "distributedInfo", "traceName", "displayTimeUnit",
             "baseTimeNanoseconds", "cuda_runtime_version", "cuda_driver_version", "cupti_version",
             "roctracer_version", "hip_runtime_version")
_WS = re.compile(r"[ \t\n\r]*")


class _EventStream:
    """The top level of a Kineto trace, decoded incrementally: metadata values whole, `traceEvents` one
    element at a time. Only the not yet decoded part of the current chunk stays in memory."""

    def __init__(self, path: Path):
        self.path = path
        self._chunks = read_chunks(path, CHUNK_CHARS)
        self._decoder = json.JSONDecoder()
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.line_base = 1  # line number of buf[0], for messages

    def _fill(self) -> bool:
        chunk = next(self._chunks, None)
        if chunk is None:
            self.eof = True
            return False
        self.line_base += self.buf.count("\n", 0, self.pos)
        self.buf = self.buf[self.pos:] + chunk
        self.pos = 0
        return True

    def _where(self) -> str:
        return f"line {self.line_base + self.buf.count(chr(10), 0, self.pos)}"

    def peek(self) -> str:
        """The next non-whitespace character, '' at the end of the file."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._fill():
                return ""

    def expect(self, chars: str, context: str) -> str:
        ch = self.peek()
        if ch == "":
            raise InputError(self.path, f"truncated JSON: the file ends {context}")
        if ch not in chars:
            want = " or ".join(repr(c) for c in chars)
            raise InputError(self.path, f"not valid JSON: expected {want} {context}, found {ch!r} at {self._where()}")
        self.pos += 1
        return ch

    def value(self, context: str):
        self.peek()
        while True:
            try:
                obj, end = self._decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as e:
                if not self.eof and len(self.buf) - self.pos <= MAX_VALUE_CHARS and self._fill():
                    continue
                if len(self.buf) - self.pos > MAX_VALUE_CHARS:
                    raise InputError(self.path, f"{context}: one value longer than {MAX_VALUE_CHARS >> 20} Mi "
                                                f"characters: not a trace we can read") from None
                rest = self.buf[e.pos:].strip()
                if self.eof and (not rest or e.msg.startswith("Unterminated string")):
                    raise InputError(self.path, f"truncated JSON: the file ends inside {context}") from None
                line = self.line_base + self.buf.count("\n", 0, e.pos)
                raise InputError(self.path, f"not valid JSON in {context}: {e.msg} at line {line}") from None
            except RecursionError:
                raise InputError(self.path, f"JSON nested too deeply ({context})") from None
            # A number that ends exactly at the end of the chunk may continue in the next one.
            if end == len(self.buf) and not self.eof and self._fill():
                continue
            self.pos = end
            return obj

    def read(self, on_event) -> dict:
        """Walk the top-level object; call on_event(event, index) for each traceEvents element; return the
        kept metadata."""
        first = self.peek()
        if first == "":
            raise InputError(self.path, "empty file (only whitespace)")
        if first == "[":
            raise InputError(self.path, "a JSON array at the top level: not a PyTorch profiler (Kineto) trace, "
                                        "which is an object with a traceEvents array")
        if first != "{":
            raise InputError(self.path, f"not JSON: starts with {first!r}, expected a Kineto trace object")
        self.pos += 1
        meta: dict = {}
        keys: list[str] = []
        n_events = None
        if self.peek() == "}":
            self.pos += 1
        else:
            while True:
                if self.peek() != '"':
                    self.expect('"', "for a key of the top-level object")
                key = self.value("a top-level key")
                keys.append(key)
                self.expect(":", f"after the top-level key {key!r}")
                if key == "traceEvents":
                    n_events = self._events(on_event)
                else:
                    v = self.value(f"the value of {key!r}")
                    if key in META_KEYS:
                        meta[key] = v
                if self.expect(",}", "inside the top-level object") == "}":
                    break
        if self.peek() != "":
            raise InputError(self.path, f"not valid JSON: extra data after the top-level object at {self._where()}")
        if n_events is None:
            shown = ", ".join(keys[:8]) + (", ..." if len(keys) > 8 else "")
            raise InputError(self.path, "not a PyTorch profiler (Kineto) trace: no traceEvents array "
                                        f"(top-level keys: {shown or 'none'})")
        return meta

    def _events(self, on_event) -> int:
        if self.peek() != "[":
            v = self.value("the value of 'traceEvents'")
            raise InputError(self.path, f"traceEvents is not an array of events (found {json_type(v)})")
        self.pos += 1
        i = 0
        if self.peek() == "]":
            self.pos += 1
            return 0
        while True:
            ev = self.value(f"traceEvents[{i}]")
            on_event(ev, i)
            i += 1
            if self.expect(",]", f"inside traceEvents after {i} events") == "]":
                return i


def trace_events(path: str | Path, keep=lambda ev: True) -> tuple[list[dict], dict]:
    """The events of a Kineto trace that `keep` accepts, and its kept metadata, read with the same streaming
    decoder and one-line errors as `analyze` (for callers that need the events themselves, e.g. attribution)."""
    events: list[dict] = []
    meta = _EventStream(Path(path)).read(lambda ev, i: events.append(ev) if keep(ev) else None)
    return events, meta


@dataclass
class _KernelAgg:
    name: str
    device: int
    cls: Classification
    durations_us: array = field(default_factory=lambda: array("d"))


def json_type(v) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(v), "a number")


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class _Collector:
    """Per-event work while streaming: aggregates and compact arrays, nothing per event beyond numbers."""

    def __init__(self, path: Path):
        self.path = path
        self.kernels: dict[tuple[str, int], int] = {}  # (name, device) -> index into aggs
        self.aggs: list[_KernelAgg] = []
        # per kernel, in trace order: aggregate index, start, duration, correlation id
        self.k_agg = array("q")
        self.k_ts = array("d")
        self.k_dur = array("d")
        self.k_corr = array("q")
        # launches (runtime / driver calls with a correlation id): correlation, start, process
        self.l_corr = array("q")
        self.l_ts = array("d")
        self.l_pid = array("q")
        self.annotations: list[tuple[str, float, float, int]] = []  # name, ts, dur, process
        self.gpu_annotations: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        self.copies: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])  # gpu_memcpy / gpu_memset
        self.span_lo = float("inf")
        self.span_hi = float("-inf")
        self.skipped: dict[str, int] = defaultdict(int)
        self._pid_ids: dict[str, int] = {}

    def _process_id(self, v) -> int:
        """pid may be a number or a string in Chrome traces: number the strings apart from real pids."""
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        return self._pid_ids.setdefault(str(v), -(len(self._pid_ids) + 1) * 1_000_000_007)

    def __call__(self, ev, i: int) -> None:
        if not isinstance(ev, dict):
            raise InputError(self.path, f"traceEvents[{i}] is not an event object (found {json_type(ev)})")
        if ev.get("ph") != "X":
            return
        cat = ev.get("cat")
        cat = cat.lower() if isinstance(cat, str) else ""
        ts, dur = ev.get("ts"), ev.get("dur")
        if not (_num(ts) and _num(dur)):
            if cat in ("kernel", "user_annotation", "gpu_user_annotation"):
                raise InputError(self.path, f"traceEvents[{i}]: {cat} event {str(ev.get('name'))[:60]!r} has "
                                            f"ts={ts!r}, dur={dur!r}: expected numbers (microseconds)")
            self.skipped["complete events without numeric ts/dur"] += 1
            return
        if dur < 0:
            self.skipped["events with negative dur"] += 1
            return
        if cat != "trace":  # the profiler's envelope also covers its warm-up
            if ts < self.span_lo:
                self.span_lo = ts
            if ts + dur > self.span_hi:
                self.span_hi = ts + dur
        name = ev.get("name")
        name = name if isinstance(name, str) else str(name)
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        if cat == "kernel":
            device = args.get("device", ev.get("pid", 0))
            device = device if isinstance(device, int) and not isinstance(device, bool) else 0
            key = (name, device)
            idx = self.kernels.get(key)
            if idx is None:
                idx = self.kernels[key] = len(self.aggs)
                self.aggs.append(_KernelAgg(name, device, classify_kernel(name)))
            self.aggs[idx].durations_us.append(dur)
            self.k_agg.append(idx)
            self.k_ts.append(ts)
            self.k_dur.append(dur)
            corr = args.get("correlation")
            self.k_corr.append(corr if isinstance(corr, int) and not isinstance(corr, bool) else -1)
        elif cat in ("gpu_memcpy", "gpu_memset", "memcpy", "memset"):
            c = self.copies["memset" if "memset" in cat else "memcpy"]
            c[0] += 1
            c[1] += dur
        elif cat.endswith("runtime") or cat.endswith("driver"):
            corr = args.get("correlation")
            if isinstance(corr, int) and not isinstance(corr, bool):
                self.l_corr.append(corr)
                self.l_ts.append(ts)
                self.l_pid.append(self._process_id(ev.get("pid")))
        elif cat == "gpu_user_annotation":
            g = self.gpu_annotations[name]
            g[0] += 1
            g[1] += dur
        if cat == "user_annotation" or (STEP_RE.match(name) and cat in ("cpu_op", "user_annotation")):
            # Older profilers wrote ProfilerStep#N as a cpu_op.
            self.annotations.append((name, ts, dur, self._process_id(ev.get("pid"))))


def _union(starts, ends):
    """Sorted disjoint intervals covering the given ones (numpy arrays)."""
    import numpy as np

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


def _intersection_length(a_s, a_e, b_s, b_e) -> float:
    """Total length of the intersection of two sorted disjoint interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a_s) and j < len(b_s):
        lo = max(a_s[i], b_s[j])
        hi = min(a_e[i], b_e[j])
        if hi > lo:
            total += hi - lo
        if a_e[i] < b_e[j]:
            i += 1
        else:
            j += 1
    return float(total)


def _datasheet(name: str, cfg) -> dict:
    from microbench.core.datasheet import match_datasheet

    entry, note = match_datasheet(name, cfg.devices)
    if entry is None:
        return {"entry": None, "note": note}
    return {"entry": entry.key, "name": entry.name, "peaks_tflops": dict(entry.peaks_tflops),
            "memory_tbs": entry.memory_tbs, "note": note}


def analyze(path: str | Path, cfg=None) -> dict:
    """The whole report as a JSON-ready dict (see the module docstring for the definitions)."""
    import numpy as np

    from microbench.core.results import ResultRow
    from microbench.core.stats import summarize

    path = Path(path)
    col = _Collector(path)
    meta = _EventStream(path).read(col)
    notes: list[str] = []

    # Devices: from deviceProperties where present, keyed by id; the ones kernels ran on come first.
    props = {}
    dp = meta.get("deviceProperties")
    if isinstance(dp, list):
        for d in dp:
            if isinstance(d, dict) and isinstance(d.get("id"), int):
                props[d["id"]] = d
    used = sorted({a.device for a in col.aggs})
    devices = []
    for dev in used or sorted(props)[:1]:
        p = props.get(dev, {})
        name = str(p.get("name") or "")
        entry = {"id": dev, "name": name or None, "kernels_ran_here": dev in used}
        if p:
            if "computeMajor" in p:
                entry["compute_capability"] = f"{p.get('computeMajor')}.{p.get('computeMinor')}"
            if p.get("gcnArchName"):
                entry["arch"] = str(p["gcnArchName"])
            for src, dst in (("numSms", "sms"), ("totalGlobalMem", "memory_bytes")):
                if src in p:
                    entry[dst] = p[src]
        if name and cfg is not None:
            entry["datasheet"] = _datasheet(name, cfg)
        elif not name:
            entry["datasheet"] = {"entry": None, "note": f"the trace names no device {dev} (no deviceProperties "
                                                        "entry): no datasheet peaks"}
        devices.append(entry)
    dev_names = {d["id"]: d["name"] or f"device {d['id']}" for d in devices}

    k_dur = np.frombuffer(col.k_dur, dtype=np.float64) if len(col.k_dur) else np.empty(0)
    k_ts = np.frombuffer(col.k_ts, dtype=np.float64) if len(col.k_ts) else np.empty(0)
    k_agg = np.frombuffer(col.k_agg, dtype=np.int64) if len(col.k_agg) else np.empty(0, dtype=np.int64)
    kernel_time = float(k_dur.sum())
    n_kernels = int(len(k_dur))

    def share(x: float):
        return x / kernel_time if kernel_time > 0 else None

    time_by_class: dict[str, float] = defaultdict(float)
    count_by_class: dict[str, int] = defaultdict(int)
    tc_time: dict[str, float] = defaultdict(float)
    agg_total = [float(sum(a.durations_us)) for a in col.aggs]
    for a, t in zip(col.aggs, agg_total):
        time_by_class[a.cls.cls] += t
        count_by_class[a.cls.cls] += len(a.durations_us)
        tc_time[a.cls.tensor_cores] += t
    comm_time = time_by_class.get("comm", 0.0)

    # Exposed communication and GPU busy time, per device.
    is_comm_agg = np.array([a.cls.cls == "comm" for a in col.aggs], dtype=bool)
    agg_device = np.array([a.device for a in col.aggs], dtype=np.int64)
    exposed = 0.0
    busy = 0.0
    if n_kernels:
        k_comm = is_comm_agg[k_agg]
        k_dev = agg_device[k_agg]
        k_end = k_ts + k_dur
        for dev in used:
            on = k_dev == dev
            cs, ce = _union(k_ts[on & k_comm], k_end[on & k_comm])
            ns, ne = _union(k_ts[on & ~k_comm], k_end[on & ~k_comm])
            comm_union = float((ce - cs).sum())
            exposed += comm_union - _intersection_length(cs, ce, ns, ne)
            us, ue = _union(k_ts[on], k_end[on])
            busy += float((ue - us).sum())
    span = col.span_hi - col.span_lo if col.span_hi > col.span_lo else 0.0
    kernel_span = float((k_ts + k_dur).max() - k_ts.min()) if n_kernels else 0.0
    n_dev = max(len(used), 1)

    # Attribution: a kernel belongs to an annotation (or ProfilerStep#N) when the runtime call that launched
    # it (same correlation id) ran inside the annotation's CPU time range, on any thread of the same process:
    # the backward pass launches its kernels from autograd's own threads, not from the thread that opened
    # `## backward ##` (Kineto's gpu_user_annotation follows the launching thread and so misses them).
    launch_ts = np.full(n_kernels, np.nan)
    launch_pid = np.zeros(n_kernels, dtype=np.int64)
    if n_kernels and len(col.l_corr):
        l_corr = np.frombuffer(col.l_corr, dtype=np.int64)
        order = np.argsort(l_corr, kind="stable")
        sc = l_corr[order]
        k_corr = np.frombuffer(col.k_corr, dtype=np.int64)
        pos = np.searchsorted(sc, k_corr)
        pos_c = np.minimum(pos, len(sc) - 1)
        hit = (sc[pos_c] == k_corr) & (k_corr >= 0)
        src = order[pos_c[hit]]
        launch_ts[hit] = np.frombuffer(col.l_ts, dtype=np.float64)[src]
        launch_pid[hit] = np.frombuffer(col.l_pid, dtype=np.int64)[src]
    linked = ~np.isnan(launch_ts)
    n_unlinked = int(n_kernels - linked.sum())
    if n_kernels and n_unlinked:
        notes.append(f"{n_unlinked} of {n_kernels} kernels have no launching runtime call in the trace (no "
                     "matching correlation id): they count in every total but in no annotation or step")

    index_cache: dict[int, tuple] = {}

    def by_launch(pid: int):
        """Sorted launch times, prefix sums of kernel time, kernel starts and ends, for one process."""
        if pid not in index_cache:
            sel = linked & (launch_pid == pid)
            order = np.argsort(launch_ts[sel], kind="stable")
            t = launch_ts[sel][order]
            d = k_dur[sel][order]
            index_cache[pid] = (t, np.concatenate([[0.0], np.cumsum(d)]), k_ts[sel][order],
                                        (k_ts + k_dur)[sel][order])
        return index_cache[pid]

    def attributed(pid: int, ts: float, dur: float):
        t, csum, starts, ends = by_launch(pid)
        lo, hi = np.searchsorted(t, ts, "left"), np.searchsorted(t, ts + dur, "right")
        gpu_span = float(ends[lo:hi].max() - starts[lo:hi].min()) if hi > lo else 0.0
        return int(hi - lo), float(csum[hi] - csum[lo]), gpu_span

    steps = []
    ann: dict[str, dict] = {}
    for name, ts, dur, pid in col.annotations:
        if STEP_RE.match(name):
            n, t, gspan = attributed(pid, ts, dur) if n_kernels else (0, 0.0, 0.0)
            steps.append({"name": name, "wall_us": dur, "kernel_count": n, "kernel_time_us": t,
                          "gpu_span_us": gspan})
            continue
        n, t, _ = attributed(pid, ts, dur) if n_kernels else (0, 0.0, 0.0)
        a = ann.setdefault(name, {"name": name, "calls": 0, "wall_us": 0.0, "kernel_count": 0,
                                  "kernel_time_us": 0.0})
        a["calls"] += 1
        a["wall_us"] += dur
        a["kernel_count"] += n
        a["kernel_time_us"] += t
    for name, (calls, t) in col.gpu_annotations.items():
        a = ann.setdefault(name, {"name": name, "calls": 0, "wall_us": 0.0, "kernel_count": 0,
                                  "kernel_time_us": 0.0})
        a["gpu_annotation_us"] = t
    steps.sort(key=lambda s: int(s["name"].split("#")[1]))
    annotations = sorted(ann.values(), key=lambda a: (-a["kernel_time_us"], -a["wall_us"]))

    # One ResultRow per distinct kernel (name, device): the project's one row type.
    kernels = []
    for a, total in sorted(zip(col.aggs, agg_total), key=lambda x: -x[1]):
        c = a.cls
        evidence = (f"kernel name matched {c.rule}: {c.note}" if c.rule != "unknown"
                    else "kernel name matched no rule")
        row = ResultRow(op=c.cls, shape=a.name, dtype="", provider="trace", device=dev_names.get(a.device, ""),
                        time_ms=summarize([d / 1000.0 for d in a.durations_us]).as_dict(),
                        tensor_cores=c.tensor_cores, tensor_core_evidence=evidence, source="trace",
                        params={"kernel": a.name, "class": c.cls, "rule": c.rule, "device_index": a.device,
                                "calls": len(a.durations_us), "kernel_time_us": total, "share": share(total)})
        kernels.append(row.as_dict())

    if not n_kernels:
        notes.append("no GPU kernel events (cat 'kernel'): was the trace recorded with "
                     "torch.profiler.ProfilerActivity.CUDA on a GPU?")
    for what, n in col.skipped.items():
        notes.append(f"skipped {n} {what}")
    if tc_time.get("unknown"):
        notes.append(f"{share(tc_time['unknown']):.1%} of kernel time is in kernels whose name does not tell "
                     "whether Tensor Cores / matrix cores ran them (tensor_cores: unknown)")

    dist = meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else {}
    summary = {
        "kernel_count": n_kernels,
        "kernel_time_us": kernel_time,
        "share_by_class": {k: share(v) for k, v in sorted(time_by_class.items(), key=lambda x: -x[1])},
        "time_by_class_us": dict(sorted(time_by_class.items(), key=lambda x: -x[1])),
        "count_by_class": dict(count_by_class),
        "tensor_core_share": share(tc_time.get("yes", 0.0)),
        "tensor_core_time_us": tc_time.get("yes", 0.0),
        "non_tensor_core_share": share(tc_time.get("no", 0.0)),
        "tensor_core_unknown_share": share(tc_time.get("unknown", 0.0)),
        "comm_time_us": comm_time,
        "comm_share": share(comm_time),
        "exposed_comm_us": exposed,
        "exposed_comm_share": exposed / (span * n_dev) if span > 0 else None,
        "wall_span_us": float(span),
        "kernel_span_us": kernel_span,
        "gpu_busy_us": busy,
        "gpu_busy_share": busy / (span * n_dev) if span > 0 else None,
        "devices_with_kernels": len(used),
        "memcpy_count": int(col.copies["memcpy"][0]) if "memcpy" in col.copies else 0,
        "memcpy_time_us": col.copies["memcpy"][1] if "memcpy" in col.copies else 0.0,
        "memset_count": int(col.copies["memset"][0]) if "memset" in col.copies else 0,
        "memset_time_us": col.copies["memset"][1] if "memset" in col.copies else 0.0,
        "unattributed_kernels": n_unlinked,
    }
    return {
        "schema": SCHEMA,
        "file": str(path),
        "trace": {k: meta[k] for k in ("schemaVersion", "traceName", "displayTimeUnit") if k in meta}
                 | ({"distributed": {k: dist[k] for k in ("backend", "rank", "world_size") if k in dist}}
                    if dist else {}),
        "devices": devices,
        "summary": summary,
        "classes": class_labels(),
        "kernels": kernels,
        "annotations": annotations,
        "steps": steps,
        "notes": notes,
    }
