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
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from .config import TimingSettings
from .device import Device

# An L2 flush buffer at least this large, and at least twice the reported L2 size.
_MIN_FLUSH_BYTES = 256 * 2**20


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float
    mean_ms: float
    cov: float  # standard deviation / mean over the repeats
    reps: int

    def as_dict(self) -> dict:
        return {"median": self.median_ms, "p20": self.p20_ms, "p80": self.p80_ms, "cov": self.cov,
                "reps": self.reps}


def summarize(samples_ms: Sequence[float]) -> Timing:
    s = sorted(samples_ms)
    if len(s) == 1:
        return Timing(s[0], s[0], s[0], s[0], 0.0, 1)
    q = statistics.quantiles(s, n=10, method="inclusive")  # deciles: q[1] = p20, q[7] = p80
    mean = statistics.fmean(s)
    return Timing(statistics.median(s), q[1], q[7], mean, statistics.pstdev(s) / mean if mean > 0 else 0.0, len(s))


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


def measure(calls: Callable[[], object] | Sequence[Callable[[], object]], device: Device,
            settings: TimingSettings) -> Timing:
    """Time `calls` (one callable, or several over different input sets, used in rotation)."""
    fns = [calls] if callable(calls) else list(calls)
    if not fns:
        raise ValueError("measure() needs at least one callable")
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
    return summarize(clock.run(fns, reps))
