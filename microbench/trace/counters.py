"""Hardware counters as Tensor Core evidence: the strongest kind (docs/design.md: counters > SASS > kernel names).

Three sources feed it: Nsight Compute exports (microbench.trace.ncu: tensor-pipe utilisation, tensor instructions,
tensor operations by precision, SASS floating-point instruction counts), Kineto traces taken in CUPTI
range-profiler mode (`cuda_profiler_range` events, one per kernel, whose `args` hold counters such as
`smsp__sass_thread_inst_executed_op_ffma_pred_on.sum`), and CUPTI PM sampling in a Kineto trace (device-wide
samples over time, `Timeline.pm_samples`): a sample measures a kernel only where that kernel ran alone on its
device from the sample's start to the next sample's (`pm_sample_counters`); only its tensor-pipe metrics are kept,
since a count over part of a kernel is not the kernel's count.

The verdict, `counter_verdict`:
- tensor-pipe metrics present: any non-zero -> "yes"; all zero -> "no" (the kernel never issued to the tensor pipe);
- only SASS floating-point counts and the op's model FLOPs known, for a GEMM-class kernel: counted FLOPs at least
  half the model's -> "no" (the multiply-adds ran on the FMA pipes); under 5 % -> "yes" (the multiply-adds ran
  on the only other floating-point math pipe, the tensor pipe); between -> no verdict;
- otherwise no verdict (the counters do not measure the question).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from microbench.core import thresholds
from microbench.trace.classify import class_set
from microbench.trace.timeline import EPS_US, KERNEL, Timeline

SASS_FLOP_METRIC = re.compile(r"^(?:smsp|sm)__sass_thread_inst_executed_op_([dfh])(add|mul|fma)_pred_on\.sum$")
# Metrics of the tensor pipe alone. Not sm__pipe_shared_cycles_active: on Volta that pipe also runs fp16 math.
TENSOR_PREFIXES = (
    "sm__pipe_tensor",
    "sm__inst_executed_pipe_tensor",
    "sm__ops_path_tensor",
    "smsp__inst_executed_pipe_tensor",
)


# the number of PM samples behind a kernel's counters (pm_sample_counters): summed over its calls, named in the verdict
PM_SAMPLES = "pm_sampling.samples"


@dataclass(frozen=True)
class CounterVerdict:
    tensor_cores: str | None  # "yes", "no", or None: the counters do not settle it
    evidence: str


def sass_flops(metrics: dict[str, float | None]) -> float | None:
    """add + mul + 2 x fma over the fp64/fp32/fp16 SASS thread-instruction counters present; None without any."""
    total, seen = 0.0, False
    for k, v in metrics.items():
        m = SASS_FLOP_METRIC.match(k)
        if m and isinstance(v, (int, float)):
            total += float(v) * (2 if m.group(2) == "fma" else 1)
            seen = True
    return total if seen else None


def tensor_activity(metrics: dict[str, float | None]) -> dict[str, float]:
    """The tensor-pipe metrics present, by name."""
    return {k: float(v) for k, v in metrics.items() if k.startswith(TENSOR_PREFIXES) and isinstance(v, (int, float))}


def counter_verdict(metrics: dict[str, float | None], cls: str, model_flops: float | None = None) -> CounterVerdict:
    tensor = tensor_activity(metrics)
    if tensor:
        samples = metrics.get(PM_SAMPLES)
        source = f"PM sampling ({samples:,.0f} samples while it ran alone)" if samples else "counters"
        active = {k: v for k, v in tensor.items() if v > 0}
        if active:
            k, v = max(active.items(), key=lambda kv: kv[1])
            return CounterVerdict("yes", f"{source}: {k} = {v:,.6g}")
        return CounterVerdict("no", f"{source}: {len(tensor)} tensor-pipe metrics, all zero")
    flops = sass_flops(metrics)
    if flops is None:
        return CounterVerdict(None, "counters present but none measures the tensor pipe or FP instructions")
    if cls in class_set("gemm") and model_flops:
        share = flops / model_flops
        if share >= thresholds.value("fma_pipe_share_no"):
            return CounterVerdict(
                "no",
                f"counters: SASS FP instructions count {flops:,.0f} FLOPs = {share:.0%} of the "
                "op's model FLOPs: the multiply-adds ran on the FMA pipes",
            )
        if share < thresholds.value("fma_pipe_share_yes"):
            return CounterVerdict(
                "yes",
                f"counters: SASS FP instructions count {flops:,.0f} FLOPs = {share:.1%} of "
                "the op's model FLOPs: the multiply-adds ran on the tensor pipe",
            )
    return CounterVerdict(None, f"counters: {flops:,.0f} FLOPs on the FMA/ALU pipes (the tensor pipe is not counted)")


def is_rate(metric: str) -> bool:
    """Percentages, averages and rates (sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,
    dram__bytes.sum.per_second, ncu's display "Memory Throughput"): averaged over calls, never added."""
    m = metric.lower()
    return any(
        t in m
        for t in (
            ".pct",
            "pct_of",
            ".avg",
            "per_second",
            ".ratio",
            "throughput",
            "frequency",
            "occupancy",
            "%",
            "rate",
            "per ",
        )
    )


def combine_calls(calls: list[dict]) -> dict[str, float]:
    """One kernel's counters over its calls: counts summed, rates and percentages averaged."""
    total: dict[str, float] = {}
    seen: dict[str, int] = {}
    for m in calls:
        for name, v in m.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                total[name] = total.get(name, 0.0) + v
                seen[name] = seen.get(name, 0) + 1
    return {k: v / seen[k] if is_rate(k) else v for k, v in total.items()}


def contradiction(name_verdict: str, counters: CounterVerdict) -> str | None:
    """A line when the kernel name said one thing and the counters another."""
    if counters.tensor_cores is None or name_verdict == "unknown" or name_verdict == counters.tensor_cores:
        return None
    return f"the kernel name says tensor_cores={name_verdict}, the counters say {counters.tensor_cores} ({counters.evidence})"


def pm_sample_counters(tl: Timeline) -> dict[int, dict[str, float]]:
    """Per kernel row, the tensor-pipe metrics of the PM samples that measured it alone: a sample spans its start
    to the next sample of its metric (the last one, whose end Kineto does not write, is left out) and counts for a
    kernel only where that kernel runs on the sample's device from before the sample starts to after it ends and
    no other kernel runs there meanwhile. Values over several samples: counts summed, rates averaged (is_rate),
    with PM_SAMPLES, the number of samples."""
    out: dict[int, dict[str, list[float]]] = {}
    k = tl.activities
    for device, metrics in tl.pm_samples.items():
        tensor = {m: tv for m, tv in metrics.items() if m.startswith(TENSOR_PREFIXES)}
        rows = np.flatnonzero((k.category == KERNEL) & (k.device == device))
        if not tensor or not len(rows):
            continue
        rows = rows[np.argsort(k.ts_us[rows], kind="stable")]
        starts, ends = k.ts_us[rows], k.end_us[rows]
        sorted_ends = np.sort(ends)
        # per prefix of the kernels by start, the one that ends last
        widest = np.maximum.accumulate(np.where(ends == np.maximum.accumulate(ends), np.arange(len(ends)), 0))
        for metric, (times, values) in tensor.items():
            lo, hi = times[:-1], times[1:]
            begun = np.searchsorted(starts, hi - EPS_US, "left")  # kernels that start before the sample ends
            over = np.searchsorted(sorted_ends, lo + EPS_US, "right")  # of them, those over before it starts
            ok = begun - over == 1  # exactly one kernel runs during the sample: the one of them that ends last
            jj = widest[np.maximum(begun - 1, 0)]
            ok &= (starts[jj] <= lo + EPS_US) & (ends[jj] >= hi - EPS_US)
            for i in np.flatnonzero(ok):
                out.setdefault(int(rows[jj[i]]), {}).setdefault(metric, []).append(float(values[i]))
    return {
        row: {m: sum(v) / len(v) if is_rate(m) else sum(v) for m, v in by_metric.items()}
        | {PM_SAMPLES: max(len(v) for v in by_metric.values())}
        for row, by_metric in out.items()
    }
