"""The performance sections of a trace report (microbench/timeline/analysis.py builds the rest): hardware
counters as Tensor Core evidence per kernel, the per-op model (FLOPs, achieved TFLOP/s, MFU), DLProf's
eligibility check, the GPU time breakdown per step and over the whole trace, and the kernels no rule knows.
Definitions: docs/traces.md."""
from __future__ import annotations

import numpy as np

from microbench.timeline import counters as C
from microbench.timeline import eligibility, gpu_time, metrics, opmetrics
from microbench.timeline.model import CATEGORIES, KERNEL, TC_VALUES, Timeline

UNKNOWN_SHARE_LIMIT = 0.05
TOP_UNKNOWN = 8
HOW_TO_ADD_A_RULE = ("add a [[kernel]] rule to microbench/data/kernel_rules.toml (pattern: a regular expression "
                     "searched in the kernel name; class; tensor_cores yes/no/unknown; note: the evidence), before "
                     "the general rules it would otherwise fall into, and a test with the real name "
                     "(tests/test_kernel_rules_recent.py)")


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


def _kinds(tl: Timeline, rows: np.ndarray) -> np.ndarray:
    """0 compute kernel, 1 communication kernel, 2 memcpy/memset (gpu_time.breakdown's kinds)."""
    comm = tl.class_mask("comm")[rows]
    return np.where(tl.kernels.category[rows] != KERNEL, 2, np.where(comm, 1, 0))


def breakdown_of(tl: Timeline, rows: np.ndarray) -> dict[str, float]:
    k = tl.kernels
    return gpu_time.breakdown(k.ts_us[rows], k.end_us[rows], _kinds(tl, rows), k.device[rows])


def steps_with_gpu_time(tl: Timeline, step_range: str | None = None) -> tuple[list[dict], object]:
    """metrics.step_times plus, per step, the GPU time breakdown of everything launched inside it (kernels,
    memcpy, memset): gpu_span_us becomes the span of that activity, first start to last end."""
    w = tl.step_windows(step_range)
    steps = metrics.step_times(tl, step_range)
    act = metrics.in_windows(tl, w, categories=range(len(CATEGORIES)))
    for st, rows in zip(steps, act.rows):
        st.update(breakdown_of(tl, rows))
    return steps, w


def kernel_evidence(tl: Timeline, kernels: list[dict], kernel_flops: np.ndarray, peaks: dict,
                    measured: dict) -> list[str]:
    """Per kernel row of the report (one per distinct kernel and device): the model FLOPs attributed to it and
    its achieved TFLOP/s; where the trace has hardware counters, their verdict replaces the name's (counters
    are the strongest evidence) and a contradiction is reported. Returns the contradictions."""
    k = tl.kernels
    key_rows: dict[tuple[str, int], list[int]] = {}
    for r in np.flatnonzero(k.category == KERNEL):
        key_rows.setdefault((tl.names[k.name[r]], int(k.device[r])), []).append(int(r))
    found = []
    for row in kernels:
        p = row["params"]
        rows = key_rows.get((p["kernel"], p["device_index"]), [])
        flops = float(kernel_flops[rows].sum()) if rows else 0.0
        t = p["kernel_time_us"]
        if flops:
            p["model_flops"] = flops
            p["achieved_tflops"] = flops / (t * 1e6) if t else None
        with_counters = [tl.counters[r] for r in rows if r in tl.counters]
        if not with_counters:
            continue
        summed: dict[str, float] = {}
        for m in with_counters:
            for name, v in m.items():
                if isinstance(v, (int, float)):
                    summed[name] = summed.get(name, 0.0) + v
        p["counters"] = summed
        p["counted_flops"] = C.sass_flops(summed)
        v = C.counter_verdict(summed, p["class"], flops or None)
        if v.tensor_cores is None:
            p["counter_note"] = v.evidence
            continue
        if (line := C.contradiction(row["tensor_cores"], v)) is not None:
            found.append(f"{p['kernel'][:80]}: {line}")
            p["name_verdict"] = row["tensor_cores"]
        row["tensor_cores"], row["tensor_core_evidence"] = v.tensor_cores, v.evidence
        p["evidence"] = "counters"
    return found


def unknown_kernels(kernels: list[dict], summary: dict) -> dict | None:
    """Where kernels whose Tensor Core use no rule settles take more than 5 % of kernel time: the top ones and
    how to add a rule."""
    share = summary.get("tensor_core_unknown_share") or 0.0
    if share <= UNKNOWN_SHARE_LIMIT:
        return None
    top = [{"kernel": k["params"]["kernel"], "class": k["params"]["class"], "kernel_time_us": k["params"]["kernel_time_us"],
            "share": k["params"]["share"]} for k in kernels if k["tensor_cores"] == "unknown"][:TOP_UNKNOWN]
    return {"share": share, "top": top, "how_to_add_a_rule": HOW_TO_ADD_A_RULE}


def performance(tl: Timeline, devices: list[dict], summary: dict, kernels: list[dict], step_range: str | None = None,
                measured: dict | None = None) -> dict:
    """The sections this module adds to the report; `kernels` (the report's rows) gain evidence and FLOPs."""
    measured = measured or {}
    peaks = datasheet_peaks(devices)
    model = opmetrics.op_model(tl, peaks)
    notes = list(model.notes)
    contradictions = kernel_evidence(tl, kernels, model.kernel_flops, peaks, measured)
    steps, windows = steps_with_gpu_time(tl, step_range)
    if windows.note:
        notes.append(windows.note)
    all_rows = np.arange(len(tl.kernels))
    whole = breakdown_of(tl, all_rows)
    mfu = opmetrics.mfu(tl, model, peaks, windows, whole["gpu_span_us"])
    for st, m in zip(steps, mfu["steps"]):
        st.update({"model_flops": m["model_flops"], "achieved_tflops": m["achieved_tflops"], "mfu": m["mfu"]})
    if measured and model.calls:
        at_meas, _, _ = opmetrics.time_at_peak_us(model.calls, measured)
        mfu["of_measured"] = at_meas / mfu["window_us"] if mfu["window_us"] else None
        mfu["measured_ceilings_tflops"] = measured
    if model.calls and not peaks:
        notes.append("no datasheet peaks for this device: MFU and % of peak are not computed (give a measured "
                     "ceiling with --ceiling-tflops or --ceilings)")
    if tl.meta.get("counter_ranges"):
        notes.append(f"CUPTI range-profiler trace: {tl.meta['counter_ranges']} kernels replayed one at a time with "
                     "hardware counters; their durations are the profiler's ranges, not kernel run times")
    if tl.meta.get("serialized"):
        notes.append(f"{tl.meta['serialized']}: kernel time is the sum of measured durations; spans and idle time "
                     "of this serialized timeline mean nothing")
    notes += [f"counters contradict the kernel name: {c}" for c in contradictions]
    return {"gpu_time": whole, "steps": steps, "mfu": mfu,
            "ops": opmetrics.op_rows(tl, model, peaks, measured),
            "eligibility": opmetrics.eligibility_findings(tl, model, device_of(devices)),
            "unknown_kernels": unknown_kernels(kernels, summary), "notes": notes}
