"""A profiler trace's matrix work as benchmark cases (`dawnscope roofline --from-trace`; docs/replay.md).

Each GEMM / batched GEMM / convolution operator the trace recorded with shapes becomes the cases the runner
measures, by the one work model: the operator's calls are the trace's modelled calls (trace.opmetrics.work_model:
outermost operator, its kernels and their time), and the case is built by the op family's spec
(core.ops.*.aten_cases, the same that replays a model's step) from the call it wraps (aten::linear -> its
aten::addmm, aten::conv2d -> its aten::convolution), read through core.ops.aten.trace_call, with the recorded
strides (transposes) and Concrete Inputs (stride, padding, dilation, groups). A case whose FLOPs differ from the
work model's for its operator is not replayed. Calls with the same cases are one group (each case measured once,
however often it ran), ranked by the trace's kernel time. What cannot be replayed (no shapes, attention, 3-D
convolution, a dtype without cases) is listed with its time, never guessed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from microbench.core import ops, thresholds
from microbench.core.config import CaseSet
from microbench.core.datasheet import match_datasheet
from microbench.core.errors import InputError
from microbench.core.ops import case_work
from microbench.core.ops.aten import trace_call
from microbench.core.shapes import AttentionShape, Case
from microbench.roofline import registry
from microbench.trace import opmetrics
from microbench.trace.analysis import device_entries, read_trace
from microbench.trace.classify import class_set
from microbench.trace.timeline import KERNEL, NO_ID, Timeline


@dataclass(frozen=True)
class RecordedArg:
    """A tensor argument as a trace records it, with what a spec's aten_cases reads of a live tensor: its shape,
    dim() and stride() (the recorded `Input Strides`; row-major where none were recorded)."""

    shape: tuple
    strides: tuple

    def dim(self) -> int:
        return len(self.shape)

    def stride(self, i: int) -> int:
        return self.strides[i]


def contiguous_strides(shape) -> tuple:
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= max(d, 1)
    return tuple(reversed(out))


def _packed(a: RecordedArg) -> bool:
    """Row-major, or column-major in the last two dimensions (what a GEMM case's transposes express)."""
    if a.dim() < 2 or a.strides == contiguous_strides(a.shape):
        return True
    swapped = contiguous_strides(a.shape[:-2] + (a.shape[-1], a.shape[-2]))
    return a.strides == swapped[:-2] + (swapped[-1], swapped[-2])


def layout_notes(family: str, args: list) -> list[str]:
    """Where a case's layout is not the recorded one: a GEMM operand with strides no transpose expresses (a padded
    leading dimension: measured packed), a convolution recorded NCHW (conv2d cases run channels_last, the spec's
    layout)."""
    tensors = [a for a in args if isinstance(a, RecordedArg)]
    if family == "gemm":
        return [
            f"operand {list(a.shape)} with strides {list(a.strides)}: measured packed"
            for a in tensors
            if not _packed(a)
        ]
    x = next((a for a in tensors if a.dim() == 4 and a.strides == contiguous_strides(a.shape)), None)
    return ["recorded NCHW (contiguous) operands: measured channels_last (NHWC, the conv2d spec's layout)"] if x else []


@dataclass
class CaseGroup:
    """The calls of the trace that compute the same cases (one call: one GEMM, or a convolution backward's
    data and weight gradients), with their kernel time on the trace's device."""

    cases: tuple[Case, ...]
    operators: dict[str, int] = field(default_factory=dict)  # operator name -> calls
    calls: int = 0
    kernel_time_us: float = 0.0
    kernels: list[int] = field(default_factory=list)  # kernel rows of tl.activities
    strides_recorded: bool = True
    layout: set[str] = field(default_factory=set)  # where the measured layout is not the recorded one

    @property
    def us_per_call(self) -> float:
        return self.kernel_time_us / self.calls if self.calls else 0.0

    def label(self) -> str:
        return " + ".join(c.label() for c in self.cases)


@dataclass
class TraceCases:
    """What a trace gives the runner: the selected groups (most kernel time first), the ones below the
    selection, and what was left out with why."""

    path: str
    device: str | None  # the trace's device name (deviceProperties), None where it names none
    datasheet_key: str | None  # its bench.toml [devices] entry
    matrix_time_us: float  # the kernel time of every matrix operator and GEMM-class kernel of the trace
    groups: list[CaseGroup]
    below: list[CaseGroup]
    left_out: list[dict]
    selection: str
    timeline: Timeline = field(repr=False, default=None)
    matrix_kernels: np.ndarray = field(repr=False, default=None)  # per kernel row: counted in matrix_time_us

    @property
    def cases(self) -> tuple[Case, ...]:
        """Each selected case once."""
        return tuple(dict.fromkeys(c for g in self.groups for c in g.cases))

    def source(self, g: CaseGroup) -> dict:
        """Where a row of the group's cases came from (the row's `trace_source`)."""
        return {
            "trace": self.path,
            "operators": dict(g.operators),
            "calls": g.calls,
            "trace_kernel_time_us": g.kernel_time_us,
            "trace_us_per_call": g.us_per_call,
            "device": self.device,
            "group": g.label(),
            "group_cases": len(g.cases),
            "share_pct": 100.0 * g.kernel_time_us / self.matrix_time_us if self.matrix_time_us else None,
            **({} if g.strides_recorded else {"note": "no Input Strides recorded: row-major operands assumed"}),
            **({"layout": sorted(g.layout)} if g.layout else {}),
        }


def _arg(tl: Timeline, col: str, row: int):
    ids = getattr(tl.cpu_ops, col, None)
    return None if ids is None or ids[row] == NO_ID else tl.arg_values[ids[row]]


def _replayable_rows(tl: Timeline) -> np.ndarray:
    ops_ = tl.cpu_ops
    ids = [i for i, s in enumerate(tl.names.strings) if ops.for_aten(s) is not None]
    return np.flatnonzero(np.isin(ops_.name, ids) & (ops_.input_dims != NO_ID))


def _inner(tl: Timeline, row: int, replayable: np.ndarray) -> np.ndarray:
    """The outermost replayable operators within call `row` on its thread (itself, where it is one)."""
    o = tl.cpu_ops
    end = o.ts_us[row] + o.dur_us[row]
    inside = replayable[
        (o.thread[replayable] == o.thread[row])
        & (o.ts_us[replayable] >= o.ts_us[row])
        & (o.ts_us[replayable] + o.dur_us[replayable] <= end)
    ]
    return opmetrics._outermost(tl, inside) if len(inside) else inside


def _cases_of(tl: Timeline, row: int, dtype: str) -> tuple[list[Case], str, bool, list[str]]:
    """The cases of one replayable recorded call, why none, whether its strides were recorded, and its layout
    notes."""
    name = tl.names[tl.cpu_ops.name[row]]
    call = trace_call(name, _arg(tl, "input_dims", row), _arg(tl, "input_types", row), _arg(tl, "concrete_inputs", row))
    strides = _arg(tl, "input_strides", row)
    args = []
    for i, (shape, value) in enumerate(zip(call.shapes, call.values)):
        if shape is None:
            args.append(value)
            continue
        st = strides[i] if strides and i < len(strides) and isinstance(strides[i], list) else []
        args.append(RecordedArg(tuple(shape), tuple(st) if len(st) == len(shape) else contiguous_strides(shape)))
    spec = ops.for_aten(name)
    try:
        cases, why = spec.aten_cases(name, args, dtype)
    except (IndexError, TypeError, ValueError, KeyError) as e:
        return [], f"{name}: arguments {call.values} do not make a case ({type(e).__name__}: {e})", bool(strides), []
    return cases, why, bool(strides), layout_notes(spec.family, args) if strides else []


def _attention_case(tl: Timeline, c, dtype: str) -> tuple[tuple[Case, ...], str, bool, list[str]]:
    """An attention call's case, from the work model's dims (batch x heads, query and key lengths, head dim)."""
    d = c.work.dims
    if "backward" in c.name:
        return (), "attention backward: the attention cases are forward only", True, []
    if d.get("dv", d["k"]) != d["k"]:
        return (), f"value dim {d['dv']} != head dim {d['k']}: the attention cases have one head dim", True, []
    case = Case("attention", AttentionShape(d["batch"], d["m"], d["n"], d["k"], bool(d.get("causal"))), dtype)
    if case_work(case).flops != c.work.flops:
        return (), f"its case does {case_work(case).flops:,} FLOPs, the work model {c.work.flops:,}", True, []
    strides, dims = _arg(tl, "input_strides", c.row), _arg(tl, "input_dims", c.row)
    note = []
    if strides and dims and strides[0] != list(contiguous_strides(dims[0])):
        note = [f"Q {dims[0]} with strides {strides[0]}: measured contiguous [batch x heads, length, head dim]"]
    return (case,), "", bool(strides), note


def _call_cases(tl: Timeline, c, replayable, dtypes_known) -> tuple[tuple[Case, ...], str, bool, list[str]]:
    """The cases of one modelled call (outermost operator), or () and why not; whether its strides were recorded,
    its layout notes."""
    if c.work.flops is None:
        return (), c.work.note or "no FLOP count", True, []
    dtype = "tf32" if c.precision == "tf32" and c.work.dtype == "fp32" else c.work.dtype
    if dtype not in dtypes_known:
        return (), f"dtype {dtype}: no tolerance for it in the configuration (no cases of it)", True, []
    if c.work.family == "attention":
        return _attention_case(tl, c, dtype)
    inner = _inner(tl, c.row, replayable)
    if not len(inner):
        return (), f"no GEMM / convolution call inside {c.name} to replay", True, []
    cases, whys, recorded, notes = [], [], True, []
    for r in inner:
        got, why, rec, layout = _cases_of(tl, int(r), dtype)
        cases += got
        recorded &= rec
        notes += layout
        if why:
            whys.append(why)
    if whys or not cases:
        return (), "; ".join(whys) or "no case", recorded, []
    flops = sum(case_work(k).flops for k in cases)
    if flops != c.work.flops:
        return (
            (),
            (
                f"its cases do {flops:,} FLOPs, the work model {c.work.flops:,} for {c.name}: not the same "
                "problem, not replayed"
            ),
            recorded,
            [],
        )
    return tuple(cases), "", recorded, notes


def _left(out: dict, c, why: str) -> None:
    key = (c.name, opmetrics.shape_label(c.work), c.work.dtype, why)
    g = out.setdefault(
        key, {"op": c.name, "shape": key[1], "dtype": c.work.dtype, "why": why, "calls": 0, "time_us": 0.0}
    )
    g["calls"] += 1
    g["time_us"] += c.kernel_time_us


def _matrix_kernels(tl: Timeline, work_model) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel row: whether it is matrix work (launched by a modelled operator with shapes, or GEMM-class), and
    whether it is a GEMM-class kernel no such operator launched."""
    owned = np.zeros(len(tl.activities), dtype=bool)
    for c in work_model.calls:
        owned[c.kernels] = True
    gemm = np.isin(tl.activities.cls, [i for i, k in enumerate(tl.classes) if k.cls in class_set("gemm")])
    unowned = gemm & ~owned & (tl.activities.category == KERNEL)
    return owned | unowned, unowned


def _select(groups: list[CaseGroup], total_us: float, top: int | None, min_share_pct: float | None):
    """(selected, below, how): the top `top`, else the fewest covering replay_time_share of the matrix time;
    then without the groups under `min_share_pct` % of it."""
    if top is not None:
        n, how = top, f"the top {top} by kernel time"
    else:
        share = thresholds.value("replay_time_share")
        n, acc = len(groups), 0.0
        for i, g in enumerate(groups):
            acc += g.kernel_time_us
            if total_us > 0 and acc >= share * total_us:
                n = i + 1
                break
        how = f"those covering {share:.0%} of the trace's matrix-kernel time"
    chosen = groups[:n]
    if min_share_pct is not None:
        chosen = [g for g in chosen if total_us > 0 and 100.0 * g.kernel_time_us / total_us >= min_share_pct]
        how += f", each at least {min_share_pct:g} % of it"
    return chosen, [g for g in groups if g not in chosen], how


def _device(tl: Timeline, cfg) -> tuple[str | None, str | None]:
    names = [d["name"] for d in device_entries(tl, cfg) if d.get("name")]
    if not names:
        return None, None
    entry, _ = match_datasheet(names[0], cfg.devices)
    return names[0], entry.key if entry else None


def trace_cases(path: str | Path, cfg, top: int | None = None, min_share_pct: float | None = None) -> TraceCases:
    """The cases of trace `path` (see the module docstring). A trace without operator shapes, or without a GEMM or
    convolution to replay, is bad input (one line)."""
    tl = read_trace(path)
    name, key = _device(tl, cfg)
    peaks = next((dict(d.peaks_tflops) for d in cfg.devices if d.key == key), {})
    work_model = opmetrics.work_model(tl, peaks)
    if not work_model.calls:
        why = f" ({work_model.notes[0]})" if work_model.notes and "record_shapes" not in work_model.notes[0] else ""
        raise InputError(
            path,
            f"no GEMM / convolution / attention operator with recorded shapes{why}: record with "
            "torch.profiler.profile(record_shapes=True)",
            key="Input Dims",
        )
    replayable = _replayable_rows(tl)
    groups: dict[tuple, CaseGroup] = {}
    left: dict[tuple, dict] = {}
    for c in work_model.calls:
        cases, why, recorded, layout = _call_cases(tl, c, replayable, set(cfg.tolerance))
        if why:
            _left(left, c, why)
            continue
        g = groups.setdefault(cases, CaseGroup(cases))
        g.operators[c.name] = g.operators.get(c.name, 0) + 1
        g.calls += 1
        g.kernel_time_us += c.kernel_time_us
        g.kernels += [int(k) for k in c.kernels]
        g.strides_recorded &= recorded
        g.layout.update(layout)
    matrix, unowned_rows = _matrix_kernels(tl, work_model)
    unowned = float(tl.activities.dur_us[unowned_rows].sum())
    if unowned > 0:
        left[("",)] = {
            "op": "GEMM-class kernels",
            "shape": "-",
            "dtype": None,
            "calls": None,
            "time_us": unowned,
            "why": "launched by no operator with recorded shapes",
        }
    if not groups:
        raise InputError(
            path,
            "no GEMM or convolution operator with shapes that makes a case: " + next(iter(left.values()))["why"],
            key="Input Dims",
        )
    ranked = sorted(groups.values(), key=lambda g: -g.kernel_time_us)
    total = float(tl.activities.dur_us[matrix].sum())
    chosen, below, how = _select(ranked, total, top, min_share_pct)
    return TraceCases(
        str(path), name, key, total, chosen, below, sorted(left.values(), key=lambda d: -d["time_us"]), how, tl, matrix
    )


def case_set_name(path: str | Path) -> str:
    return f"trace:{Path(path).name}"


def case_set_of(tc: TraceCases) -> CaseSet:
    """A trace's cases as a profile through every registered provider (the caller has loaded them: kernels.load_all),
    for `dawnscope roofline --from-trace` and `pytest --benchmark-only` with DAWNSCOPE_TRACE alike."""
    return CaseSet(
        case_set_name(tc.path),
        f"the GEMM / convolution / attention cases of {tc.path} ({tc.selection})",
        tuple(registry.names()),
        tc.cases,
    )


def same_device_reason(tc: TraceCases, device_name: str, cfg) -> tuple[bool, str]:
    """Whether the trace's time can stand beside ours: both devices match the same datasheet entry."""
    mine, _ = match_datasheet(device_name, cfg.devices)
    if tc.device is None:
        return False, "the trace names no device (no deviceProperties): its time is shown for reference"
    if tc.datasheet_key is None:
        return False, f"the trace's device {tc.device!r} matches no datasheet entry: shown for reference"
    if mine is None or mine.key != tc.datasheet_key:
        here = f"{mine.key!r}" if mine else "no datasheet entry"
        return False, (
            f"the trace ran on {tc.device} ({tc.datasheet_key!r}), this machine is {device_name} ({here}): "
            "another chip, its time shown for reference, not compared"
        )
    return True, f"same chip ({tc.datasheet_key!r}): compared"


def compare(source: dict, median_ms: float | None, same: bool, why: str) -> dict:
    """The row's trace_source with our time per call beside the trace's, and their ratio where comparable."""
    out = dict(source)
    ours_us = median_ms * 1e3 if median_ms is not None and math.isfinite(median_ms) else None
    out["ours_us_per_call"] = ours_us
    if not same:
        out["not_compared"] = why
    elif source["group_cases"] > 1:
        out["not_compared"] = (
            f"the trace's time is one operator's {source['group_cases']} cases together: compared in the summary"
        )
    elif ours_us is not None and source["trace_us_per_call"] > 0:
        out["ratio_vs_trace"] = ours_us / source["trace_us_per_call"]
    return out
