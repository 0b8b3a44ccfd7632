"""The prediction's document (schema dawnscope.predict/1): per prediction group side by side, the totals with their range and
the dominant assumption, the kernels not placed, the top kernels. Shared by a trace (`from_trace`) and a model's
recorded operators (`from_ops`)."""

from __future__ import annotations

import numpy as np

from microbench.core.verdict import IMPOSSIBLE
from microbench.predict.chips import Chip, assumptions
from microbench.predict.estimate import Fabrics, Scenario, Variant, datasheet_roof_us, predict_activities
from microbench.predict.kernels import GROUP_LABELS, GROUPS, ActivityWork

SCHEMA = "dawnscope.predict/1"
VARIANTS = {
    "compute": Variant(datasheet_compute=True),
    "memory": Variant(datasheet_memory=True),
    "floor": Variant(hold_floor=True),
    "waves": Variant(no_waves=True),
    "slack": Variant(scale_slack=True),
}
TOP = 15


def _by_group(w: ActivityWork, t: np.ndarray) -> dict[str, float]:
    return {g: float(t[w.group == g].sum()) for g in GROUPS if (w.group == g).any()}


def _range(
    w: ActivityWork, src: Chip, tgt: Chip, scenario: Scenario, fabrics, base_total: float, busy_of, roof: np.ndarray
) -> dict:
    """Each assumption replaced by its alternative, one at a time: the busy time it gives and its move."""
    alts = assumptions().get("alternatives", {})
    rows = []
    for name, variant in VARIANTS.items():
        t, _ = predict_activities(w, src, tgt, scenario, variant, fabrics)
        busy = busy_of(float(np.fmax(t, roof).sum()))  # raised to the datasheet roof, as the base is
        rows.append(
            {
                "name": name,
                "what": alts.get(name, {}).get("what", name),
                "busy_us": busy,
                "delta_us": busy - busy_of(base_total),
            }
        )
    dominant = max(rows, key=lambda r: abs(r["delta_us"]))["name"] if rows else None
    return {"assumptions": rows, "dominant": dominant, "validation": assumptions().get("validation")}


def _unplaced(w: ActivityWork, why: np.ndarray) -> list[dict]:
    out: dict[tuple, dict] = {}
    for i in np.flatnonzero(why != ""):
        g = out.setdefault(
            (w.names[i], why[i]),
            {"kernel": w.names[i], "class": str(w.cls[i]), "why": str(why[i]), "calls": 0, "time_us": 0.0},
        )
        g["calls"] += 1
        g["time_us"] += float(w.dur_us[i])
    return sorted(out.values(), key=lambda g: -g["time_us"])


def _top(w: ActivityWork, t: np.ndarray, flagged: np.ndarray) -> list[dict]:
    out: dict[str, dict] = {}
    for i in range(len(t)):
        g = out.setdefault(
            w.names[i],
            {
                "kernel": w.names[i],
                "class": GROUP_LABELS[w.group[i]],
                "calls": 0,
                "source_us": 0.0,
                "target_us": 0.0,
                "flops": 0.0,
                "above_roof": 0,
            },
        )
        g["calls"] += 1
        g["source_us"] += float(w.dur_us[i])
        g["target_us"] += float(t[i])
        g["flops"] += float(w.flops[i])
        g["above_roof"] += int(flagged[i])
    for g in out.values():
        # the one judge's word for a number that cannot be right (core.verdict: "impossible: ")
        g["flags"] = (
            [
                f"{IMPOSSIBLE}{g['above_roof']} call(s) predicted faster than the target's datasheet "
                "roofline allows: raised to it"
            ]
            if g["above_roof"]
            else []
        )
    return sorted(out.values(), key=lambda g: -g["source_us"])[:TOP]


def _ops(w: ActivityWork, t: np.ndarray) -> list[dict]:
    """Per modelled operator and shape: its kernels' time on both sides. Where two vendors' libraries split an
    op's work into different kernels, the op is what two traces of one workload have in common."""
    out: dict[str, dict] = {}
    for i in np.flatnonzero(w.op_label != None):  # noqa: E711 - elementwise comparison on an object array
        g = out.setdefault(w.op_label[i], {"op": w.op_label[i], "kernels": 0, "source_us": 0.0, "target_us": 0.0})
        g["kernels"] += 1
        g["source_us"] += float(w.dur_us[i])
        g["target_us"] += float(t[i])
    return sorted(out.values(), key=lambda g: -g["source_us"])


def _steps(w: ActivityWork, t: np.ndarray, totals: dict) -> list[dict]:
    """Per step: the source's busy time over its own activities and the prediction (same overlap per step)."""
    out = []
    step_of = totals.get("step_of")
    for j, st in enumerate(totals.get("per_step", [])):
        mine = step_of == j
        src_us = float(w.dur_us[mine].sum())
        ratio = float(t[mine].sum()) / src_us if src_us > 0 else 1.0
        out.append(
            {
                "name": st["name"],
                "source_busy_us": st["busy_us"],
                "target_busy_us": st["busy_us"] * ratio,
                "idle_us": st["idle_us"],
            }
        )
    return out


def build(
    w: ActivityWork, src: Chip, tgt: Chip, totals: dict, scenario: Scenario = Scenario(), fabrics: Fabrics | None = None
) -> dict:
    """`totals`: the source's busy_us, idle_us, gpu_span_us and steps (from the trace's GPU-time breakdown)."""
    t, why = predict_activities(w, src, tgt, scenario, Variant(), fabrics)
    # the one judge's rule: a number faster than the datasheet roof cannot be right; flagged, and raised to it
    roof = datasheet_roof_us(w, tgt, scenario)
    flagged = np.isfinite(roof) & (roof > t * (1 + 1e-9))
    t = np.where(flagged, roof, t)
    k_src, k_tgt = float(w.dur_us.sum()), float(t.sum())
    overlap = totals["busy_us"] / k_src if k_src > 0 else 1.0

    def busy_of(kernel_us: float) -> float:
        return kernel_us * overlap

    rng = _range(w, src, tgt, scenario, fabrics, k_tgt, busy_of, roof)
    busy = busy_of(k_tgt)
    lo = busy + sum(min(r["delta_us"], 0.0) for r in rng["assumptions"])
    hi = busy + sum(max(r["delta_us"], 0.0) for r in rng["assumptions"])
    per_step = _steps(w, t, totals)
    # per step: the mean over the steps of each one's own busy time (activity outside every step left out)
    src_step = float(np.mean([st["source_busy_us"] for st in per_step])) if per_step else totals["busy_us"]
    tgt_step = float(np.mean([st["target_busy_us"] for st in per_step])) if per_step else busy
    by_src, by_tgt = _by_group(w, w.dur_us), _by_group(w, t)
    by_src["idle"] = by_tgt["idle"] = totals["idle_us"]
    groups = [
        {
            "class": g,
            "label": GROUP_LABELS[g],
            "kernels": int((w.group == g).sum()) if g != "idle" else None,
            "source_us": by_src[g],
            "target_us": by_tgt[g],
            "ratio": by_tgt[g] / by_src[g] if by_src[g] > 0 else None,
        }
        for g in by_src
    ]
    return {
        "schema": SCHEMA,
        "source": {
            "device": src.name,
            "chip": src.as_dict(),
            "busy_us": totals["busy_us"],
            "busy_us_per_step": src_step,
            "idle_us": totals["idle_us"],
            "gpu_span_us": totals["gpu_span_us"],
            "kernel_time_us": k_src,
            "steps": totals.get("steps") or 0,
            "by_class_us": by_src,
        },
        "target": {
            "device": tgt.name,
            "chip": tgt.as_dict(),
            "busy_us": busy,
            "busy_us_low": max(lo, 0.0),
            "busy_us_high": hi,
            "busy_us_per_step": tgt_step,
            "idle_us": totals["idle_us"],
            "gpu_span_us": busy + totals["idle_us"],
            "kernel_time_us": k_tgt,
            "by_class_us": by_tgt,
        },
        "classes": groups,  # the report key keeps its name: it lists the prediction groups
        "range": rng,
        "scenario": {"dtype": scenario.dtype, "batch_scale": scenario.batch_scale},
        "unplaced": _unplaced(w, why),
        "unplaced_us": float(w.dur_us[why != ""].sum()),
        "above_roof_kernels": int(flagged.sum()),
        "steps": per_step,
        "kernels": _top(w, t, flagged),
        "ops": _ops(w, t),
        "notes": list(w.notes),
    }
