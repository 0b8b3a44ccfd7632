"""`dawnscope trace`'s analysis: a trace file -> a Timeline -> `TraceAnalysis`, one object whose
results (summary, kernels, steps, GPU time, counters as Tensor Core evidence, the per-op model with MFU,
eligibility, annotations, graphs) are each computed once from the timeline on first use, without changing it
-> one JSON-ready document (schema dawnscope.trace/1; the terminal report is
microbench/report/trace_report.py). Definitions: docs/traces.md."""

from __future__ import annotations

import gzip
import zlib
from functools import cached_property
from pathlib import Path

import numpy as np

from microbench.core import thresholds
from microbench.core.config import Config, DatasheetDevice, load_config
from microbench.core.datasheet import facts_from_properties, find_entry, match_datasheet
from microbench.core.documents import TraceDocument
from microbench.core.files import open_input
from microbench.core.frames import Tables, unknown_table
from microbench.core.results import TraceKernelRow
from microbench.core.stats import summarize
from microbench.trace import counters as C
from microbench.trace import (
    eligibility,
    gpu_time,
    graphs,
    integrity,
    kineto,
    launchers,
    metrics,
    ncu,
    nsys,
    opmetrics,
    rocprof,
)
from microbench.trace.classify import INFERRED, class_labels
from microbench.trace.timeline import KERNEL, NO_ID, TC_VALUES, Timeline

SCHEMA = "dawnscope.trace/1"
TOP_UNKNOWN = 8
HOW_TO_ADD_A_RULE = (
    "add a [[kernel]] rule to microbench/data/kernel_rules.toml (pattern: a regular expression "
    "searched in the kernel name; class; tensor_cores yes/no/unknown; note: the evidence), before "
    "the general rules it would otherwise fall into, and a test with the real name "
    "(tests/data/kernel_names.toml, read by tests/test_kernel_rules.py)"
)


def detect_format(path: str | Path) -> str:
    """The trace format, by content (never by file name): "nsys" (an SQLite database: `nsys export --type
    sqlite`), "ncu" (an `ncu --csv` export), "rocprofv3" (rocprofv3 JSON), else "kineto" (PyTorch profiler JSON, plain or gzip; also the
    CUPTI range-profiler mode), whose reader names what is wrong with anything else."""
    with open_input(path) as f:  # a regular file only: a FIFO or a device is one line, at once
        head = f.read(4096)
    if nsys.is_sqlite(head):
        return "nsys"
    if not head.startswith(b"\x1f\x8b") and ncu.looks_like_ncu_csv(head.decode("utf-8", errors="replace")):
        return "ncu"
    if rocprof.looks_like_rocprof(_decompressed_head(path, head)):
        return "rocprofv3"
    return "kineto"


def _decompressed_head(path: str | Path, head: bytes, size: int = 256) -> bytes:
    """The first bytes of the text (gunzipped where the file is gzip); empty where it cannot be read (the
    Kineto reader then words the error); `size`: how much of a gzip file to decompress."""
    if not head.startswith(b"\x1f\x8b"):
        return head

    try:
        with gzip.open(path, "rb") as f:
            return f.read(size)
    except (OSError, EOFError, zlib.error):
        return b""


# Keys of a Kineto / Chrome trace (its events' array, an event's phase) that no document of ours (results, trace
# reports, inspect files) has; looked for in its first MiB: a trace's header before its events can be long.
_KINETO_KEYS = (b'"traceEvents"', b'"ph"')
_SNIFF_BYTES = 1 << 20


def is_profiler_trace(path: str | Path) -> bool:
    """A file read_trace reads (an Nsight or rocprofv3 export, a PyTorch profiler trace), not another JSON
    document such as a report of ours: by content."""
    if detect_format(path) != "kineto":
        return True
    with open_input(path) as f:
        head = _decompressed_head(path, f.read(_SNIFF_BYTES), _SNIFF_BYTES)
    return any(k in head for k in _KINETO_KEYS)


def read_trace(path: str | Path) -> Timeline:
    """The timeline of a trace file, whichever profiler wrote it: one reader per format fills the same
    Timeline (microbench/trace/timeline.py)."""
    tl = {"nsys": nsys.read, "ncu": ncu.read, "rocprofv3": rocprof.read, "kineto": kineto.read}[detect_format(path)](
        path
    )
    return launchers.by_launcher(tl)  # kernels no name rule settles, by the operator or range that launched them


def graph_section(tl: Timeline, graph_capture: str | Path | None) -> tuple[dict, dict | None, list[str]]:
    """Graph-launched kernels: the summary keys, the per-capturing-op table given the capture trace (else None),
    and notes (microbench/trace/graphs.py)."""
    capture = read_trace(graph_capture) if graph_capture is not None else None
    gk = graphs.graph_kernels(tl, capture)
    keys = graphs.graph_summary(tl, gk, capture is not None)
    notes = list(gk.notes)
    if keys["graph_kernel_count"] and capture is None:
        notes.append(
            f"{keys['graph_kernel_count']} kernels ({keys['graph_kernel_time_us']:,.1f} us) were launched "
            f"by {keys['graph_launches']} CUDA/HIP graph launch(es): counted one by one; give the trace of "
            "the graph's capture (--graph-capture) to attribute them to the operators that captured them"
        )
    ops = None
    if capture is not None:
        ops = {
            "capture_file": str(graph_capture),
            "graphs_captured": gk.captures,
            "ops": graphs.graph_ops(tl, gk, capture),
        }
    return keys, ops, notes


class TraceAnalysis(Tables):
    """One trace's analysis. The timeline (`tl`) is read once and never changed: every result is a property
    computed from it on first use. Hardware counters, where the trace has them, are the strongest Tensor Core
    evidence: their verdicts are a column of their own (`counter_tensor_cores`), and the results that count
    Tensor Core time (summary, MFU, ops, eligibility) read `evidence`, a view of the timeline whose verdicts
    are the counters' where they settle the question and the kernel-name rule's elsewhere. The per-op model
    itself is built on the rule's verdicts: the counters' verdict needs its FLOPs."""

    def __init__(
        self,
        tl: Timeline,
        config=None,
        step_range: str | None = None,
        measured: dict | None = None,
        graph_capture: str | Path | None = None,
        path: str | Path | None = None,
        source: str | None = None,
    ):
        """`config`: a Config, a bench.toml path, or None for the project's bench.toml (its datasheet gives the
        devices their peaks, so MFU and the dtype findings can be made); the same meaning everywhere."""
        self.tl, self.cfg, self.step_range = (
            tl,
            config if isinstance(config, Config) else load_config(config),
            step_range,
        )
        self.measured, self.graph_capture = measured or {}, graph_capture
        self.path = str(path if path is not None else tl.source)
        self.source = source  # the chip the trace ran on, given by the user (--source): its datasheet entry

    @classmethod
    def open(
        cls,
        path: str | Path,
        config=None,
        step_range: str | None = None,
        measured: dict | None = None,
        graph_capture: str | Path | None = None,
        source: str | None = None,
        **kw,
    ):
        """The one way to open a trace, as `dawnscope trace` does: any format `read_trace` tells apart, with
        `config` as in __init__. `step_range`: the name of the ranges that are steps (default: ProfilerStep#N);
        `measured`: measured compute ceilings, TFLOP/s by datasheet column; `graph_capture`: the trace of the
        capture of the CUDA/HIP graphs this trace replays; `source`: the chip it ran on where it does not say; `kw`:
        what a subclass's constructor adds (the findings layer's `decomposition`)."""
        return cls(read_trace(path), config, step_range, measured, graph_capture, path, source, **kw)

    @cached_property
    def devices(self) -> list[dict]:
        return device_entries(self.tl, self.cfg, self.source)

    @cached_property
    def peaks(self) -> dict[str, float]:
        return datasheet_peaks(self.devices)

    @cached_property
    def work_model(self) -> opmetrics.WorkModel:
        """The work model of the trace's recorded calls (FLOPs and bytes per ATen call, per kernel)."""
        return opmetrics.work_model(self.tl, self.peaks)

    @cached_property
    def counters(self) -> dict[tuple[str, int], dict]:
        """Per kernel (name, device) with hardware counters: their sum, counted FLOPs, verdict, contradiction."""
        return counter_evidence(self.tl, self.work_model.kernel_flops)

    @cached_property
    def counter_tensor_cores(self) -> np.ndarray:
        """Per kernel row: the counters' Tensor Core verdict (index into TC_VALUES), NO_ID where they give none."""
        col = np.full(len(self.tl.activities), NO_ID, dtype=np.int8)
        for c in self.counters.values():
            if c["verdict"].tensor_cores is not None:
                col[c["rows"]] = TC_VALUES.index(c["verdict"].tensor_cores)
        return col

    @cached_property
    def evidence(self) -> Timeline:
        col = self.counter_tensor_cores
        if not (col != NO_ID).any():
            return self.tl
        return self.tl.with_tensor_cores(np.where(col != NO_ID, col, self.tl.activities.tensor_cores).astype(np.int8))

    @cached_property
    def graphs(self) -> tuple[dict, dict | None, list[str]]:
        return graph_section(self.tl, self.graph_capture)

    @cached_property
    def summary(self) -> dict:
        s = summary_of(self.evidence)
        layers = metrics.matrix_unit_evidence_time(self.evidence, self.counter_tensor_cores != NO_ID)
        s["tensor_core_evidence_us"] = layers
        s["tensor_core_inferred_share"] = _share(
            sum(v.get("yes", 0.0) for k, v in layers.items() if k in INFERRED), s["kernel_time_us"]
        )
        s["eligible_unused_us"] = self.eligibility["eligible_unused_us"]
        # without shapes (the TensorBoard plugin's measure): eligible operators' kernel time not on Tensor Cores
        s["eligible_unused_by_operator_share"] = self.eligibility["by_operator"]["unused_share"]
        s["mfu"] = self.mfu["mfu"]
        return s | self.graphs[0]

    @cached_property
    def _kernel_rows(self) -> tuple[list[dict], list[str]]:
        names = {d["id"]: d["name"] or f"device {d['id']}" for d in self.devices}
        rows = kernel_table(self.tl, names, metrics.kernel_time(self.tl)[1])
        found = kernel_evidence(rows, by_kernel(self.tl), self.work_model.kernel_flops, self.counters)
        if self.flop_coverage["withheld"]:  # a kernel's model rate too, as the integrity line says (counters' stay)
            for p in (r["params"] for r in rows if r["params"].get("achieved_tflops") is not None):
                withhold(p, self.flop_coverage, ("achieved_tflops",))
        return rows, found

    @property
    def kernels(self) -> list[dict]:
        return self._kernel_rows[0]

    @cached_property
    def _steps(self):
        return gpu_time.step_breakdowns(self.tl, self.step_range)

    @cached_property
    def flop_coverage(self) -> dict:
        """The share of matrix-kernel time the model's FLOPs cover, and whether the figures built on them are shown."""
        return integrity.coverage(metrics.matrix_flop_coverage(self.tl, self.work_model.kernel_flops))

    @cached_property
    def integrity(self) -> dict:
        counts = {
            "kernel_count": metrics.kernel_time(self.tl)[0],
            "unattributed_kernels": metrics.unlaunched_kernels(self.tl),
        }
        windows, steps, outside = self._steps
        return integrity.integrity_of(self.tl, counts, windows, outside, self.devices, self.flop_coverage, steps)

    @cached_property
    def mfu(self) -> dict:
        w = self._steps[0]
        lo, hi = gpu_time.plugin_windows(self.tl, w) if len(w) else ((), ())
        m = opmetrics.mfu(
            self.evidence,
            self.work_model,
            self.peaks,
            w,
            gpu_time.breakdown(self.tl)["gpu_span_us"],
            spans_us=[b - a for a, b in zip(lo, hi)] if len(w) else None,
        )
        if self.measured and self.work_model.calls:
            at_meas, _, _ = opmetrics.time_at_peak_us(self.work_model.calls, self.measured)
            m["of_measured"] = at_meas / m["window_us"] if m["window_us"] else None
            m["measured_ceilings_tflops"] = self.measured
        m["flop_coverage"] = self.flop_coverage["share"]
        if self.flop_coverage["withheld"]:
            withhold(m, self.flop_coverage, ("mfu", "achieved_tflops", "of_measured"))
            for st in m["steps"]:
                withhold(st, self.flop_coverage, ("mfu", "achieved_tflops"))
        return m

    @property
    def steps(self) -> list[dict]:
        return [
            st | {k: m[k] for k in ("model_flops", "achieved_tflops", "mfu")}
            for st, m in zip(self._steps[1], self.mfu["steps"])
        ]

    @property
    def outside_steps(self) -> dict:
        return self._steps[2]

    @cached_property
    def ops(self) -> list[dict]:
        rows = opmetrics.op_rows(self.evidence, self.work_model, self.peaks, self.measured)
        if self.flop_coverage["withheld"]:
            for r in rows:
                withhold(
                    r,
                    self.flop_coverage,
                    (
                        "op_tflops",
                        "kernel_tflops",
                        "pct_of_datasheet",
                        "pct_of_measured",
                        "kernel_pct_of_datasheet",
                        "kernel_pct_of_measured",
                    ),
                )
        return rows

    @cached_property
    def eligibility(self) -> dict:
        return opmetrics.eligibility_findings(self.evidence, self.work_model, device_of(self.devices))

    @cached_property
    def annotations(self) -> list[dict]:
        return metrics.annotation_times(self.tl)

    @property
    def notes(self) -> list[str]:
        notes = notes_of(self.tl, self.summary) + list(self.work_model.notes)
        if self._steps[0].note:
            notes.append(self._steps[0].note)
        notes += perf_notes(self.tl, self.work_model, self.peaks, device_of(self.devices))
        notes += pm_sampling_notes(self.tl, self.counters)
        notes += [f"counters contradict the kernel name: {c}" for c in self._kernel_rows[1]]
        notes += opmetrics.above_peak(self.ops) + self.mfu.get("impossible", [])
        notes += eligible_note(self.eligibility["by_operator"])
        return notes + self.graphs[2]

    def document(self) -> TraceDocument:
        """The whole report as a JSON-ready dict."""
        dist = self.tl.distributed
        return {
            "schema": SCHEMA,
            "file": self.path,
            "format": self.tl.format,
            "trace": {
                k: self.tl.meta[k] for k in ("schemaVersion", "traceName", "displayTimeUnit") if k in self.tl.meta
            }
            | ({"distributed": {k: dist[k] for k in ("backend", "rank", "world_size") if k in dist}} if dist else {}),
            "devices": self.devices,
            "integrity": self.integrity,
            "summary": self.summary,
            "classes": class_labels(),
            "kernels": self.kernels,
            "ops": self.ops,
            "mfu": self.mfu,
            "eligibility": self.eligibility,
            "unknown_kernels": unknown_kernels(self.kernels, self.summary),
            "annotations": self.annotations,
            "steps": self.steps,
            "outside_steps": self.outside_steps,
            "graphs": self.graphs[1],
            "notes": self.notes,
        }

    # For notebooks (docs/api.md): the document's tables, each a list of dicts and, with pandas (the `frames`
    # extra), a DataFrame. "classes" is the summary's time, count and share per kernel class; "eligibility" its
    # findings; the others are the document's keys of the same name.
    TABLES = ("kernels", "classes", "ops", "steps", "annotations", "devices", "eligibility")

    def table(self, name: str) -> list[dict]:
        """One of TABLES as a list of dicts (the document's own values)."""
        if name not in self.TABLES:
            raise unknown_table(name, self.TABLES, "a trace analysis")
        if name == "classes":
            s = self.summary
            return [
                {
                    "class": c,
                    "count": s["count_by_class"][c],
                    "time_us": s["time_by_class_us"][c],
                    "share": s["share_by_class"][c],
                }
                for c in s["time_by_class_us"]
            ]
        if name == "eligibility":
            return list(self.eligibility["findings"])
        return list(getattr(self, name))

    def __repr__(self) -> str:  # a notebook's cell shows what was read, computing nothing
        return f"<TraceAnalysis of {self.path} ({self.tl.format}, {len(self.tl.activities):,} GPU activities)>"


def withhold(d: dict, cov: dict, keys: tuple[str, ...]) -> None:
    """Figures built on FLOPs that cover too little of the matrix work: None, with the reason beside them."""
    for k in keys:
        if k in d:
            d[k] = None
    d["withheld"] = (
        f"the model's FLOPs cover {cov['share']:.1%} of matrix-kernel time, under "
        f"{cov['threshold']:.0%} (flop_coverage_min, microbench/data/thresholds.toml)"
    )


def _share(x: float, total: float):
    return x / total if total > 0 else None


def summary_of(tl: Timeline) -> dict:
    n, total = metrics.kernel_time(tl)
    by_class = metrics.time_by_class(tl)
    tc = metrics.matrix_unit_time(tl)
    comm = metrics.comm_time(tl)
    whole = gpu_time.breakdown(tl)  # the one GPU time breakdown (docs/traces.md)
    copies = metrics.copy_time(tl)
    span = whole["gpu_span_us"]  # shares are of the GPU span, summed over devices, never of the CPU's
    acts, kernel_rows = tl.activities, metrics.kernel_rows(tl)
    return {
        "kernel_count": n,
        "kernel_time_us": total,
        "share_by_class": {c: _share(t, total) for c, (_, t) in by_class.items()},
        "time_by_class_us": {c: t for c, (_, t) in by_class.items()},
        "count_by_class": {c: k for c, (k, _) in by_class.items()},
        "tensor_core_share": _share(tc["yes"], total),
        "tensor_core_time_us": tc["yes"],
        "tensor_core_time_by_class_us": metrics.matrix_unit_time_by_class(tl),
        "non_tensor_core_share": _share(tc["no"], total),
        "tensor_core_unknown_share": _share(tc["unknown"], total),
        "comm_time_us": comm,
        "comm_share": _share(comm, total),
        "exposed_comm_us": whole["exposed_comm_us"],
        "exposed_comm_share": _share(whole["exposed_comm_us"], span),
        "wall_span_us": tl.wall_span_us,
        "kernel_span_us": float(acts.end_us[kernel_rows].max() - acts.ts_us[kernel_rows].min())
        if len(kernel_rows)
        else 0.0,
        "gpu_span_us": span,
        "gpu_busy_us": whole["busy_us"],
        "gpu_busy_share": _share(whole["busy_us"], span),
        # the headline: the GPU span split four ways (they sum to 1): computation, copies nothing hides (memcpy,
        # memset), communication nothing hides, idle; busy is the first three
        "computation_share": _share(whole["computation_us"], span),
        "copy_share": _share(whole["exposed_memcpy_us"], span),
        "idle_share": _share(whole["idle_us"], span),
        "gpu_time": whole,
        **({"gpu_time_by_device": gpu_time.per_device(tl)} if gpu_time.several_devices(tl) else {}),
        "devices_with_kernels": len(metrics.devices_with_kernels(tl)),
        "memcpy_count": copies["memcpy"][0],
        "memcpy_time_us": copies["memcpy"][1],
        "memset_count": copies["memset"][0],
        "memset_time_us": copies["memset"][1],
        "unattributed_kernels": metrics.unlaunched_kernels(tl),
    }


def _datasheet(props: dict, cfg) -> dict:
    """The datasheet entry of a device by its name and the properties the trace records (core.datasheet):
    an SKU, or a chip whose compute peaks its candidates share (`level` "chip", memory bandwidth maybe unknown)."""
    entry, note = _match(props, cfg)
    if entry is None:
        return {"entry": None, "note": note}
    return {
        "entry": entry.key,
        "name": entry.name,
        "level": entry.level,
        "peaks_tflops": dict(entry.peaks_tflops),
        "memory_tbs": entry.memory_tbs,
        "note": note,
    }


def _given(source: str, cfg, name: str) -> dict:
    """The datasheet entry the user named (--source), for a device whatever the trace calls it."""
    entry = find_entry(source, cfg.devices, "--source")
    named = f"; the trace names it {name!r}" if name else "; the trace names no device"
    return {
        "entry": entry.key,
        "name": entry.name,
        "peaks_tflops": dict(entry.peaks_tflops),
        "memory_tbs": entry.memory_tbs,
        "note": f"given by --source {source}{named}",
    }


def device_entries(tl: Timeline, cfg=None, source: str | None = None) -> list[dict]:
    """The devices kernels ran on (else the first the trace describes), with the trace's properties and the
    matching datasheet entry where `cfg` is given (the one `source` names, where given)."""
    used = metrics.devices_with_kernels(tl)
    props, mapped = _properties_by_device(tl, used)
    out = []
    for dev in used or sorted(tl.device_properties)[:1]:
        p = props.get(dev, {})
        name = str(p.get("name") or "")
        entry = {"id": dev, "name": name or None, "kernels_ran_here": dev in used}
        if dev in mapped:
            entry["properties_of"] = mapped[dev]
            entry["note"] = (
                f"the trace's kernels name device {dev}, its deviceProperties describe device "
                f"{mapped[dev]}: ROCm numbers devices by HSA agent, the CPUs first; taken to be the same"
            )
        if "computeMajor" in p:
            entry["compute_capability"] = f"{p.get('computeMajor')}.{p.get('computeMinor')}"
        if p.get("gcnArchName"):
            entry["arch"] = str(p["gcnArchName"])
        for src, dst in (("numSms", "sms"), ("totalGlobalMem", "memory_bytes")):
            if src in p:
                entry[dst] = p[src]
        if source is not None and cfg is not None:
            entry["datasheet"] = _given(source, cfg, name)
        elif p and cfg is not None:
            entry["datasheet"] = _datasheet(p, cfg)
        elif not p:
            entry["datasheet"] = {"entry": None, "note": _unnamed(dev)}
        out.append(entry)
    return out


def datasheet_entry(tl: Timeline, cfg) -> DatasheetDevice | None:
    """The datasheet entry (an SKU, or a chip's shared peaks) of the first device the kernels ran on that has
    one: the object device_entries reports by key, for those that need its figures (the findings' chip)."""
    used = metrics.devices_with_kernels(tl)
    props, _ = _properties_by_device(tl, used)
    for dev in used or sorted(tl.device_properties)[:1]:
        p = props.get(dev)
        if p and (entry := _match(p, cfg)[0]) is not None:
            return entry
    return None


def _match(props: dict, cfg) -> tuple[DatasheetDevice | None, str]:
    """A deviceProperties entry's datasheet entry and note: the one call both the report and the findings make."""
    return match_datasheet(str(props.get("name") or ""), cfg.devices, facts_from_properties(props))


def _unnamed(dev: int) -> str:
    """Why a device has no datasheet peaks when the trace describes it not at all."""
    return f"the trace names no device {dev} (no deviceProperties entry): no datasheet peaks (give --source DEVICE)"


def _properties_by_device(tl: Timeline, used: list[int]) -> tuple[dict[int, dict], dict[int, int]]:
    """deviceProperties by the device ids the kernels carry. ROCm traces number kernels' devices by HSA agent
    (CPU agents first: the MI300X trace's GPU 0 runs "device 2") while deviceProperties counts GPUs from 0:
    when the kernels' unknown ids and the unused property entries are equally many, they are paired in order."""
    props = dict(tl.device_properties)
    missing = [d for d in used if d not in props]
    spare = [d for d in sorted(props) if d not in used]
    mapped: dict[int, int] = {}
    if missing and len(missing) == len(spare):
        for d, q in zip(missing, spare):
            props[d], mapped[d] = props[q], q
    return props, mapped


def kernel_table(tl: Timeline, dev_names: dict[int, str], kernel_time_us: float) -> list[dict]:
    """One row per distinct kernel (name, device), most time first: a trace-kernel row of the project's one row
    type."""
    rows = []
    for g in metrics.top_kernels(tl):
        c = tl.classes[g.cls]
        evidence = (
            "kernel name matched no rule"
            if c.rule == "unknown"
            else f"{c.basis}: kernel name matched {c.rule}: {c.note}"
            if c.basis in INFERRED
            else f"kernel name matched {c.rule}: {c.note}"
        )
        row = TraceKernelRow(
            kernel=g.name,
            kernel_class=c.cls,
            calls=len(g.durations_us),
            device=dev_names.get(g.device, ""),
            time_ms=summarize((g.durations_us / 1000.0).tolist()).as_dict(),
            tensor_cores=c.tensor_cores,
            tensor_core_evidence=evidence,
            params={
                "kernel": g.name,
                "class": c.cls,
                "rule": c.rule,
                "evidence": c.basis,
                "device_index": g.device,
                "calls": len(g.durations_us),
                "kernel_time_us": g.total_us,
                "share": _share(g.total_us, kernel_time_us),
            },
        )
        rows.append(row.as_dict())
    return rows


def notes_of(tl: Timeline, s: dict) -> list[str]:
    notes = []
    # kernels without a launch: an integrity line (trace/integrity.py), said before any figure
    if lost := integrity.lost_device_launches(tl):
        notes.append(integrity.LOST_DEVICE.format(n=lost))
    elif not s["kernel_count"]:
        notes.append(
            "no GPU kernel events (cat 'kernel'): was the trace recorded with "
            "torch.profiler.ProfilerActivity.CUDA on a GPU?"
        )
    for what, n in tl.skipped.items():
        notes.append(f"skipped {n} {what}")
    if s["tensor_core_unknown_share"]:
        notes.append(
            f"{s['tensor_core_unknown_share']:.1%} of kernel time is in kernels whose name does not tell "
            "whether Tensor Cores / matrix cores ran them (tensor_cores: unknown)"
        )
    return notes


def pm_sampling_notes(tl: Timeline, counted: dict) -> list[str]:
    """What the trace's CUPTI PM samples told (counters.pm_sample_counters): how many, and for how many kernels
    they settle the Tensor Core verdict, or why none."""
    if not tl.pm_samples:
        return []
    metrics = {m for per in tl.pm_samples.values() for m in per}
    samples = sum(len(t) for per in tl.pm_samples.values() for t, _ in per.values())
    head = (
        f"CUPTI PM sampling: {samples:,} values of {len(metrics)} metric(s) on device(s) "
        f"{', '.join(map(str, sorted(tl.pm_samples)))}"
    )
    if not any(m.startswith(C.TENSOR_PREFIXES) for m in metrics):
        return [
            f"{head}; none measures the tensor pipe ({', '.join(p + '*' for p in C.TENSOR_PREFIXES)}): no Tensor Core verdict from them"
        ]
    sampled = [k for k, c in counted.items() if c["counters"].get(C.PM_SAMPLES)]
    return [
        f"{head}; {len(sampled)} kernel(s) ran alone on their device through at least one sample: their Tensor Core "
        "verdict is the samples' (a sample shared by two kernels, or cut by a kernel's start or end, measures none)"
    ]


def datasheet_peaks(devices: list[dict]) -> dict[str, float]:
    """The datasheet peaks (TFLOP/s by column) of the first device with a datasheet entry."""
    for d in devices:
        ds = d.get("datasheet") or {}
        if ds.get("entry"):
            return dict(ds["peaks_tflops"])
    return {}


def device_of(devices: list[dict]) -> eligibility.Device:
    d = next((d for d in devices if d.get("name")), devices[0] if devices else {})
    return eligibility.device_of(d.get("name"), d.get("compute_capability"))


def by_kernel(tl: Timeline) -> dict[tuple[str, int], np.ndarray]:
    """Kernel rows (not copies) per distinct (kernel name, device): the report's kernel rows."""
    k = tl.activities
    groups: dict[tuple[str, int], list[int]] = {}
    for r in np.flatnonzero(k.category == KERNEL):
        groups.setdefault((tl.names[k.name[r]], int(k.device[r])), []).append(int(r))
    return {key: np.array(rows) for key, rows in groups.items()}


def counter_evidence(tl: Timeline, kernel_flops: np.ndarray) -> dict[tuple[str, int], dict]:
    """Where the trace has hardware counters for a kernel (name, device): their verdict (counters.counter_verdict
    over the counters summed across its calls, against the model FLOPs attributed to it), with what the report
    shows: counters, counted FLOPs, verdict, the name's verdict it contradicts, and the kernel's rows. The
    timeline is not changed (TraceAnalysis.counter_tensor_cores is the column of these verdicts)."""
    out = {}
    # the counters of a kernel replayed alone (ncu, the range profiler) first; else what PM sampling saw of it
    per_row = C.pm_sample_counters(tl) | tl.counters
    for key, rows in by_kernel(tl).items():
        with_counters = [per_row[r] for r in rows if r in per_row]
        if not with_counters:
            continue
        summed = C.combine_calls(with_counters)
        cls = tl.classes[tl.activities.cls[rows[0]]]
        v = C.counter_verdict(summed, cls.cls, float(kernel_flops[rows].sum()) or None)
        out[key] = {
            "counters": summed,
            "counted_flops": C.sass_flops(summed),
            "verdict": v,
            "contradiction": C.contradiction(cls.tensor_cores, v),
            "name_verdict": cls.tensor_cores,
            "rows": rows,
        }
    return out


def kernel_evidence(kernels: list[dict], kernel_rows: dict, kernel_flops: np.ndarray, counted: dict) -> list[str]:
    """Per kernel row of the report: the model FLOPs attributed to it, its achieved TFLOP/s, and, where the
    trace has counters, their verdict and evidence in place of the name's. Returns the contradictions."""
    found = []
    for row in kernels:
        p = row["params"]
        key = (p["kernel"], p["device_index"])
        rows = kernel_rows.get(key, np.empty(0, dtype=int))
        flops = float(kernel_flops[rows].sum()) if len(rows) else 0.0
        if flops:
            p["model_flops"] = flops
            p["achieved_tflops"] = flops / (p["kernel_time_us"] * 1e6) if p["kernel_time_us"] else None
        c = counted.get(key)
        if c is None:
            continue
        p["counters"], p["counted_flops"] = c["counters"], c["counted_flops"]
        _place_by_counters(row, p, flops or c["counted_flops"])
        v = c["verdict"]
        if v.tensor_cores is None:
            p["counter_note"] = v.evidence
            continue
        if c["contradiction"]:
            found.append(f"{p['kernel'][:80]}: {c['contradiction']}")
            p["name_verdict"] = c["name_verdict"]
        row["tensor_cores"], row["tensor_core_evidence"], p["evidence"] = v.tensor_cores, v.evidence, "counters"
    return found


def _place_by_counters(row: dict, p: dict, flops: float | None) -> None:
    """A kernel with hardware counters goes on the roofline from the export's own numbers: its DRAM bytes
    (dram__bytes, or the Memory Throughput x duration; summed over its calls) over its measured time, and its
    FLOPs (the model's where the trace has shapes, else the counted SASS FLOPs)."""
    nbytes = (p.get("counters") or {}).get("dram_bytes")
    seconds = p["kernel_time_us"] * 1e-6
    if not nbytes or seconds <= 0:
        return
    row["bytes"], row["gbps"] = nbytes, nbytes / seconds / 1e9
    if flops:
        row["flops"], row["tflops"], row["intensity"] = flops, flops / seconds / 1e12, flops / nbytes
    p["roofline_from"] = "the export's DRAM bytes and " + (
        "the model's FLOPs" if p.get("model_flops") else "its counted SASS FLOPs"
    )


def unknown_kernels(kernels: list[dict], summary: dict) -> dict | None:
    """Where kernels whose Tensor Core use no rule settles take more than 5 % of kernel time: the top ones and
    how to add a rule."""
    share = summary.get("tensor_core_unknown_share") or 0.0
    if share <= thresholds.value("unknown_share_limit"):
        return None
    top = [
        {
            "kernel": k["params"]["kernel"],
            "class": k["params"]["class"],
            "kernel_time_us": k["params"]["kernel_time_us"],
            "share": k["params"]["share"],
        }
        for k in kernels
        if k["tensor_cores"] == "unknown"
    ][:TOP_UNKNOWN]
    return {"share": share, "top": top, "how_to_add_a_rule": HOW_TO_ADD_A_RULE}


def eligible_note(by_op: dict) -> list[str]:
    """The TensorBoard plugin's recommendation, from eligibility without shapes (opmetrics.eligible_by_operator),
    with the remedy that fits what ran: fp32 operators -> AMP / TF32; operators already in fp16 / bf16 on kernels
    without Tensor Cores -> the library's algorithm choice, never AMP. Kernels whose Tensor Core use no evidence
    settles are not counted as unused (they are said apart)."""
    share = by_op.get("unused_share") or 0.0
    if share <= thresholds.value("eligible_unused_note_share"):
        return []
    unused = by_op.get("unused_time_us") or 0.0
    sixteen = by_op.get("unused_16bit_time_us") or 0.0
    untyped = " (operators without a recorded dtype counted as eligible)" if by_op.get("untyped_time_us") else ""
    remedies = []
    if unused - sixteen > 0:
        remedies.append(
            f"{(unused - sixteen) / unused:.0%} of it under fp32 operators: enable AMP (torch.autocast) or TF32 where the GPU has it"
        )
    if sixteen > 0:
        remedies.append(
            f"{sixteen / unused:.0%} under operators already in fp16 / bf16: the library chose kernels without "
            "Tensor Cores; try cuDNN's benchmark mode (torch.backends.cudnn.benchmark = True), channels_last "
            "(NHWC), or on ROCm MIOpen's find-db (MIOPEN_FIND_MODE) and NHWC"
        )
    unknown = by_op.get("unknown_time_us") or 0.0
    unsettled = (
        f"; {unknown:,.0f} us more ran on kernels whose Tensor Core use is unknown, not counted" if unknown else ""
    )
    return [
        f"kernels with {share:.1%} of kernel time are launched by operators that could run on Tensor Cores "
        f"(convolution, matmul, linear, attention) and ran without them{untyped}: " + "; ".join(remedies) + unsettled
    ]


def perf_notes(tl: Timeline, work_model: opmetrics.WorkModel, peaks: dict, dev: eligibility.Device) -> list[str]:
    notes = []
    if work_model.calls and not peaks:
        notes.append(
            "no datasheet peaks for this device: MFU and % of peak are not computed (give a measured "
            "ceiling with --ceiling or --ceilings)"
        )
    if work_model.calls and dev.vendor is None:
        notes.append("the trace names no device: the Tensor Core eligibility check, which depends on it, is skipped")
    if tl.meta.get("counter_ranges"):
        notes.append(
            f"CUPTI range-profiler trace: {tl.meta['counter_ranges']} kernels replayed one at a time with "
            "hardware counters; their durations are the profiler's ranges, not kernel run times"
        )
    if tl.meta.get("serialized"):
        notes.append(
            f"{tl.meta['serialized']}: kernel time is the sum of measured durations; spans and idle time "
            "of this serialized timeline mean nothing"
        )
    return notes
