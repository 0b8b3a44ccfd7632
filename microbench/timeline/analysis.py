"""`python -m microbench.trace`'s document: a trace file -> a Timeline -> the metrics -> one JSON-ready dict
(schema dawnscope.trace/1; the terminal report is microbench/reports/trace_report.py). Definitions:
docs/traces.md."""
from __future__ import annotations

from pathlib import Path

from microbench.timeline import gpu_time, metrics
from microbench.timeline.classify import class_labels
from microbench.timeline.model import Timeline

SCHEMA = "dawnscope.trace/1"


def detect_format(path: str | Path) -> str:
    """The trace format, by content (never by file name): "nsys" (an SQLite database: `nsys export --type
    sqlite`), "ncu" (an `ncu --csv` export), else "kineto" (PyTorch profiler JSON, plain or gzip; also the
    CUPTI range-profiler mode), whose reader names what is wrong with anything else."""
    from microbench.core.errors import InputError
    from microbench.timeline import ncu, nsys

    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as e:
        raise InputError(Path(path), f"cannot read: {e.strerror or e}") from None
    if nsys.is_sqlite(head):
        return "nsys"
    if not head.startswith(b"\x1f\x8b") and ncu.looks_like_ncu_csv(head.decode("utf-8", errors="replace")):
        return "ncu"
    return "kineto"


def read_trace(path: str | Path) -> Timeline:
    """The timeline of a trace file, whichever profiler wrote it: one reader per format fills the same
    Timeline (microbench/timeline/model.py)."""
    from microbench.timeline import kineto, ncu, nsys

    return {"nsys": nsys.read, "ncu": ncu.read, "kineto": kineto.read}[detect_format(path)](path)


def graph_section(tl: Timeline, graph_capture: str | Path | None) -> tuple[dict, dict | None, list[str]]:
    """Graph-launched kernels: the summary keys, the per-capturing-op table given the capture trace (else None),
    and notes (microbench/timeline/graphs.py)."""
    from microbench.timeline import graphs

    capture = read_trace(graph_capture) if graph_capture is not None else None
    gk = graphs.graph_kernels(tl, capture)
    keys = graphs.graph_summary(tl, gk, capture is not None)
    notes = list(gk.notes)
    if keys["graph_kernel_count"] and capture is None:
        notes.append(f"{keys['graph_kernel_count']} kernels ({keys['graph_kernel_time_us']:,.1f} us) were launched "
                     f"by {keys['graph_launches']} CUDA/HIP graph launch(es): counted one by one; give the trace of "
                     "the graph's capture (--graph-capture) to attribute them to the operators that captured them")
    ops = None
    if capture is not None:
        ops = {"capture_file": str(graph_capture), "graphs_captured": gk.captures,
               "ops": graphs.graph_ops(tl, gk, capture)}
    return keys, ops, notes


def analyze(path: str | Path, cfg=None, step_range: str | None = None, measured: dict | None = None,
            graph_capture: str | Path | None = None) -> dict:
    """The whole report of one trace as a JSON-ready dict. `step_range`: the name of the ranges that are steps
    (default: ProfilerStep#N); `measured`: measured compute ceilings, TFLOP/s by datasheet column;
    `graph_capture`: the trace of the capture of the CUDA/HIP graphs this trace replays."""
    from microbench.timeline import perf

    tl = read_trace(path)
    graph_keys, graph_ops, graph_notes = graph_section(tl, graph_capture)
    devices = device_entries(tl, cfg)
    model = perf.model_of(tl, devices)
    counted = perf.apply_counters(tl, model.kernel_flops)  # counters outrank names, in every total too
    summary = summary_of(tl)
    kernels = kernel_table(tl, {d["id"]: d["name"] or f"device {d['id']}" for d in devices}, summary["kernel_time_us"])
    extra = perf.performance(tl, devices, summary, kernels, model, counted, step_range, measured)
    summary["eligible_unused_us"] = extra["eligibility"]["eligible_unused_us"]
    summary["mfu"] = extra["mfu"]["mfu"]
    summary.update(graph_keys)
    dist = tl.distributed
    return {
        "schema": SCHEMA,
        "file": str(path),
        "format": tl.format,
        "trace": {k: tl.meta[k] for k in ("schemaVersion", "traceName", "displayTimeUnit") if k in tl.meta}
                 | ({"distributed": {k: dist[k] for k in ("backend", "rank", "world_size") if k in dist}}
                    if dist else {}),
        "devices": devices,
        "summary": summary,
        "classes": class_labels(),
        "kernels": kernels,
        "ops": extra["ops"],
        "mfu": extra["mfu"],
        "eligibility": extra["eligibility"],
        "unknown_kernels": extra["unknown_kernels"],
        "annotations": metrics.annotation_times(tl),
        "steps": extra["steps"],
        "outside_steps": extra["outside_steps"],
        "graphs": graph_ops,
        "notes": notes_of(tl, summary) + extra["notes"] + graph_notes,
    }


def _share(x: float, total: float):
    return x / total if total > 0 else None


def summary_of(tl: Timeline) -> dict:
    n, total = metrics.kernel_time(tl)
    by_class = metrics.time_by_class(tl)
    tc = metrics.tensor_core_time(tl)
    comm = metrics.comm_time(tl)
    whole = gpu_time.breakdown(tl)  # the one GPU time breakdown (docs/traces.md)
    copies = metrics.copy_time(tl)
    span = whole["gpu_span_us"]  # shares are of the GPU span, summed over devices, never of the CPU's
    acts, kernel_rows = tl.kernels, metrics.kernel_rows(tl)
    return {
        "kernel_count": n,
        "kernel_time_us": total,
        "share_by_class": {c: _share(t, total) for c, (_, t) in by_class.items()},
        "time_by_class_us": {c: t for c, (_, t) in by_class.items()},
        "count_by_class": {c: k for c, (k, _) in by_class.items()},
        "tensor_core_share": _share(tc["yes"], total),
        "tensor_core_time_us": tc["yes"],
        "non_tensor_core_share": _share(tc["no"], total),
        "tensor_core_unknown_share": _share(tc["unknown"], total),
        "comm_time_us": comm,
        "comm_share": _share(comm, total),
        "exposed_comm_us": whole["exposed_comm_us"],
        "exposed_comm_share": _share(whole["exposed_comm_us"], span),
        "wall_span_us": tl.wall_span_us,
        "kernel_span_us": float(acts.end_us[kernel_rows].max() - acts.ts_us[kernel_rows].min()) if len(kernel_rows) else 0.0,
        "gpu_span_us": span,
        "gpu_busy_us": whole["busy_us"],
        "gpu_busy_share": _share(whole["busy_us"], span),
        "gpu_time": whole,
        "devices_with_kernels": len(metrics.devices_with_kernels(tl)),
        "memcpy_count": copies["memcpy"][0],
        "memcpy_time_us": copies["memcpy"][1],
        "memset_count": copies["memset"][0],
        "memset_time_us": copies["memset"][1],
        "unattributed_kernels": metrics.unlaunched_kernels(tl),
    }


def _datasheet(name: str, cfg) -> dict:
    from microbench.core.datasheet import match_datasheet

    entry, note = match_datasheet(name, cfg.devices)
    if entry is None:
        return {"entry": None, "note": note}
    return {"entry": entry.key, "name": entry.name, "peaks_tflops": dict(entry.peaks_tflops),
            "memory_tbs": entry.memory_tbs, "note": note}


def device_entries(tl: Timeline, cfg=None) -> list[dict]:
    """The devices kernels ran on (else the first the trace describes), with the trace's properties and the
    matching datasheet entry where `cfg` is given."""
    used = metrics.devices_with_kernels(tl)
    props, mapped = _properties_by_device(tl, used)
    out = []
    for dev in used or sorted(tl.device_properties)[:1]:
        p = props.get(dev, {})
        name = str(p.get("name") or "")
        entry = {"id": dev, "name": name or None, "kernels_ran_here": dev in used}
        if dev in mapped:
            entry["properties_of"] = mapped[dev]
            entry["note"] = (f"the trace's kernels name device {dev}, its deviceProperties describe device "
                             f"{mapped[dev]}: ROCm numbers devices by HSA agent, the CPUs first; taken to be the same")
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
        out.append(entry)
    return out


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
    from microbench.core.results import TraceKernelRow
    from microbench.core.stats import summarize

    rows = []
    for g in metrics.top_kernels(tl):
        c = tl.classes[g.cls]
        evidence = (f"kernel name matched {c.rule}: {c.note}" if c.rule != "unknown"
                    else "kernel name matched no rule")
        row = TraceKernelRow(kernel=g.name, kernel_class=c.cls, calls=len(g.durations_us),
                             device=dev_names.get(g.device, ""),
                             time_ms=summarize((g.durations_us / 1000.0).tolist()).as_dict(),
                             tensor_cores=c.tensor_cores, tensor_core_evidence=evidence,
                             params={"kernel": g.name, "class": c.cls, "rule": c.rule, "device_index": g.device,
                                     "calls": len(g.durations_us), "kernel_time_us": g.total_us,
                                     "share": _share(g.total_us, kernel_time_us)})
        rows.append(row.as_dict())
    return rows


def notes_of(tl: Timeline, s: dict) -> list[str]:
    notes = []
    if s["kernel_count"] and s["unattributed_kernels"]:
        notes.append(f"{s['unattributed_kernels']} of {s['kernel_count']} kernels have no launching runtime call "
                     "in the trace (no matching correlation id): they count in every total, in no annotation, and "
                     "in the step whose CPU window holds their own start, if any")
    if not s["kernel_count"]:
        notes.append("no GPU kernel events (cat 'kernel'): was the trace recorded with "
                     "torch.profiler.ProfilerActivity.CUDA on a GPU?")
    for what, n in tl.skipped.items():
        notes.append(f"skipped {n} {what}")
    if s["tensor_core_unknown_share"]:
        notes.append(f"{s['tensor_core_unknown_share']:.1%} of kernel time is in kernels whose name does not tell "
                     "whether Tensor Cores / matrix cores ran them (tensor_cores: unknown)")
    return notes
