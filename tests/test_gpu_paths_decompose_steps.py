"""decompose's profiled steps on a GPU: a step's CPU range closes when the CPU has launched its
work, before the GPU has done it. Two parts, both checked on this CPU:
- the step ends with the device synchronization inside its `step` range (models.step.TrainingStep.sync_at_end;
  here a CPU stand-in for torch.cuda.synchronize, recorded as a profiler range, shows where it runs);
- a profiled step lasts until the last GPU activity it launched ends (trace.gpu_time.step_ends, the same
  attribution by launch as `trace`), on the synthetic pipelined Kineto trace of tests/test_gpu_time.py whose
  first step's GEMM runs 50 us past the step's CPU range."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from microbench.decompose.pipeline import profiled_step_ms, profiler_overhead
from microbench.models.ranges import STEP_RANGE, StepRanges
from microbench.models.step import TrainingStep, Workload
from microbench.trace import gpu_time

from .test_gpu_time import pipelined_trace


def test_a_step_lasts_until_the_gpu_work_it_launched_is_done(tmp_path):
    tl = pipelined_trace(tmp_path)
    w = tl.step_windows(STEP_RANGE)
    assert w.dur_us.tolist() == [100, 100]  # the CPU ranges
    assert gpu_time.step_ends(tl, w).tolist() == [250, 310]  # step 1's GEMM ends at 250, step 2's copy at 310
    assert profiled_step_ms(tl, STEP_RANGE) == pytest.approx([0.150, 0.110])
    _, steps, _ = gpu_time.step_breakdowns(tl)
    # step 1's kernel time (130 us) no longer exceeds its step (it did the 100 us CPU range: 130 %)
    assert steps[0]["kernel_time_us"] <= profiled_step_ms(tl, STEP_RANGE)[0] * 1e3


def test_the_profiled_step_closes_after_its_device_synchronization(tmp_path):
    from torch.profiler import ProfilerActivity, profile

    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    workload = Workload(
        "tiny", model, lambda batch, dev: (torch.randn(batch, 8, device=dev), torch.randint(0, 2, (batch,), device=dev))
    )
    step = TrainingStep(workload, 4, "cpu", ranges=StepRanges(model, nvtx_ranges=False))

    def fake_sync():  # stands for torch.cuda.synchronize: a range so that the trace shows when it ran
        with torch.autograd.profiler.record_function("device_synchronize"):
            pass

    step.sync_at_end = fake_sync
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    events = {e.name: e for e in prof.events() if e.name in (STEP_RANGE, "device_synchronize", "optimizer")}
    s, sync, opt = events[STEP_RANGE], events["device_synchronize"], events["optimizer"]
    assert s.time_range.start <= sync.time_range.start and sync.time_range.end <= s.time_range.end
    assert sync.time_range.start >= opt.time_range.end  # the last thing in the step


def test_overhead_and_coverage_read_sensibly_once_the_step_includes_its_gpu_work():
    """The same numbers as the pipelined trace, as the summary sees them: kernels 130 us in step 1."""
    from microbench.core.stats import summarize

    cpu_range = summarize([0.100] * 5)
    with_gpu = summarize([0.150] * 5)
    unprofiled = summarize([0.140] * 5)  # event-timed: to the end of the GPU work
    before = profiler_overhead(unprofiled, cpu_range, 0.130, 0.05)
    after = profiler_overhead(unprofiled, with_gpu, 0.130, 0.05)
    assert before["operator_coverage"] > 1 and after["operator_coverage"] <= 1
    assert before["profiler_overhead"] is None and after["profiler_overhead"] == pytest.approx(0.150 / 0.140 - 1)
