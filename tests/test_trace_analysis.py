"""The one trace analysis object (microbench/trace/analysis.py): results computed from the timeline without
changing it; hardware counters' Tensor Core verdicts in a column of their own."""

from __future__ import annotations

import numpy as np

from microbench.trace.analysis import TraceAnalysis
from microbench.trace.timeline import CPU_RANGE, KERNEL, NO_ID, TC_VALUES, TimelineBuilder

TENSOR = {
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": 42.5,
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum": 1_048_576.0,
}


def _timeline():
    """A GEMM whose name says CUDA cores (volta_sgemm) and whose counters say Tensor Cores, and one without
    counters, in one step."""
    b = TimelineBuilder("by-hand", "ncu")
    thread = b.thread(b.process(7), 7)
    b.add_range("ProfilerStep#0", 0.0, 100.0, 7, thread, CPU_RANGE)
    b.add_launch("cudaLaunchKernel", 1.0, 1.0, 7, thread, 1)
    b.add_activity("volta_sgemm_128x64_nn", 10.0, 30.0, 0, 7, 1, NO_ID, KERNEL)
    b.add_counters(dict(TENSOR))
    b.add_launch("cudaLaunchKernel", 2.0, 1.0, 7, thread, 2)
    b.add_activity("volta_sgemm_128x64_nn", 50.0, 10.0, 0, 7, 2, NO_ID, KERNEL)
    b.add_launch("cudaLaunchKernel", 3.0, 1.0, 7, thread, 3)
    b.add_activity("void at::native::vectorized_elementwise_kernel<4>", 70.0, 20.0, 0, 7, 3, NO_ID, KERNEL)
    b.cover(0.0, 100.0)
    return b.build()


def test_counters_are_their_own_column_and_the_timeline_is_unchanged():
    tl = _timeline()
    before = tl.activities.tensor_cores.copy()
    a = TraceAnalysis(tl)
    doc = a.document()
    assert (tl.activities.tensor_cores == before).all() and TC_VALUES[before[0]] == "no"  # the name rule's verdict
    # the counters settle both calls of the GEMM (summed over its calls); the element-wise kernel has none
    assert a.counter_tensor_cores.tolist() == [TC_VALUES.index("yes")] * 2 + [NO_ID]
    assert (
        TC_VALUES[a.evidence.activities.tensor_cores[1]] == "yes" and a.evidence.activities.name is tl.activities.name
    )
    assert doc["summary"]["tensor_core_share"] == 40 / 60  # totals follow the strongest evidence
    gemm = next(k for k in doc["kernels"] if k["kernel"].startswith("volta_sgemm"))
    assert (gemm["tensor_cores"], gemm["params"]["evidence"], gemm["params"]["name_verdict"]) == (
        "yes",
        "counters",
        "no",
    )
    assert any("counters contradict the kernel name" in n for n in doc["notes"])
    assert doc == TraceAnalysis(tl).document()  # a second analysis of the same timeline agrees: nothing was changed


def test_results_are_computed_once_and_only_when_asked():
    a = TraceAnalysis(_timeline())
    assert "work_model" not in a.__dict__
    assert a.steps[0]["busy_us"] == 60 and a.steps[0]["kernel_count"] == 3
    assert "work_model" in a.__dict__ and a.mfu is a.mfu
    assert np.isclose(a.summary["gpu_busy_share"], 60 / 80)
