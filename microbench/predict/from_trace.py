"""A trace's kernels predicted on another chip (docs/predict.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from microbench.comm.scale import load_fabric
from microbench.core.datasheet import find_entry
from microbench.core.errors import InputError
from microbench.predict import document
from microbench.predict.chips import assumptions, chip
from microbench.predict.estimate import Fabrics, Scenario
from microbench.predict.kernels import MATRIX, activity_work
from microbench.trace import gpu_time
from microbench.trace.analysis import device_entries, read_trace
from microbench.trace.timeline import KERNEL


def _source_floor(tl, w) -> float | None:
    """The trace's shortest compute kernel (not a copy, not communication): the source chip's floor as measured."""
    ok = (tl.activities.category == KERNEL) & ~np.isin(w.group, ("copies", "communication")) & (w.dur_us > 0)
    return float(w.dur_us[ok].min()) if ok.any() else None


def source_chip(tl, w, src_entry, source_measured: tuple[dict, float | None] = ({}, None)):
    """The trace's own chip: its bench.toml entry, with the trace's shortest compute kernel as its launch floor
    where the entry has none (capped at the default floor)."""
    d = assumptions()["defaults"]
    if src_entry.kernel_floor_us:
        return chip(src_entry, *source_measured)
    floor = min(_source_floor(tl, w) or d["kernel_floor_us"], d["kernel_floor_us"])
    return chip(src_entry, *source_measured, floor_us=floor, floor_source="the trace's shortest compute kernel")


def _source_entry(tl, path, cfg, source: str | None):
    if source:
        return find_entry(source, cfg.devices, "--source")
    names = [d["name"] for d in device_entries(tl, cfg) if d.get("name")]
    if not names:
        raise InputError(
            path, "the trace names no device (no deviceProperties): give --source DEVICE", key="deviceProperties"
        )
    try:
        return find_entry(names[0], cfg.devices, "deviceProperties.name")
    except InputError as e:
        raise InputError(path, f"{e.problem}; give --source DEVICE", key=e.key, value=e.value) from None


def _totals(tl) -> dict:
    """The source's GPU time (the one breakdown, timeline/gpu_time): the whole trace, and per step over the
    step's own activities (each activity in exactly one step)."""
    b = gpu_time.breakdown(tl)
    windows, steps, _ = gpu_time.step_breakdowns(tl)
    step_of = gpu_time.assign_steps(tl, windows).step if len(windows) else np.full(len(tl.activities), -1)
    return {
        "busy_us": b["busy_us"],
        "idle_us": b["idle_us"],
        "gpu_span_us": b["gpu_span_us"],
        "steps": len(windows),
        "step_of": step_of,
        "per_step": [{"name": st["name"], "busy_us": st["busy_us"], "idle_us": st["idle_us"]} for st in steps],
    }


def from_trace(
    path: str | Path,
    on: str,
    cfg,
    measured: tuple[dict, float | None] = ({}, None),
    source: str | None = None,
    source_measured: tuple[dict, float | None] = ({}, None),
    scenario: Scenario = Scenario(),
    fabrics: Fabrics | None = None,
) -> dict:
    """The prediction document of trace `path` on device `on` (a bench.toml key or name). `measured`: the
    target's measured ceilings (TFLOP/s by precision, memory TB/s) overriding published figures;
    `source_measured` the same for the trace's own chip."""
    tgt_entry = find_entry(on, cfg.devices, "--on")
    tl = read_trace(path)
    if not len(tl.activities):
        raise InputError(path, "no GPU kernels in the trace: nothing to predict", key="traceEvents")
    src_entry = _source_entry(tl, path, cfg, source)
    d = assumptions()["defaults"]
    w = activity_work(tl, src_entry.peaks_tflops, d["tile_m"], d["tile_n"])
    matrix_time = float(w.dur_us[np.isin(w.group, MATRIX)].sum())
    if w.modelled_ops == 0 and matrix_time > 0:
        raise InputError(
            path,
            f"GEMM / convolution / attention kernels ({matrix_time:,.0f} us) but no operator "
            "shapes: record with torch.profiler.profile(record_shapes=True)",
            key="Input Dims",
        )
    measured_floor = _source_floor(tl, w)
    src = source_chip(tl, w, src_entry, source_measured)
    same = tgt_entry.key == src_entry.key and not tgt_entry.kernel_floor_us
    tgt = chip(
        tgt_entry, *measured, **({"floor_us": src.floor_us, "floor_source": "the source's (same chip)"} if same else {})
    )
    doc = document.build(w, src, tgt, _totals(tl), scenario, fabrics)
    doc["file"] = str(path)
    if measured_floor is not None:
        doc["source"]["shortest_kernel_us"] = measured_floor
    return doc


def fabrics(target: str | None, source: str | None) -> Fabrics | None:
    """Both fabric presets (microbench/data/fabrics.toml) as the link a collective of one node crosses; None when
    neither is given (communication is then kept at the source's time and listed), one alone is bad input."""
    if not target and not source:
        return None
    if not target or not source:
        given = "--fabric" if target else "--source-fabric"
        raise InputError(
            None,
            "communication moves between two fabrics: give --fabric and --source-fabric",
            key=given,
            value=target or source,
        )

    s, t = load_fabric(source), load_fabric(target)
    return Fabrics(s.intra.bytes_per_s / 1e9, s.intra.latency_us, t.intra.bytes_per_s / 1e9, t.intra.latency_us)
