"""The one timing primitive.

GPU: CUDA/HIP events around each call, warm-up by time budget, the L2 cache overwritten before each
repeat (outside the timed region) and the calls rotated among input sets, so that no repeat finds its
operands in L2 left there by the previous one. CPU: a monotonic clock (perf_counter_ns) around each call,
rotating among input sets as well. Both return median, p20, p80 and the coefficient of variation.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import torch

from microbench.core.config import TimingSettings
from microbench.core.device import Device
from microbench.core.conditions import sched_ns
from microbench.core.stats import NoiseSettings, Timing, summarize, wait_reason

# An L2 flush buffer at least this large, and at least twice the reported L2 size.
_MIN_FLUSH_BYTES = 256 * 2**20


class _Clock:
    """Times one call; the GPU version records events and reads them at the end (one sync per batch)."""

    def __init__(self, device: Device, flush: bool):
        self.device = device
        self.gpu = device.is_gpu
        self.flush_buf = None
        if self.gpu and flush:
            nbytes = max(_MIN_FLUSH_BYTES, 2 * (device.l2_bytes or 0))
            self.flush_buf = torch.empty(nbytes, dtype=torch.int8, device=device.torch_device)

    def run(self, fns: Sequence[Callable[[], object]], reps: int) -> list[float]:
        if not self.gpu:
            out = []
            for i in range(reps):
                fn = fns[i % len(fns)]
                t0 = time.perf_counter_ns()
                fn()
                out.append((time.perf_counter_ns() - t0) / 1e6)
            return out
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            if self.flush_buf is not None:
                self.flush_buf.zero_()
            starts[i].record()
            fns[i % len(fns)]()
            ends[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def time_calls(calls: Callable[[], object] | Sequence[Callable[[], object]], device: Device,
            settings: TimingSettings, noise: NoiseSettings | None = None) -> Timing:
    """Time `calls` (one callable, or several over different input sets, used in rotation). With `noise`,
    the Timing carries the judgement of its repeats' stability (core.stats.noise_reasons); the scheduler
    tick is a CPU matter, so a GPU's repeats are judged without it."""
    fns = [calls] if callable(calls) else list(calls)
    if not fns:
        raise ValueError("time_calls() needs at least one callable")
    clock = _Clock(device, settings.flush_l2)
    # First call outside any budget: compilation, autotuning and lazy initialisation land here.
    fns[0]()
    device.synchronize()
    probe = clock.run(fns, 3)
    est_ms = max(statistics.median(probe), 1e-4)
    warmup = min(int(settings.warmup_ms / est_ms), 10 * settings.max_reps)
    if warmup > 0:
        clock.run(fns, warmup)
    reps = max(settings.min_reps, min(settings.max_reps, math.ceil(settings.rep_ms / est_ms)))
    if noise is not None and device.is_gpu:
        noise = replace(noise, tick_ms=())
    before = None if device.is_gpu else sched_ns()
    samples = clock.run(fns, reps)
    after = None if before is None else sched_ns()
    t = summarize(samples, noise)
    if before and after:
        run, wait = after[0] - before[0], after[1] - before[1]
        cpu_wait = wait / (run + wait) if run + wait > 0 else 0.0
        extra = wait_reason(cpu_wait, noise) if noise is not None else None
        t = replace(t, cpu_wait=round(cpu_wait, 4), noise=t.noise + ((extra,) if extra else ()))
    return t
