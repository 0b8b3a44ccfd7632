"""What the findings' rules read (docs/findings.md): the facts of one trace analysis, per kind of trace (a GPU
trace with steps, one without steps read as one step, a CPU decomposition, a CPU trace of a collective job), the
rules' data (data/findings.toml) and its thresholds."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import cache, cached_property
from pathlib import Path
from typing import ClassVar

import numpy as np
import tomllib

from microbench.core.datasheet import find_entry
from microbench.core.documents import Saving
from microbench.core.dtypes import cpu_native_bf16
from microbench.core.resources import data_file
from microbench.predict.chips import Chip, assumptions
from microbench.predict.document import VARIANTS
from microbench.predict.estimate import (
    Scenario,
    Variant,
    datasheet_roof_us,
    predict_activities,
    roofline_share,
    unshaped_fp32,
    unshaped_rows,
)
from microbench.predict.from_trace import source_chip
from microbench.predict.kernels import GROUP_OF_CLASS, MATRIX, ActivityWork, activity_work
from microbench.trace import gpu_time, graphs
from microbench.trace.analysis import datasheet_entry
from microbench.trace.kineto import HOST_KEY
from microbench.trace.timeline import KERNEL, NO_ID, TC_VALUES

RULES_PATH = data_file("findings.toml")
# The prediction's alternative assumptions (its one list, predict/document.py): the range of a dtype saving.
ALTERNATIVES = VARIANTS
NEEDS_WHY = {
    "steps": "no steps (no ProfilerStep# ranges; record with torch.profiler.schedule and prof.step(), or "
    "name the step ranges with --step-range)",
    "launches": "no runtime launch calls in the trace (no cudaLaunchKernel / hipLaunchKernel events)",
    "shapes": "no operator shapes (record with torch.profiler.profile(record_shapes=True))",
    "cpu_ops": "no CPU operators in the trace",
}

NO_CHIP = (
    "the trace's device has no bench.toml datasheet entry (or names no device): no Tensor Core rate to "
    "predict with (trace --source DEVICE names it)"
)


@cache
def rules(path: str = str(RULES_PATH)) -> dict:
    return tomllib.loads(Path(path).read_text())


def threshold(name: str) -> float:
    return float(rules()["thresholds"][name]["value"])


def saving(low: float, expected: float, high: float, floor: float | None = 0.0) -> Saving:
    """{low, expected, high}, ordered and never below `floor`: zero, where a fix removes time and cannot add any;
    None where the rule models what the fix costs too (floor_of, findings.toml `may_slow_on`: DataLoader workers on the step's
    own cores), so that a predicted slowdown is shown as one, not as a saving of 0."""
    clip = (lambda x: x) if floor is None else (lambda x: max(x, floor))  # noqa: E731
    lo, ex, hi = sorted((clip(low), clip(expected), clip(high)))
    return {"low": lo, "expected": ex, "high": hi}


def floor_of(rid: str, kind: str) -> float | None:
    """A saving's floor for `rid` on a kind of device (cpu, gpu): 0, or None where the rule models what its fix
    costs there (findings.toml `may_slow_on`)."""
    return None if kind in (rules()["rules"].get(rid) or {}).get("may_slow_on", ()) else 0.0


@dataclass
class Facts:
    """What the rules read: the analysis, its steps (the one breakdown, with the host split) and, per GPU
    activity, the step it belongs to (gpu_time.assign_steps)."""

    ta: object
    cfg: object = None
    source: str | None = None  # the trace's chip where the trace does not name it (a bench.toml key or name)

    @cached_property
    def steps(self) -> list[dict]:
        return self.ta.steps

    @cached_property
    def step_of(self) -> np.ndarray:
        w = self.ta.tl.step_windows(self.ta.step_range)
        if not len(w):
            return np.full(len(self.ta.tl.activities), -1)
        return gpu_time.assign_steps(self.ta.tl, w).step

    @property
    def per(self) -> str:
        return "step" if self.steps else "trace"

    @cached_property
    def step_us(self) -> float:
        """The mean step time (the plugin window: breakdown_span_us), else the whole GPU span."""
        return self.steps_mean_us() if self.steps else float(self.ta.summary["gpu_span_us"])

    def steps_mean_us(self) -> float:
        return float(np.mean([st["breakdown_span_us"] for st in self.steps]))

    @property
    def step_time_what(self) -> str:
        """What step_us is, said beside it in the report's headline."""
        if not self.steps:
            return "the GPU span"
        return f"the mean 'step us' of {steps_phrase(len(self.steps))} below"

    def per_step(self, per_row: np.ndarray) -> float:
        """A per-activity quantity summed per step and averaged over the steps (else summed over the trace)."""
        if not self.steps:
            return float(np.sum(per_row))
        mine = self.step_of >= 0
        sums = np.bincount(self.step_of[mine], weights=per_row[mine], minlength=len(self.steps))
        return float(sums.mean())

    def mean(self, f) -> float:
        return float(np.mean([f(st) for st in self.steps])) if self.steps else 0.0

    @cached_property
    def missing(self) -> dict[str, str]:
        tl = self.ta.tl
        out = {}
        if not self.steps:
            out["steps"] = NEEDS_WHY["steps"]
        elif not any(st.get("kernel_count") for st in self.steps):
            out["steps"] = (
                f"{steps_phrase(len(self.steps))} launched no GPU work (its kernels ran outside "
                "every step range): nothing of a step's GPU time to split"
            )
        if not len(tl.launches):
            out["launches"] = NEEDS_WHY["launches"]
        if not self.ta.work_model.calls:
            out["shapes"] = NEEDS_WHY["shapes"]
        if not len(tl.cpu_ops):
            out["cpu_ops"] = NEEDS_WHY["cpu_ops"]
        return out

    @cached_property
    def entry(self):
        """The trace's chip's bench.toml entry (None: no datasheet entry matched its name): `source` where given."""
        if self.source is not None and self.cfg is not None:
            return find_entry(self.source, self.cfg.devices, "--source")
        if self.cfg is None:
            return None
        return datasheet_entry(self.ta.tl, self.cfg)  # by name and properties: an SKU or a chip's shared peaks

    @cached_property
    def work(self):
        """The activities' work; a GEMM-class kernel no operator with shapes launched takes fp32 from its name
        where it ran without Tensor Cores (predict/estimate.py unshaped_fp32)."""
        d = assumptions()["defaults"]
        tl = self.ta.evidence
        w = activity_work(tl, self.ta.peaks, d["tile_m"], d["tile_n"])
        return unshaped_fp32(w, tl.activities.tensor_cores == TC_VALUES.index("no"))

    @cached_property
    def unshaped_share(self) -> tuple[float, str]:
        """The share of an unshaped GEMM-class kernel's time taken as math (the model's `unshaped_share`), and
        where it is from: the trace's own fp32 matrix kernels with FLOPs, else data/prediction.toml [unshaped]."""
        w = self.work
        known = np.flatnonzero(
            np.isin(w.group, MATRIX) & (w.flops > 0) & np.array([p == "fp32" for p in w.precision], dtype=bool)
        )
        own = roofline_share(w, self.chip, known) if len(known) and self.chip is not None else None
        if own is not None:
            return own, f"the share the trace's {len(known):,} fp32 matrix kernels with FLOPs spend at their roofline"
        return float(assumptions()["unshaped"]["share"]), "assumed: data/prediction.toml [unshaped]"

    @cached_property
    def chip(self):
        return None if self.entry is None else source_chip(self.ta.tl, self.work, self.entry)

    @property
    def floor_us(self) -> float:
        return self.chip.floor_us if self.chip else float(assumptions()["defaults"]["kernel_floor_us"])

    @cached_property
    def overlap(self) -> float:
        """Busy time per unit of activity time (the prediction's own rule: overlap kept)."""
        s = self.ta.summary
        total = float(self.ta.tl.activities.dur_us.sum())
        return s["gpu_busy_us"] / total if total > 0 else 1.0

    # dtype_saving's alternatives beyond the prediction's (keyword sets of saved): an unshaped GEMM-class kernel's
    # time all slack, held (its share's other end, 1, is the prediction's slack alternative)
    extra_alternatives: ClassVar[tuple] = ({"share": 0.0},)

    def saved(self, dtype: str, v: Variant, share: float | None = None) -> np.ndarray:
        """Per activity: the time `dtype` saves under the assumptions `v` (`share`: of the unshaped GEMM-class
        kernels' time taken as math, else unshaped_share's)."""
        return times(self, Scenario(), v, share) - times(self, Scenario(dtype=dtype), v, share)

    comm_layer: ClassVar[str] = "kernel-name rule (comm class) + the one GPU time breakdown"
    comm_unit: ClassVar[str] = "kernel"

    def longest_comm_us(self) -> float:
        """Each step's longest communication kernel, the steps' mean (else the trace's longest)."""
        comm = self.ta.tl.class_mask("comm")
        return (
            longest_per_step(self, comm) if self.steps else float(self.ta.tl.activities.dur_us[comm].max(initial=0.0))
        )

    def comm_evidence(self) -> list[dict]:
        return top_kernels(self, np.flatnonzero(self.ta.tl.class_mask("comm")))

    def comm_hideable(self) -> bool | float | str:
        """How much of the exposed communication computation can hide: True on a GPU (its own stream)."""
        return True

    @cached_property
    def host_launches(self) -> float:
        """Kernel launches per step as the host issues them: a kernel launched on its own counts one, the kernels
        of one graph launch one together (they share its correlation id)."""
        tl = self.ta.tl
        li = tl.launch_index()
        _, inverse, counts = np.unique(li, return_inverse=True, return_counts=True)
        one = np.where(li == NO_ID, 1.0, 1.0 / counts[inverse]) if len(li) else np.zeros(0)
        return self.per_step(np.where(tl.activities.category == KERNEL, one, 0.0))

    @cached_property
    def graph_kernel_share(self) -> float:
        """The share of the step's kernels that already replay from CUDA / HIP graphs."""
        kernel = self.ta.tl.activities.category == KERNEL
        n = self.per_step(kernel.astype(float))
        return self.per_step(graphs.graph_kernel_mask(self.ta.tl).astype(float)) / n if n else 0.0

    def name_mask(self, pattern: str) -> np.ndarray:
        tl = self.ta.tl
        rx = re.compile(pattern)
        hit = np.array([bool(isinstance(s, str) and rx.search(s)) for s in tl.names.strings], dtype=bool)
        return hit[tl.activities.name] if len(tl.activities) else np.zeros(0, dtype=bool)


@dataclass
class WholeTraceFacts(Facts):
    """A GPU trace without steps (no ProfilerStep#, no --step-range: a few iterations profiled without
    prof.step()) read as one step, from its first kernel launch to the end of its last GPU activity (`window`,
    gpu_time.trace_window), so that the step rules check it as they check a step; its savings are per trace."""

    window: object = None  # gpu_time.Windows: the one window

    @cached_property
    def _window(self) -> tuple:
        return gpu_time.window_breakdowns(self.ta.tl, self.window)

    @cached_property
    def steps(self) -> list[dict]:
        return self._window[1]

    @cached_property
    def step_of(self) -> np.ndarray:
        return gpu_time.assign_steps(self.ta.tl, self._window[0]).step

    @property
    def per(self) -> str:
        return "trace"

    @cached_property
    def missing(self) -> dict[str, str]:
        """Facts.missing; and where the span is mostly one-off set-up (findings.toml [whole_trace]), no step."""
        out = dict(super().missing)
        wt = rules()["whole_trace"]
        span = float(self._window[0].dur_us[0])
        setup = gpu_time.runtime_time_in(self.ta.tl, self._window[0], "|".join(wt["setup_calls"]))
        if span and setup >= wt["max_setup_share"] * span:
            names = [a["name"] for a in self.ta.annotations][:4]
            ranges = f" (its ranges include: {', '.join(names)})" if names else ""
            out["steps"] = wt["setup_why"].format(setup_us=setup, share=setup / span, span_us=span, ranges=ranges)
        return out

    @property
    def step_time_what(self) -> str:
        return (
            "the whole trace read as one step (no steps: from its first kernel launch to the end of its last "
            f"GPU activity, the '{gpu_time.WHOLE_TRACE}' row below)"
        )


def gpu_facts(ta, cfg=None, source: str | None = None) -> Facts:
    """The facts of a GPU trace: one without steps is read as one step (WholeTraceFacts) where one process
    launched its GPU work, unless it records a graph capture (a one-off: its warm-up and capture are no step)."""
    window = None if ta.steps or graphs.captures_graphs(ta.tl) else gpu_time.trace_window(ta.tl)
    return WholeTraceFacts(ta, cfg, source, window) if window is not None and len(window) else Facts(ta, cfg, source)


@dataclass
class CpuFacts(Facts):
    """What the dtype rules read of a decomposition on a CPU (`decompose` with no GPU): the CPU is the device and
    its operators are its activities, one row per (layer, phase) and kernel-rule class of the median profiled step
    (the layer table's `time_by_class_ms`), with the layer's matrix FLOPs and dtype; the chip is the CPU with its
    ceilings (the bench.toml cpu_estimate tier as the datasheet, a measured ceiling as the achievable rate)."""

    doc: dict | None = None  # the decomposition document (layers, ceilings, summary, hardware)

    @property
    def per(self) -> str:
        return "step"

    @cached_property
    def step_us(self) -> float:
        # the profiled steps' wall time (as on a GPU: the plugin window), the run the rows are of: the unprofiled
        # step time is another run of the step, and on a busy CPU the two differ by more than the matrix share;
        # without step ranges, the operators' total
        return self.steps_mean_us() if self.steps else float(self.doc["summary"]["profiled_time_ms"]) * 1e3

    @property
    def step_time_what(self) -> str:
        if not self.steps:
            return "the profiled operators' total"
        return f"the mean of {steps_phrase(len(self.steps))} profiled, with the profiler's cost"

    @property
    def cores(self) -> int:
        return int((self.doc.get("hardware") or {}).get("units") or 1)

    @property
    def native_bf16(self) -> bool:
        """The CPU computes bf16 in hardware (core.dtypes.cpu_native_bf16 over the recorded ISA flags); a document
        that records none is taken to (the older ones)."""
        hw = self.doc.get("hardware") or {}
        return "isa_flags" not in hw or cpu_native_bf16(hw["isa_flags"])

    @property
    def torch_threads(self) -> int:
        """The step's intra-op threads (core.device records them), else every core."""
        return int(((self.doc.get("hardware") or {}).get("extra") or {}).get("torch_threads") or self.cores)

    def per_step(self, per_row: np.ndarray) -> float:
        return float(np.sum(per_row))  # the rows are already one step's (the median profiled step)

    @property
    def overlap(self) -> float:
        return 1.0  # the operators of one thread pool run one after another

    extra_alternatives: ClassVar[tuple] = ({"hold": False},)

    def saved(self, dtype: str, v: Variant, hold: bool = True) -> np.ndarray:
        """On a CPU an operator is the kernel itself on all cores: a working one's time beyond its roofline is
        its own efficiency (the FMA pipes' use), not a launch latency or a tail, and the bf16 kernel of the same
        family reaches a like share of its own rate, so the base scales the slack of the matrix operators whose
        fp32 roofline time is cpu_operator_floor_us or more (the GPU's base holds it; measured: ResNet-9's
        convolutions at ~20 % of the estimate ran 1.6-1.9x faster under bf16 autocast, docs/findings.md) and
        holds it on smaller ones (dispatch-bound); the slack alternative swaps the two. The other operators are
        held (`hold`): at these sizes they run from cache and compute in fp32 after a conversion, and halving
        their bytes did not halve their time (ResNet-9's went from 83 to 93 ms); not holding them is an
        alternative."""
        plain = Facts.saved(self, dtype, v)
        flipped = Facts.saved(self, dtype, replace(v, scale_slack=not v.scale_slack))
        out = np.where(self.working, flipped, plain)
        return np.where(~np.isin(self.work.group, MATRIX), 0.0, out) if hold else out

    @cached_property
    def working(self) -> np.ndarray:
        w = self.work
        with np.errstate(invalid="ignore", divide="ignore"):
            roof_us = w.flops / (self.chip.rate("fp32") * 1e6)
        return np.isin(w.group, MATRIX) & (roof_us >= threshold("cpu_operator_floor_us"))

    @cached_property
    def missing(self) -> dict[str, str]:
        # the shapes are the decomposition's own operator records (their FLOPs), not the trace's
        return {} if np.any(self.work.flops > 0) else {"shapes": NEEDS_WHY["shapes"]}

    @cached_property
    def rows(self) -> list[tuple[dict, str, float]]:
        return [
            (layer, cls, ms)
            for layer in self.doc["layers"]
            for cls, ms in (layer.get("time_by_class_ms") or {}).items()
            if ms > 0
        ]

    @cached_property
    def work(self):
        return cpu_work(self.rows)

    @cached_property
    def chip(self):
        return cpu_chip(self.doc)


@dataclass
class CpuCommFacts(Facts):
    """What the communication rule reads of a CPU trace of a data-parallel job (gloo, no GPU activity; findings.toml
    [cpu_trace]): per step range, the one breakdown over CPU intervals (gpu_time.cpu_intervals: the collectives on
    the process group's threads as communication, the training thread's operators as computation), the step's
    wall time as its span."""

    comm_layer: ClassVar[str] = (
        "gloo / nccl collective ranges on the CPU + the one breakdown over CPU intervals "
        "(the training thread's operators as computation)"
    )
    comm_unit: ClassVar[str] = "collective"

    @cached_property
    def _windows(self):
        return self.ta.tl.step_windows(self.ta.step_range)

    @cached_property
    def _intervals(self):
        tl = self.ta.tl
        return gpu_time.cpu_intervals(tl, int(tl.ranges.thread[tl.step_rows(self.ta.step_range)[0]]))

    @cached_property
    def steps(self) -> list[dict]:
        if not len(self._windows):
            return []
        starts, ends, kinds, _ = self._intervals
        return [
            gpu_time.of_intervals(starts, ends, kinds, window=(lo, hi)) | {"breakdown_span_us": hi - lo}
            for lo, hi in zip(self._windows.ts_us.tolist(), self._windows.end_us.tolist())
        ]

    @property
    def step_time_what(self) -> str:
        name = self._windows.names[0] if self._windows.names else "step"
        return f"the mean wall time of the {len(self.steps)} {name} ranges (the annotation table below)"

    @cached_property
    def missing(self) -> dict[str, str]:
        return {} if self.steps else {"steps": NEEDS_WHY["steps"]}

    @cached_property
    def host(self) -> dict | None:
        """The rank's host as a dawnscope run wrote it into the trace (comm/ddp.py host_facts), else None."""
        h = self.ta.tl.meta.get(HOST_KEY)
        keys = ("cores", "local_ranks", "intra_op_threads")
        ok = isinstance(h, dict) and all(type(h.get(k)) is int and h[k] >= 1 for k in keys)
        return {k: h[k] for k in keys} if ok else None

    def comm_hideable(self) -> float | str:
        """The share of a core each rank's collectives find idle under its computation: the cores per rank on
        its host less its intra-op threads, from 0 to 1 (findings.toml [rules.exposed_comm] cpu_model)."""
        if self.host is None:
            return rules()["rules"]["exposed_comm"]["cpu_no_host"]
        h = self.host
        return min(1.0, max(0.0, h["cores"] / h["local_ranks"] - h["intra_op_threads"]))

    def host_phrase(self, hideable: float) -> str:
        h = self.host
        return (
            f"on this host ({h['cores']} cores, {h['local_ranks']} ranks, {h['intra_op_threads']} intra-op "
            f"thread(s) each) the ranks' threads leave {hideable:.2g} of a core per rank idle for the "
            "collectives' own CPU work, which hidden under computation takes its time from it"
        )

    def comm_evidence(self) -> list[dict]:
        starts, ends, kinds, names = self._intervals
        comm = np.flatnonzero(kinds == gpu_time.COMM)
        return top_named([names[i] for i in comm], ends[comm] - starts[comm], len(self.steps))


def cpu_work(rows: list[tuple[dict, str, float]]):
    """ActivityWork over (layer, class, ms) rows: a GEMM / convolution row carries its layer's matrix FLOPs and dtype
    (its bytes are not split from the layer's: unknown, the roofline takes it as compute-bound, which CPU
    convolutions are: 190-440 FLOP/B against a ridge near 16); the other rows their time only."""
    n = len(rows)
    group = np.array([GROUP_OF_CLASS.get(c, "other") for _, c, _ in rows], dtype=object)
    matrix = np.isin(group, MATRIX)
    flops = np.array([float(layer.get("matrix_flops") or 0) if m else 0.0 for (layer, _, _), m in zip(rows, matrix)])
    precision = np.array([layer.get("dtype") if m else None for (layer, _, _), m in zip(rows, matrix)], dtype=object)
    return ActivityWork(
        [f"{layer['name']} {layer['phase']} ({c})" for layer, c, _ in rows],
        np.array([ms * 1e3 for _, _, ms in rows], dtype=float),
        group,
        np.array([c for _, c, _ in rows], dtype=object),
        flops,
        np.full(n, np.nan),
        precision,
        np.zeros(n, dtype=np.int64),
        precision.copy(),
        np.full(n, None, dtype=object),
        n,
        [],
    )


def cpu_chip(doc: dict):
    """The CPU as a prediction Chip: the datasheet is the cpu_estimate tier (bench.toml: cores x clock x FLOPs per
    cycle of its ISA), the achievable rate a measured ceiling of that dtype where `decompose` measured one, else
    the estimate x matrix_efficiency (data/prediction.toml), as for a GPU without a published figure. The floor
    is 0 and the memory figure 1: on the same chip both cancel (only source / target ratios enter)."""
    comp = [c for c in doc.get("ceilings") or [] if c.get("kind") == "compute" and c.get("dtype")]
    peak = {c["dtype"]: c["value"] for c in comp if c.get("source") == "estimate"}
    if "fp32" not in peak:
        return None
    eff = assumptions()["defaults"]["matrix_efficiency"]
    measured: dict[str, float] = {}
    for c in comp:  # the best measured rate of each dtype
        if c.get("source") != "estimate" and c.get("value"):
            measured[c["dtype"]] = max(measured.get(c["dtype"], 0.0), float(c["value"]))
    rates = {k: measured.get(k, v * eff) for k, v in peak.items()}
    src = {k: "measured (decompose ceilings)" if k in measured else f"cpu_estimate x {eff:g}" for k in peak}
    hw = doc.get("hardware") or {}
    return Chip("cpu", hw.get("name") or "CPU", rates, peak, 1.0, 1.0, None, 0.0, src)


def steps_phrase(n: int) -> str:
    return "the one step" if n == 1 else f"the {n} steps"


def times(f: Facts, scenario: Scenario, v: Variant, share: float | None = None) -> np.ndarray:
    """Per activity: the prediction on the trace's own chip, raised to the datasheet roof as the report does; the
    unshaped GEMM-class kernels placed with `share` (else the trace's unshaped_share) where it has some."""
    if unshaped_rows(f.work).any():
        share = f.unshaped_share[0] if share is None else share
    else:
        share = None
    t, _ = predict_activities(f.work, f.chip, f.chip, scenario, v, unshaped_share=share)
    return np.fmax(t, datasheet_roof_us(f.work, f.chip, scenario))


def longest_per_step(f: Facts, rows_mask: np.ndarray) -> float:
    """The mean over the steps of each step's longest activity among `rows_mask`."""
    dur = f.ta.tl.activities.dur_us
    out = []
    for j in range(len(f.steps)):
        mine = rows_mask & (f.step_of == j)
        out.append(float(dur[mine].max()) if mine.any() else 0.0)
    return float(np.mean(out)) if out else 0.0


def top_kernels(f: Facts, rows: np.ndarray, n: int = 3) -> list[dict]:
    tl = f.ta.tl
    return top_named([tl.names[tl.activities.name[r]] for r in rows], tl.activities.dur_us[rows], len(f.steps), n)


def top_named(names, times_us, steps: int, n: int = 3) -> list[dict]:
    """The `n` names with the most time (summed by name), as evidence: time per step where there are steps."""
    by: dict[str, float] = {}
    for nm, t in zip(names, times_us):
        by[nm] = by.get(nm, 0.0) + float(t)
    top = sorted(by.items(), key=lambda kv: -kv[1])[:n]
    return [{"kernel": k, "time_us": t / max(steps, 1)} for k, t in top]
