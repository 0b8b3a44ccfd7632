"""The per-op performance model over a Timeline recorded with shapes: each GEMM / convolution / attention
operator's FLOPs and bytes (microbench.core.ops.aten.trace_work), the kernels it launched, achieved TFLOP/s against
the datasheet peak and a measured ceiling, model FLOPs utilisation (MFU) of the trace and of each step, and
DLProf's eligibility check (microbench/trace/eligibility.py). Definitions: docs/traces.md.

- An operator nested inside another modelled operator on the same thread (aten::addmm inside aten::linear,
  aten::_flash_attention_forward inside aten::scaled_dot_product_attention) counts once, as the outermost.
- A kernel belongs to the outermost modelled operator whose CPU time contains the kernel's launch (the runtime
  call with its correlation id) on the launching thread.
- The operator's FLOPs are spread over its GEMM-class kernels (class gemm / tc_gemm) in proportion to their
  duration (a split-K reduction or an element-wise epilogue gets none); an operator without one spreads them
  over all its kernels. Those are its math kernels.
- Two achieved rates per operator, each named: `op_tflops`, FLOPs over all its kernels' time (what the op
  costs: an aten::matmul's internal copies count), and `kernel_tflops`, FLOPs over its math kernels' time
  (how fast the math itself ran).
- Peak of an operator: the datasheet peak of its input precision; fp32 is judged against TF32 where its
  kernels ran on Tensor Cores, else against the fp32 (CUDA core) peak.
- MFU of a window (a step: its CPU duration, or to its last GPU activity where that is later; the whole trace:
  the steps' summed time and the operators inside them, or the span from the first to the last GPU activity
  where there are no steps) = sum over its operators of FLOPs / peak, over the window: achieved model FLOP/s
  over peak, PaLM's definition, with mixed precisions weighted per operator. Above 100 % it is flagged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from microbench.core import dtypes, thresholds
from microbench.core.dtypes import PRECISION_OF
from microbench.core.ops.aten import OpWork, dtype_of, modelled_ops, trace_other_work, trace_work
from microbench.trace import eligibility
from microbench.trace.classify import class_set, classify_operator
from microbench.trace.timeline import KERNEL, NO_ID, TC_VALUES, Timeline, positions_by_key

TOP_ELIGIBLE_OPS = 10  # operators listed behind the eligibility-without-shapes share


@dataclass
class OpCalls:
    """One modelled operator call at the outermost level, with its kernels."""

    row: int  # row in tl.cpu_ops
    name: str
    work: OpWork
    kernels: np.ndarray  # kernel rows: every kernel the operator launched
    kernel_time_us: float  # their summed duration: the op's time on the GPU, copies and epilogues included
    math_time_us: float  # the summed duration of its math kernels (GEMM-class, else all): the FLOPs' carriers
    precision: str | None  # the datasheet column its peak comes from


@dataclass
class WorkModel:
    calls: list[OpCalls]
    kernel_flops: np.ndarray  # per kernel row: model FLOPs attributed to it (0 where none)
    notes: list[str] = field(default_factory=list)


def _arg(tl: Timeline, col: str, row: int):
    ids = getattr(tl.cpu_ops, col, None)
    if ids is None or ids[row] == NO_ID:
        return None
    return tl.arg_values[ids[row]]


def _outermost(tl: Timeline, rows: np.ndarray) -> np.ndarray:
    """Of the given cpu_op rows, those not inside another of them on the same thread."""
    ops = tl.cpu_ops
    order = rows[np.lexsort((-ops.dur_us[rows], ops.ts_us[rows], ops.thread[rows]))]
    keep, cur_thread, cur_end = [], None, -np.inf
    for r in order:
        if ops.thread[r] == cur_thread and ops.ts_us[r] < cur_end:
            continue
        keep.append(r)
        cur_thread, cur_end = ops.thread[r], ops.ts_us[r] + ops.dur_us[r]
    return np.array(keep, dtype=np.int64)


def _kernel_owner(tl: Timeline, tops: np.ndarray) -> np.ndarray:
    """Per kernel row: the index into `tops` of the operator that launched it, -1 for none. `tops` do not nest,
    so the latest one started before a launch owns it or none does (no look-back past an ended one)."""
    owner = np.full(len(tl.activities), -1, dtype=np.int64)
    kernels = np.flatnonzero(tl.activities.category == KERNEL)
    if not len(tops) or not len(kernels):
        return owner
    rows = _innermost_owner(tl, tops, kernels, max_back=1)
    index_of = np.full(len(tl.cpu_ops), -1, dtype=np.int64)
    index_of[tops] = np.arange(len(tops))
    owner[kernels] = np.where(rows >= 0, index_of[np.maximum(rows, 0)], -1)
    return owner


def _precision(work: OpWork, kernel_tc: np.ndarray, peaks: dict) -> str | None:
    col = PRECISION_OF.get(work.dtype or "")
    # fp32 operands on Tensor Cores run as TF32, unless the device is known and has no TF32 column (AMD's
    # fp32 matrix rate is its fp32 column)
    known_without_tf32 = bool(peaks) and "tf32" not in peaks
    if col == "fp32" and not known_without_tf32 and (kernel_tc == TC_VALUES.index("yes")).any():
        return "tf32"
    return col


def work_model(tl: Timeline, peaks: dict[str, float] | None = None) -> WorkModel:
    """The modelled operators of `tl` and the FLOPs attributed to each kernel. `peaks`: the device's datasheet
    peaks (TFLOP/s by column), used to pick TF32 for fp32."""
    names = modelled_ops()
    ops = tl.cpu_ops
    notes: list[str] = []
    kernel_flops = np.zeros(len(tl.activities))
    if not len(ops):
        return WorkModel([], kernel_flops, ["no CPU operators in the trace: no per-op model"])
    name_ids = [i for i, s in enumerate(tl.names.strings) if s in names]
    rows = np.flatnonzero(np.isin(ops.name, name_ids) & (ops.input_dims != NO_ID))
    if not len(rows):
        if np.isin(ops.name, name_ids).any():
            notes.append(
                "GEMM / convolution / attention operators without shapes: record with "
                "torch.profiler.profile(record_shapes=True) for FLOPs and MFU"
            )
        return WorkModel([], kernel_flops, notes)
    tops = _outermost(tl, rows)
    owner = _kernel_owner(tl, tops)
    gemm_cls = np.isin(tl.activities.cls, [i for i, c in enumerate(tl.classes) if c.cls in class_set("gemm")])
    calls, owned, none = [], positions_by_key(owner), np.empty(0, dtype=np.int64)
    for i, r in enumerate(tops):
        name = tl.names[ops.name[r]]
        work = trace_work(name, _arg(tl, "input_dims", r), _arg(tl, "input_types", r), _arg(tl, "concrete_inputs", r))
        mine = owned.get(i, none)
        t = float(tl.activities.dur_us[mine].sum())
        carriers = mine[gemm_cls[mine]] if gemm_cls[mine].any() else mine
        t_carry = float(tl.activities.dur_us[carriers].sum())
        if work.flops and t_carry > 0:
            kernel_flops[carriers] += work.flops * tl.activities.dur_us[carriers] / t_carry
        calls.append(
            OpCalls(
                int(r),
                name,
                work,
                mine,
                t,
                t_carry,
                _precision(work, tl.activities.tensor_cores[carriers], peaks or {}),
            )
        )
    unknown = sum(1 for c in calls if c.work.flops is None)
    if unknown:
        why = next(c.work.note for c in calls if c.work.flops is None)
        notes.append(f"{unknown} of {len(calls)} modelled operator calls have no FLOP count ({why})")
    return WorkModel(calls, kernel_flops, notes)


def _innermost_owner(tl: Timeline, rows: np.ndarray, kernels: np.ndarray, max_back: int = 64) -> np.ndarray:
    """Per kernel of `kernels`: the row of `tl.cpu_ops` among `rows` innermost around its launch on the launching
    thread: the latest-starting one that contains it. Looking back from the latest one started before the launch
    passes the operators that ended before it (earlier siblings and their descendants), at most `max_back` of
    them; -1 for none."""
    ops = tl.cpu_ops
    owner = np.full(len(kernels), -1, dtype=np.int64)
    has, l_ts, l_thread, _ = tl.launch_of(kernels)
    for th in np.unique(ops.thread[rows]):
        mine = rows[ops.thread[rows] == th]
        mine = mine[np.lexsort((-ops.dur_us[mine], ops.ts_us[mine]))]  # by start; a parent before its child
        starts, ends = ops.ts_us[mine], ops.ts_us[mine] + ops.dur_us[mine]
        sel = np.flatnonzero(has & (l_thread == th))
        pos = np.searchsorted(starts, l_ts[sel], "right") - 1
        for _ in range(max_back):
            ok = pos >= 0
            hit = ok & (ends[np.maximum(pos, 0)] >= l_ts[sel])
            owner[sel[hit]] = mine[pos[hit]]
            sel, pos = sel[ok & ~hit], pos[ok & ~hit] - 1
            if not len(sel):
                break
    return owner


def other_kernel_work(tl: Timeline, work_model: WorkModel) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel row: (FLOPs, bytes) of the kernels no modelled operator owns (element-wise, normalization,
    reduction, gathers, copies), from the innermost recorded operator that launched each
    (core.ops.aten.trace_other_work), spread over that operator's kernels by duration; 0 FLOPs and NaN bytes
    where the trace does not say."""
    n = len(tl.activities)
    flops, nbytes = np.zeros(n), np.full(n, np.nan)
    owned = np.zeros(n, dtype=bool)
    for c in work_model.calls:
        owned[c.kernels] = True
    kernels = np.flatnonzero(~owned & (tl.activities.category == KERNEL))
    rows = np.flatnonzero(tl.cpu_ops.input_dims != NO_ID) if len(tl.cpu_ops) else np.empty(0, dtype=np.int64)
    if not len(kernels) or not len(rows):
        return flops, nbytes
    owner = _innermost_owner(tl, rows, kernels)
    for r, at in positions_by_key(owner).items():
        mine = kernels[at]
        name = tl.names[tl.cpu_ops.name[r]]
        work = trace_other_work(
            name,
            classify_operator(name).cls,
            _arg(tl, "input_dims", r),
            _arg(tl, "input_types", r),
            _arg(tl, "concrete_inputs", r),
        )
        t = tl.activities.dur_us[mine]
        if work is None or t.sum() <= 0:
            continue
        flops[mine], nbytes[mine] = work[0] * t / t.sum(), work[1] * t / t.sum()
    return flops, nbytes


def shape_label(work: OpWork) -> str:
    d = work.dims
    if work.family in ("conv", "conv_bwd"):
        return f"N={d.get('n')} C={d.get('c')} K={d.get('k')} groups={d.get('groups')}"
    if not d:
        return "?"
    b = f"{d['batch']}x " if d.get("batch", 1) != 1 else ""
    return f"{b}M={d['m']} N={d['n']} K={d['k']}" + (" causal" if d.get("causal") else "")


def _pct(x: float | None, of: float | None):
    return 100.0 * x / of if x is not None and of else None


def _per_us(amount: int | None, time_us: float, unit: float) -> float | None:
    return amount / (time_us * unit) if amount is not None and time_us > 0 else None


def op_rows(tl: Timeline, work_model: WorkModel, peaks: dict[str, float], measured: dict[str, float]) -> list[dict]:
    """Per operator name, shape and dtype: calls, FLOPs, bytes, kernel time, and achieved TFLOP/s two ways, each
    with its share of the datasheet peak and of the measured ceiling (TFLOP/s by datasheet column):
    `op_tflops` over the op's time on the GPU (`kernel_time_us`: all its kernels, the copies and casts an
    aten::matmul launches included: what the op costs), `kernel_tflops` over its math kernels' own time
    (`math_kernel_time_us`: the GEMM-class kernels, else all: how fast the math ran). Most kernel time first."""
    groups: dict[tuple, dict] = {}
    for c in work_model.calls:
        key = (c.name, shape_label(c.work), c.work.dtype)
        g = groups.setdefault(
            key,
            {
                "op": c.name,
                "family": c.work.family,
                "shape": key[1],
                "dtype": c.work.dtype,
                "precision": c.precision,
                "calls": 0,
                "flops": 0,
                "bytes": 0,
                "kernel_time_us": 0.0,
                "math_kernel_time_us": 0.0,
                "kernels": 0,
                "tc_kernel_time_us": 0.0,
                "note": c.work.note,
            },
        )
        g["calls"] += 1
        g["flops"] = None if c.work.flops is None or g["flops"] is None else g["flops"] + c.work.flops
        g["bytes"] = None if c.work.bytes_moved is None or g["bytes"] is None else g["bytes"] + c.work.bytes_moved
        g["kernel_time_us"] += c.kernel_time_us
        g["math_kernel_time_us"] += c.math_time_us
        g["kernels"] += len(c.kernels)
        yes = tl.activities.tensor_cores[c.kernels] == TC_VALUES.index("yes")
        g["tc_kernel_time_us"] += float(tl.activities.dur_us[c.kernels][yes].sum())
    out = []
    for g in groups.values():
        t, t_math = g["kernel_time_us"], g["math_kernel_time_us"]
        g["op_tflops"] = _per_us(g["flops"], t, 1e6)
        g["kernel_tflops"] = _per_us(g["flops"], t_math, 1e6)
        for basis, tflops in (("", g["op_tflops"]), ("kernel_", g["kernel_tflops"])):
            g[f"{basis}pct_of_datasheet"] = _pct(tflops, peaks.get(g["precision"]))
            g[f"{basis}pct_of_measured"] = _pct(tflops, measured.get(g["precision"]))
        g["achieved_gbps"] = _per_us(g["bytes"], t, 1e3)
        out.append(g)
    return sorted(out, key=lambda g: -g["kernel_time_us"])


def above_peak(rows: list[dict]) -> list[str]:
    """Impossible numbers, flagged: operators whose math kernels beat the datasheet peak of their precision by
    more than `kernel_above_peak_slack` (microbench/data/thresholds.toml); their FLOP model or the attribution
    of kernels to them is wrong, and neither rate of theirs should be believed. And operators above the measured
    ceiling given with --ceilings by more than `above_ceiling_slack`: flagged, as the judge flags such a row."""
    slack = thresholds.value("kernel_above_peak_slack")
    roof_slack = thresholds.value("above_ceiling_slack")
    impossible = [
        f"{r['op']} {r['shape']} {r['dtype']}: its math kernels ran at {r['kernel_tflops']:.3g} TFLOP/s, "
        f"{r['kernel_pct_of_datasheet']:.0f} % of the {r['precision']} datasheet peak: impossible (a wrong FLOP "
        "model, or kernels that are not its own)"
        for r in rows
        if (r.get("kernel_pct_of_datasheet") or 0) > 100 * (1 + slack)
    ]
    # the judge's rule for a benchmark row above its measured roof (roofline/judge.py): flagged, never celebrated
    above_roof = [
        f"{r['op']} {r['shape']} {r['dtype']}: its math kernels ran at {r['kernel_tflops']:.3g} TFLOP/s, "
        f"{r['kernel_pct_of_measured']:.0f} % of the measured {r['precision']} ceiling (--ceilings): above the measured "
        "roof, flagged (the ceiling missed the library's fastest path or was measured on a busy machine, or the "
        "FLOP model is wrong)"
        for r in rows
        if (r.get("kernel_pct_of_measured") or 0) > 100 * (1 + roof_slack)
        and (r.get("kernel_pct_of_datasheet") or 0) <= 100 * (1 + slack)
    ]
    return impossible + above_roof


def time_at_peak_us(calls: list[OpCalls], peaks: dict[str, float]) -> tuple[float, int, list[str]]:
    """Sum over the calls of FLOPs / peak (microseconds at the datasheet peak), all the calls' FLOPs, and the
    precisions without a peak (their FLOPs count in the total, not in the time at peak)."""
    at_peak, flops, missing = 0.0, 0, set()
    for c in calls:
        if not c.work.flops:
            continue
        flops += c.work.flops
        peak = peaks.get(c.precision or "")
        if peak:
            at_peak += c.work.flops / (peak * 1e6)
        else:
            missing.add(str(c.precision))
    return at_peak, flops, sorted(missing)


def _calls_by_window(tl: Timeline, calls: list, windows) -> dict[int, list[int]]:
    """Per window j: the indices of `calls` whose operator starts inside it (its ts within [ts, end], same
    process), by a search over the calls' sorted starts, not a pass over every call per window."""
    if not calls:
        return {}
    rows = np.array([c.row for c in calls])
    ts, pid = tl.cpu_ops.ts_us[rows], tl.cpu_ops.pid[rows]
    order = np.argsort(ts, kind="stable")
    starts = ts[order]
    out = {}
    for j in range(len(windows)):
        at = order[
            np.searchsorted(starts, windows.ts_us[j], "left") : np.searchsorted(starts, windows.end_us[j], "right")
        ]
        out[j] = sorted(int(i) for i in at if pid[i] == windows.pid[j])
    return out


def mfu(
    tl: Timeline,
    work_model: WorkModel,
    peaks: dict[str, float],
    windows=None,
    gpu_span_us: float | None = None,
    spans_us=None,
) -> dict:
    """MFU of the whole trace and of each window (steps): see the module docstring. `spans_us`: each step's time
    from its start to its last GPU activity (the plugin window, gpu_time.plugin_windows), which a step whose CPU
    runs ahead of its GPU needs: over the CPU range alone its MFU read 3,706 %. Where given it is the step's time
    as it is: a plugin window starts where the previous one ends, so the steps' sum counts no time twice (the
    longer of it and the CPU range counted 3,193 us twice on the shared V100 ResNet-50 sample's six steps)."""
    per_step, at_peak_in, flops_in = [], 0.0, 0
    if windows is not None and len(windows):
        in_step = _calls_by_window(tl, work_model.calls, windows)
        for j in range(len(windows)):
            mine = [work_model.calls[i] for i in in_step.get(j, ())]
            at_peak, flops, _ = time_at_peak_us(mine, peaks)
            at_peak_in, flops_in = at_peak_in + at_peak, flops_in + flops
            wall = float(spans_us[j]) if spans_us is not None else float(windows.dur_us[j])
            per_step.append(
                {
                    "name": windows.names[j],
                    "model_flops": flops,
                    "wall_us": wall,
                    "achieved_tflops": flops / (wall * 1e6) if wall > 0 and flops else None,
                    "mfu": at_peak / wall if wall > 0 and at_peak else None,
                }
            )
    at_peak, flops, missing = time_at_peak_us(work_model.calls, peaks)
    if per_step:  # the steps' operators over the steps' time: an operator outside every step is in neither
        at_peak, flops = at_peak_in, flops_in
    window = sum(s["wall_us"] for s in per_step) if per_step else gpu_span_us
    basis = (
        "the steps' summed time, each to its last GPU activity"
        if per_step
        else "the span of GPU activity (no steps in the trace)"
    )
    out = {
        "model_flops": flops,
        "window_us": window,
        "window": basis,
        "achieved_tflops": flops / (window * 1e6) if window and flops else None,
        "mfu": at_peak / window if window and at_peak else None,
        "precisions_without_peak": missing,
        "steps": per_step,
    }
    return out | {"impossible": mfu_above_peak(out)}


def mfu_above_peak(m: dict) -> list[str]:
    """Impossible numbers, flagged: an MFU above 100 % (plus kernel_above_peak_slack) says the FLOP model, the
    peaks or the window is wrong, and the figure is not to be believed."""
    limit = 1 + thresholds.value("kernel_above_peak_slack")
    rows = [("the trace", m.get("mfu"))] + [(st["name"], st.get("mfu")) for st in m.get("steps") or []]
    return [
        f"{name}: MFU {v:.1%} is above 100 %: impossible (a wrong FLOP model or peak, or a window that misses GPU time)"
        for name, v in rows
        if v is not None and v > limit
    ]


def first_float_dtype(tl: Timeline, row: int, table: str = "cpu_ops") -> str | None:
    """The first floating-point `Input type` of a CPU operator (or range) row, as our dtype name; None if none."""
    ids = getattr(getattr(tl, table), "input_types", None)
    types = tl.arg_values[ids[row]] if ids is not None and ids[row] != NO_ID else None
    for t in types or []:
        d = dtype_of(t) if isinstance(t, str) else None
        if d is not None:
            return d
    return None


def _already_16bit(dtype: str | None) -> bool:
    """An operator already in a 16-bit type the matrix units take (core/dtypes.py: fp16, bf16): AMP cannot move it;
    a kernel without Tensor Cores under it is the library's choice."""
    known = dtype is not None and dtype in dtypes.BY_NAME
    return known and dtypes.get(dtype).bytes == 2 and dtypes.get(dtype).matrix_units


def eligible_by_operator(tl: Timeline, device: eligibility.Device) -> dict:
    """Eligibility without shapes, the TensorBoard plugin's measure (eligibility.toml [by_operator]): the kernel
    time whose innermost launching operator is of a Tensor Core family in a dtype the chip takes or could take
    with AMP / TF32, split into what ran on Tensor Cores, what the evidence says did not (`unused`) and what no
    evidence settles (`unknown`: not counted as unused), with the operators behind it and the unused time of
    operators already in a 16-bit type (`unused_16bit_time_us`: their remedy is the library's algorithm, not AMP)."""
    kernels = np.flatnonzero(tl.activities.category == KERNEL)
    total = float(tl.activities.dur_us[kernels].sum())
    out = {
        "basis": "the launching operator's name and recorded dtype (TensorBoard plugin rule; no shapes needed)",
        "eligible_time_us": 0.0,
        "unused_time_us": 0.0,
        "untyped_time_us": 0.0,
        "unknown_time_us": 0.0,
        "unused_16bit_time_us": 0.0,
        "eligible_share": None,
        "unused_share": None,
        "ops": [],
    }
    if not len(tl.cpu_ops) or not len(kernels) or total <= 0:
        return out
    owner = _innermost_owner(tl, np.arange(len(tl.cpu_ops)), kernels)
    no, unknown = TC_VALUES.index("no"), TC_VALUES.index("unknown")
    by_op: dict[tuple[str, str | None], list[float]] = {}
    for r, at in positions_by_key(owner).items():
        name = tl.names[tl.cpu_ops.name[r]]
        if not eligibility.operator_could_use_matrix_units(name):
            continue
        dtype = first_float_dtype(tl, r)
        if not eligibility.dtype_could_use_matrix_units(dtype, device):
            continue
        mine = kernels[at]
        t = by_op.setdefault((name, dtype), [0.0, 0.0, 0.0])
        dur, tc = tl.activities.dur_us[mine], tl.activities.tensor_cores[mine]
        t[0] += float(dur.sum())
        t[1] += float(dur[tc == no].sum())
        t[2] += float(dur[tc == unknown].sum())
    out["eligible_time_us"] = sum(t[0] for t in by_op.values())
    out["unused_time_us"] = sum(t[1] for t in by_op.values())
    out["unknown_time_us"] = sum(t[2] for t in by_op.values())
    out["untyped_time_us"] = sum(t[1] for (_, d), t in by_op.items() if d is None)
    out["unused_16bit_time_us"] = sum(t[1] for (_, d), t in by_op.items() if _already_16bit(d))
    out["eligible_share"], out["unused_share"] = out["eligible_time_us"] / total, out["unused_time_us"] / total
    out["ops"] = [
        {
            "op": n,
            "dtype": d,
            "time_us": t[0],
            "unused_time_us": t[1],
            "unknown_time_us": t[2],
            "unused_share": t[1] / total,
        }
        for (n, d), t in sorted(by_op.items(), key=lambda kv: -kv[1][1])
    ][:TOP_ELIGIBLE_OPS]
    return out


def eligibility_findings(tl: Timeline, work_model: WorkModel, device: eligibility.Device) -> dict:
    """DLProf's check over every modelled operator call: findings grouped by rule and operator, with the kernel
    time at stake, most time first; and the total time eligible for Tensor Cores but run without them."""
    autocast_id = tl.names.find("aten::_autocast_to_reduced_precision")
    autocast = autocast_id != NO_ID and bool((tl.cpu_ops.name == autocast_id).any())
    gemm = {i for i, c in enumerate(tl.classes) if c.cls in class_set("gemm")}
    out: dict[tuple, dict] = {}
    for c in work_model.calls:
        rows = [r for r in c.kernels if tl.activities.cls[r] in gemm]
        if not rows:
            continue
        tc = [TC_VALUES[tl.activities.tensor_cores[r]] for r in rows]
        names = [tl.names[tl.activities.name[r]] for r in rows]
        f = eligibility.check(c.work, tc, names, device, autocast, _arg(tl, "input_strides", c.row))
        if f is None:
            continue
        g = out.setdefault(
            (f.rule, c.name, f.reason),
            {"rule": f.rule, "op": c.name, "reason": f.reason, "remedy": f.remedy, "calls": 0, "time_us": 0.0},
        )
        g["calls"] += 1
        g["time_us"] += c.kernel_time_us
    findings = sorted(out.values(), key=lambda g: -g["time_us"])
    return {
        "eligible_unused_us": sum(g["time_us"] for g in findings),
        "autocast_in_trace": autocast,
        "findings": findings,
        "by_operator": eligible_by_operator(tl, device),
    }
