"""A trace's matrix work measured here (`roofline --from-trace`, docs/replay.md): per case group the best provider
on this machine and what the whole trace's matrix time would be with it.

The groups replayed take their measured time (the best provider's median per call x the trace's calls). The trace's
other matrix kernels (groups below the selection, operators left out, GEMM-class kernels without a shaped operator)
are moved by the prediction model (predict.estimate.predict_activities, the trace's chip to this one, this run's
measured ceilings as the target's achievable rates); on the trace's own chip a kernel keeps its time (the model's
ratio is 1); where this machine has no datasheet entry they cannot be placed, and the total is left open
(the replayed part and the rest at the trace's time are given apart)."""

from __future__ import annotations

import numpy as np

from microbench.core.datasheet import _measured, match_datasheet
from microbench.core.errors import InputError
from microbench.predict.chips import assumptions, chip
from microbench.predict.estimate import predict_activities
from microbench.predict.kernels import activity_work
from microbench.roofline.trace_cases import TraceCases


def best_times(rows: list[dict]) -> dict[tuple, tuple[str, float]]:
    """Per (op, shape, dtype): the provider with the lowest median time among the correct, timed rows (ms)."""
    best: dict[tuple, tuple[str, float]] = {}
    for r in rows:
        t = (r.get("time_ms") or {}).get("median")
        if r.get("status") != "ok" or not t:
            continue
        key = (r["op"], r["shape"], r["dtype"])
        if key not in best or t < best[key][1]:
            best[key] = (r["provider"], t)
    return best


def _group_rows(tc: TraceCases, best: dict, same: bool) -> list[dict]:
    """Per selected group: the best provider of each of its cases, their time per call summed (a convolution
    backward's two gradients: one operator's time in the trace), and ours / the trace's where the chip is the same."""
    out = []
    for g in tc.groups:
        picks = [best.get((c.op, c.shape.label(), c.dtype)) for c in g.cases]
        ours_us = sum(p[1] for p in picks) * 1e3 if all(picks) else None
        ratio = ours_us / g.us_per_call if same and ours_us is not None and g.us_per_call > 0 else None
        out.append(
            {
                "group": g.label(),
                "operators": dict(g.operators),
                "calls": g.calls,
                "trace_us_per_call": g.us_per_call,
                "trace_us": g.kernel_time_us,
                "best": [p[0] if p else None for p in picks],
                "ours_us_per_call": ours_us,
                "ours_us": ours_us * g.calls if ours_us is not None else None,
                "ratio_vs_trace": ratio,
            }
        )
    return out


def _rest_here(tc: TraceCases, same: bool, machine: str, cfg, ceilings: list) -> tuple[float | None, float, str]:
    """(the trace's other matrix kernels' time on this machine or None, their time in the trace, how)."""
    replayed = np.zeros(len(tc.timeline.activities), dtype=bool)
    for g in tc.groups:
        replayed[g.kernels] = True
    src_entry = next((d for d in cfg.devices if d.key == tc.datasheet_key), None)
    d = assumptions()["defaults"]
    w = activity_work(tc.timeline, dict(src_entry.peaks_tflops) if src_entry else {}, d["tile_m"], d["tile_n"])
    rest = tc.matrix_kernels & ~replayed  # the matrix-kernel time the replay did not measure
    trace_us = float(w.dur_us[rest].sum())
    if same:
        return trace_us, trace_us, "held at the trace's time (same chip: the prediction's ratio is 1)"
    tgt_entry, note = match_datasheet(machine, cfg.devices)
    if src_entry is None:
        return (
            None,
            trace_us,
            ("not placed: the trace's device has no datasheet entry, the prediction needs both chips"),
        )
    if tgt_entry is None:
        return None, trace_us, f"not placed: {note}; the prediction needs this machine's chip"
    try:
        rates, mem = _measured(None, ceilings)
    except InputError:
        rates, mem = {}, None
    t, _ = predict_activities(w, chip(src_entry), chip(tgt_entry, rates, mem))
    return float(t[rest].sum()), trace_us, f"predicted {src_entry.key} -> {tgt_entry.key} (predict.estimate)"


def summary(tc: TraceCases, rows: list[dict], machine: str, cfg, ceilings: list, same: bool, why: str) -> dict:
    """The `replay` block of results.json: the trace, the comparison's verdict, per group the best provider and
    time here, the left-out operators, and the whole trace's matrix time with the best providers."""
    groups = _group_rows(tc, best_times(rows), same)
    rest_here, rest_trace, how = _rest_here(tc, same, machine, cfg, ceilings)
    replayed_here = [g["ours_us"] for g in groups]
    replayed_trace = sum(g["trace_us"] for g in groups)
    timed = all(x is not None for x in replayed_here)
    total = sum(replayed_here) + rest_here if timed and rest_here is not None else None
    return {
        "trace": tc.path,
        "trace_device": tc.device,
        "trace_datasheet": tc.datasheet_key,
        "machine": machine,
        "compared": same,
        "comparison": why,
        "selection": tc.selection,
        "trace_matrix_us": tc.matrix_time_us,
        "groups": groups,
        "below_selection": [{"group": g.label(), "calls": g.calls, "trace_us": g.kernel_time_us} for g in tc.below],
        "left_out": tc.left_out,
        "replayed_trace_us": replayed_trace,
        "replayed_here_us": sum(replayed_here) if timed else None,
        "rest_trace_us": rest_trace,
        "rest_here_us": rest_here,
        "rest_how": how,
        "matrix_here_us": total,
    }
