"""The one timing primitive.

GPU: CUDA/HIP events around each call, warm-up by time budget, the L2 cache overwritten before each
repeat (outside the timed region) and the calls rotated among input sets, so that no repeat finds its
operands in L2 left there by the previous one. The GPU is kept ahead of the host while it is timed: each
batch of repeats starts behind a calibrated `torch.cuda._sleep`, long enough for the host to queue the whole
batch, so no start event is reached while the host is still launching the call it times (for calls under
~50 us the launch cost of CuPy wrappers, Triton's descriptors or a multi-kernel backward otherwise lands
between the events; docs/measurement.md). A batch in which the sleep ran out before the last call was queued
is timed again with a longer sleep, and a Timing whose batches still caught up says so in its noise reasons.
CPU: a monotonic clock (perf_counter_ns) around each call, rotating among input sets as well. Both return
median, p20, p80 and the coefficient of variation.
"""

from __future__ import annotations

import math
import statistics
import time

try:
    import resource
except ImportError:  # not on Windows: no system time or page faults to report
    resource = None
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from microbench.core.conditions import sched_tasks, threads_that_ran
from microbench.core.config import TimingSettings
from microbench.core.datasheet import infinity_cache_bytes
from microbench.core.device import Device
from microbench.core.stats import NoiseSettings, Timing, summarize, wait_reason

# An L2 flush buffer at least this large, and at least twice the reported L2 size.
_MIN_FLUSH_BYTES = 256 * 2**20
# The sleep kernel timed once to learn the GPU's clock ticks per ms (about 1 ms at 1-2 GHz; PyTorch's own
# tests calibrate torch.cuda._sleep the same way, the tick rate differs between devices and clock states).
_CALIBRATION_CYCLES = 2_000_000
# The head start asked for: this multiple of the host time the batch took to queue last time, plus a floor.
_LEAD_MARGIN = 1.5
_LEAD_FLOOR_MS = 0.2
# At most this many repeats in one batch: their launches (flush, two events, the call's kernels) stay well inside
# the driver's queue of pending launches (about a thousand), beyond which the host blocks and a full queue
# would read as a GPU that caught up.
_MAX_BATCH_REPS = 100
# A batch that caught up is timed again at most this many times, each with twice the head start.
_RETRIES = 2


class CudaOps:
    """What the GPU clock asks of the device: timing events, the sleep kernel, a synchronization, the host's
    clock. One seam, so that a test can put a model of the device behind the same loop."""

    def event(self, timing: bool = True):
        return torch.cuda.Event(enable_timing=timing)

    def sleep(self, cycles: int) -> None:
        torch.cuda._sleep(int(cycles))

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def host_ms(self) -> float:
        return time.perf_counter() * 1e3


class _Lead:
    """How long the GPU sleeps ahead of each batch, from the host's measured queueing time per repeat, and
    how many repeats one batch holds so that its head start stays under `max_ms`."""

    def __init__(self, ops, max_ms: float):
        self.ops, self.max_ms = ops, max_ms
        self.cycles_per_ms = None
        self.host_ms_per_rep = _LEAD_FLOOR_MS
        self.caught_up = self.batches = 0

    def calibrate(self) -> None:
        """One sleep of _CALIBRATION_CYCLES timed with events: the only calibration, bounded by its size."""
        start, end = self.ops.event(), self.ops.event()
        start.record()
        self.ops.sleep(_CALIBRATION_CYCLES)
        end.record()
        self.ops.synchronize()
        self.cycles_per_ms = _CALIBRATION_CYCLES / max(start.elapsed_time(end), 1e-3)

    def batch_size(self, left: int) -> int:
        fits = int(self.max_ms / (_LEAD_MARGIN * self.host_ms_per_rep))
        return max(1, min(left, fits, _MAX_BATCH_REPS))

    def cycles(self, reps: int, scale: float = 1.0) -> int:
        if self.cycles_per_ms is None:
            self.calibrate()
        ms = min(self.max_ms, scale * (_LEAD_MARGIN * self.host_ms_per_rep * reps + _LEAD_FLOOR_MS))
        return int(ms * self.cycles_per_ms)

    def learn(self, host_ms: float, reps: int) -> None:
        self.host_ms_per_rep = max(host_ms / reps, 1e-4)

    def reset_counts(self) -> None:
        self.caught_up = self.batches = 0

    def reason(self) -> str | None:
        if not self.caught_up:
            return None
        return (
            f"host-bound: the GPU caught up with the host in {self.caught_up} of {self.batches} timing batches "
            f"(host launch time may lie between the events)"
        )


def flush_bytes(device: Device) -> int:
    """The L2 flush buffer for `device`: twice every cache in front of its memory, at least _MIN_FLUSH_BYTES.
    The device's properties give the L2 (hipDeviceProp_t.l2CacheSize, cudaDeviceProp.l2CacheSize); an AMD
    chip's Infinity Cache (256 MB on MI300X, larger than the old fixed 256 MiB minimum's margin) is not among
    them and comes from microbench/data/amd_chips.toml by gcnArchName."""
    cache = device.l2_bytes or 0
    if device.kind == "rocm":
        cache += infinity_cache_bytes(device.arch)
    return max(_MIN_FLUSH_BYTES, 2 * cache)


class _Clock:
    """Times one call; the GPU version records events and reads them at the end (one sync per batch)."""

    def __init__(self, device: Device, flush: bool, lead_max_ms: float = 50.0, ops=None, between=None):
        self.device = device
        self.between = between
        self.gpu = device.is_gpu
        self.flush_buf = None
        self.ops = ops or (CudaOps() if self.gpu else None)
        self.lead = _Lead(self.ops, lead_max_ms) if self.gpu else None
        if self.gpu and flush:
            nbytes = flush_bytes(device)
            self.flush_buf = torch.empty(nbytes, dtype=torch.int8, device=device.torch_device)

    def run(self, fns: Sequence[Callable[[], object]], reps: int) -> list[float]:
        if not self.gpu:
            return self._run_cpu(fns, reps)
        out: list[float] = []
        while len(out) < reps:
            out += self._batch(fns, len(out), self.lead.batch_size(reps - len(out)))
        return out

    def _run_cpu(self, fns, reps: int) -> list[float]:
        out = []
        for i in range(reps):
            fn = fns[i % len(fns)]
            if self.between is not None:
                self.between()
            t0 = time.perf_counter_ns()
            fn()
            out.append((time.perf_counter_ns() - t0) / 1e6)
        return out

    def _batch(self, fns, first: int, reps: int) -> list[float]:
        """One batch behind its head start; timed again with a longer one where the GPU caught up."""
        self.lead.batches += 1
        for attempt in range(_RETRIES + 1):
            times, caught_up = self._queue(fns, first, reps, scale=2.0**attempt)
            if not caught_up:
                return times
        self.lead.caught_up += 1
        return times

    def _queue(self, fns, first: int, reps: int, scale: float) -> tuple[list[float], bool]:
        """Sleep, then queue `reps` calls between events; (times in ms, whether the sleep was over before
        the host had queued the last call: then a start event may have waited for the host)."""
        ops = self.ops
        starts = [ops.event() for _ in range(reps)]
        ends = [ops.event() for _ in range(reps)]
        awake = ops.event(timing=False)
        cycles = self.lead.cycles(reps, scale)
        t0 = ops.host_ms()
        ops.sleep(cycles)  # before any start event: the GPU waits here while the host queues the batch
        awake.record()
        for i in range(reps):
            if self.flush_buf is not None:
                self.flush_buf.zero_()
            starts[i].record()
            fns[(first + i) % len(fns)]()
            ends[i].record()
        host_ms = ops.host_ms() - t0
        caught_up = bool(awake.query())
        ops.synchronize()
        self.lead.learn(host_ms, reps)
        return [s.elapsed_time(e) for s, e in zip(starts, ends)], caught_up


def _rusage():
    """The process's (system CPU seconds, minor page faults) so far, all its threads; None where unsupported."""
    if resource is None:
        return None
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_stime, r.ru_minflt


def _rusage_per_call(before, after, reps: int) -> dict | None:
    """sys_ms_per_call and minor_faults_per_call over a window of `reps` calls (means: getrusage has totals)."""
    if before is None or after is None or reps <= 0:
        return None
    return {
        "sys_ms_per_call": round((after[0] - before[0]) * 1e3 / reps, 3),
        "minor_faults_per_call": round((after[1] - before[1]) / reps, 1),
    }


def _busy_cores(cpu_ns: int, window_ns: int, threads: int, noise: NoiseSettings) -> float | None:
    """The cores the process kept busy over a timed window: its CPU time (CLOCK_PROCESS_CPUTIME_ID) over the window's
    wall time. The kernel adds a thread running on another core to that count only at a tick or a switch, so each
    thread may be up to a tick behind or ahead: over 3 digits steps of 5 ms that made 2.5 cores busy of 2. None
    where that error (the threads that ran x tick / window) is over noise.max_busy_error_cores. With calls between
    the timed ones (`between`) the window's CPU time is theirs too: not the calls', and not reported."""
    tick_ns = max(noise.tick_ms or (4.0,)) * 1e6
    if window_ns <= 0 or threads * tick_ns / window_ns > noise.max_busy_error_cores:
        return None
    return cpu_ns / window_ns


def time_calls(
    calls: Callable[[], object] | Sequence[Callable[[], object]],
    device: Device,
    settings: TimingSettings,
    noise: NoiseSettings | None = None,
    between: Callable[[], object] | None = None,
) -> Timing:
    """Time `calls` (one callable, or several over different input sets, used in rotation). With `noise`,
    the Timing carries the judgement of its repeats' stability (core.stats.noise_reasons); the scheduler
    tick is a CPU matter, so a GPU's repeats are judged without it. `between` (a CPU only): an untimed call
    before each timed one, for what must happen between the calls (decompose's DataLoader probe runs the rest
    of the training step there, decompose/pipeline.py); the warm-up runs it too."""
    fns = [calls] if callable(calls) else list(calls)
    if not fns:
        raise ValueError("time_calls() needs at least one callable")
    if between is not None and device.is_gpu:
        raise ValueError("time_calls(between=...) is for a CPU: a GPU's calls are queued back to back")
    clock = _Clock(device, settings.flush_l2, settings.gpu_lead_max_ms, between=between)
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
    if clock.lead is not None:
        clock.lead.reset_counts()  # the probe's and the warm-up's batches are not judged
    before = None if device.is_gpu else sched_tasks()
    window_ns, cpu_ns, usage = time.perf_counter_ns(), time.process_time_ns(), _rusage()
    samples = clock.run(fns, reps)
    window_ns, cpu_ns = time.perf_counter_ns() - window_ns, time.process_time_ns() - cpu_ns
    usage = _rusage_per_call(usage, _rusage(), reps) if between is None else None
    after = None if before is None else sched_tasks()
    t = summarize(samples, noise)
    host_bound = clock.lead.reason() if clock.lead is not None and noise is not None else None
    if host_bound:
        t = replace(t, noise=t.noise + (host_bound,))
    if before and after:
        run = sum(r for r, _ in after.values()) - sum(r for r, _ in before.values())
        wait = sum(w for _, w in after.values()) - sum(w for _, w in before.values())
        cpu_wait = wait / (run + wait) if run + wait > 0 else 0.0
        extra = wait_reason(cpu_wait, noise) if noise is not None else None
        ran = threads_that_ran(before, after)
        busy = _busy_cores(cpu_ns, window_ns, ran, noise or NoiseSettings()) if between is None else None
        t = replace(
            t,
            cpu_wait=round(cpu_wait, 4),
            noise=t.noise + ((extra,) if extra else ()),
            cpu_busy_cores=round(busy, 3) if busy is not None else None,
            **(usage or {}),
        )
    return t
