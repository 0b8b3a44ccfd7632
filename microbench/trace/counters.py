"""Hardware counters as Tensor Core evidence: the strongest kind (docs/design.md: counters > SASS > kernel names).

Two sources feed it: Nsight Compute exports (microbench.trace.ncu: tensor-pipe utilisation, tensor instructions,
tensor operations by precision, SASS floating-point instruction counts) and Kineto traces taken in CUPTI
range-profiler mode (`cuda_profiler_range` events, one per kernel, whose `args` hold counters such as
`smsp__sass_thread_inst_executed_op_ffma_pred_on.sum`).

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

from microbench.core import thresholds
from microbench.trace.classify import class_set

SASS_FLOP_METRIC = re.compile(r"^(?:smsp|sm)__sass_thread_inst_executed_op_([dfh])(add|mul|fma)_pred_on\.sum$")
# Metrics of the tensor pipe alone. Not sm__pipe_shared_cycles_active: on Volta that pipe also runs fp16 math.
TENSOR_PREFIXES = (
    "sm__pipe_tensor",
    "sm__inst_executed_pipe_tensor",
    "sm__ops_path_tensor",
    "smsp__inst_executed_pipe_tensor",
)


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
        active = {k: v for k, v in tensor.items() if v > 0}
        if active:
            k, v = max(active.items(), key=lambda kv: kv[1])
            return CounterVerdict("yes", f"counters: {k} = {v:,.6g}")
        return CounterVerdict("no", f"counters: {len(tensor)} tensor-pipe metrics, all zero")
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
