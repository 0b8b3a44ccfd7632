"""The performance sections of a trace report (microbench/timeline/analysis.py builds the rest): hardware
counters as Tensor Core evidence per kernel, the per-op model (FLOPs, achieved TFLOP/s, MFU), DLProf's
eligibility check, the GPU time breakdown per step and over the whole trace, and the kernels no rule knows.
Definitions: docs/traces.md."""
from __future__ import annotations

import numpy as np

from microbench.core import thresholds
from microbench.timeline import counters as C
from microbench.timeline import eligibility, gpu_time, opmetrics
from microbench.timeline.model import KERNEL, TC_VALUES, Timeline

TOP_UNKNOWN = 8
HOW_TO_ADD_A_RULE = ("add a [[kernel]] rule to microbench/data/kernel_rules.toml (pattern: a regular expression "
                     "searched in the kernel name; class; tensor_cores yes/no/unknown; note: the evidence), before "
                     "the general rules it would otherwise fall into, and a test with the real name "
                     "(tests/test_kernel_rules_hopper_blackwell_mi300.py)")


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


def steps_with_gpu_time(tl: Timeline, step_range: str | None = None) -> tuple[list[dict], object, dict]:
    """Per step (the one step rule), the GPU time breakdown over its own activities (gpu_time.step_breakdowns:
    every activity in exactly one step), and what lies outside the steps."""
    w, steps, outside = gpu_time.step_breakdowns(tl, step_range)
    return steps, w, outside


def _by_kernel(tl: Timeline) -> dict[tuple[str, int], np.ndarray]:
    """Kernel rows (not copies) per distinct (kernel name, device): the report's kernel rows."""
    k = tl.kernels
    groups: dict[tuple[str, int], list[int]] = {}
    for r in np.flatnonzero(k.category == KERNEL):
        groups.setdefault((tl.names[k.name[r]], int(k.device[r])), []).append(int(r))
    return {key: np.array(rows) for key, rows in groups.items()}


def apply_counters(tl: Timeline, kernel_flops: np.ndarray) -> dict[tuple[str, int], dict]:
    """Where the trace has hardware counters for a kernel: their verdict (counters.counter_verdict over the
    counters summed across its calls, against the model FLOPs attributed to it) replaces the name rule's in
    `tl.kernels.tensor_cores`, so every total agrees with the strongest evidence. Returns, per (name, device)
    with counters, what the report shows: counters, counted FLOPs, verdict, and the name's verdict it
    contradicts."""
    out = {}
    for key, rows in _by_kernel(tl).items():
        with_counters = [tl.counters[r] for r in rows if r in tl.counters]
        if not with_counters:
            continue
        summed = C.combine_calls(with_counters)
        cls = tl.classes[tl.kernels.cls[rows[0]]]
        v = C.counter_verdict(summed, cls.cls, float(kernel_flops[rows].sum()) or None)
        out[key] = {"counters": summed, "counted_flops": C.sass_flops(summed), "verdict": v,
                    "contradiction": C.contradiction(cls.tensor_cores, v), "name_verdict": cls.tensor_cores}
        if v.tensor_cores is not None:
            tl.kernels.tensor_cores[rows] = TC_VALUES.index(v.tensor_cores)
    return out


def kernel_evidence(kernels: list[dict], by_kernel: dict, kernel_flops: np.ndarray, counted: dict) -> list[str]:
    """Per kernel row of the report: the model FLOPs attributed to it, its achieved TFLOP/s, and, where the
    trace has counters, their verdict and evidence in place of the name's. Returns the contradictions."""
    found = []
    for row in kernels:
        p = row["params"]
        key = (p["kernel"], p["device_index"])
        rows = by_kernel.get(key, np.empty(0, dtype=int))
        flops = float(kernel_flops[rows].sum()) if len(rows) else 0.0
        if flops:
            p["model_flops"] = flops
            p["achieved_tflops"] = flops / (p["kernel_time_us"] * 1e6) if p["kernel_time_us"] else None
        c = counted.get(key)
        if c is None:
            continue
        p["counters"], p["counted_flops"] = c["counters"], c["counted_flops"]
        v = c["verdict"]
        if v.tensor_cores is None:
            p["counter_note"] = v.evidence
            continue
        if c["contradiction"]:
            found.append(f"{p['kernel'][:80]}: {c['contradiction']}")
            p["name_verdict"] = c["name_verdict"]
        row["tensor_cores"], row["tensor_core_evidence"], p["evidence"] = v.tensor_cores, v.evidence, "counters"
    return found


def unknown_kernels(kernels: list[dict], summary: dict) -> dict | None:
    """Where kernels whose Tensor Core use no rule settles take more than 5 % of kernel time: the top ones and
    how to add a rule."""
    share = summary.get("tensor_core_unknown_share") or 0.0
    if share <= thresholds.value("unknown_share_limit"):
        return None
    top = [{"kernel": k["params"]["kernel"], "class": k["params"]["class"], "kernel_time_us": k["params"]["kernel_time_us"],
            "share": k["params"]["share"]} for k in kernels if k["tensor_cores"] == "unknown"][:TOP_UNKNOWN]
    return {"share": share, "top": top, "how_to_add_a_rule": HOW_TO_ADD_A_RULE}


def model_of(tl: Timeline, devices: list[dict]) -> opmetrics.OpModel:
    return opmetrics.op_model(tl, datasheet_peaks(devices))


def performance(tl: Timeline, devices: list[dict], summary: dict, kernels: list[dict], model: opmetrics.OpModel,
                counted: dict, step_range: str | None = None, measured: dict | None = None) -> dict:
    """The sections this module adds to the report; `kernels` (the report's rows) gain evidence and FLOPs.
    `model` and `counted` come from model_of and apply_counters, run before the summary."""
    measured = measured or {}
    peaks = datasheet_peaks(devices)
    notes = list(model.notes)
    contradictions = kernel_evidence(kernels, _by_kernel(tl), model.kernel_flops, counted)
    steps, windows, outside = steps_with_gpu_time(tl, step_range)
    if windows.note:
        notes.append(windows.note)
    whole = summary["gpu_time"]
    mfu = opmetrics.mfu(tl, model, peaks, windows, whole["gpu_span_us"])
    for st, m in zip(steps, mfu["steps"]):
        st.update({"model_flops": m["model_flops"], "achieved_tflops": m["achieved_tflops"], "mfu": m["mfu"]})
    if measured and model.calls:
        at_meas, _, _ = opmetrics.time_at_peak_us(model.calls, measured)
        mfu["of_measured"] = at_meas / mfu["window_us"] if mfu["window_us"] else None
        mfu["measured_ceilings_tflops"] = measured
    dev = device_of(devices)
    notes += _notes(tl, model, peaks, dev)
    notes += [f"counters contradict the kernel name: {c}" for c in contradictions]
    ops = opmetrics.op_rows(tl, model, peaks, measured)
    notes += opmetrics.above_peak(ops)
    return {"steps": steps, "outside_steps": outside, "mfu": mfu, "ops": ops,
            "eligibility": opmetrics.eligibility_findings(tl, model, dev),
            "unknown_kernels": unknown_kernels(kernels, summary), "notes": notes}


def _notes(tl: Timeline, model: opmetrics.OpModel, peaks: dict, dev: eligibility.Device) -> list[str]:
    notes = []
    if model.calls and not peaks:
        notes.append("no datasheet peaks for this device: MFU and % of peak are not computed (give a measured "
                     "ceiling with --ceiling or --ceilings)")
    if model.calls and dev.vendor is None:
        notes.append("the trace names no device: the Tensor Core eligibility check, which depends on it, is skipped")
    if tl.meta.get("counter_ranges"):
        notes.append(f"CUPTI range-profiler trace: {tl.meta['counter_ranges']} kernels replayed one at a time with "
                     "hardware counters; their durations are the profiler's ranges, not kernel run times")
    if tl.meta.get("serialized"):
        notes.append(f"{tl.meta['serialized']}: kernel time is the sum of measured durations; spans and idle time "
                     "of this serialized timeline mean nothing")
    return notes
