"""event timings must not include the host's launch time of short calls.

No GPU here, so the loop of roofline/timing.py runs against a model of one CUDA stream (FakeStream below) that
follows the documented semantics: work is queued in order and runs when the GPU is free and the host has
queued it; `Event.record()` takes the time at which the stream reaches it; `elapsed_time` is the difference
of two such times; `Event.query()` is True once the stream has passed the event; `torch.cuda._sleep(cycles)`
keeps the stream busy for `cycles` ticks of the GPU clock; `synchronize()` waits for the stream. A timed call
costs `host_ms` of host time to launch and then `gpu_ms` on the stream. On such a stream, without a head
start, a call whose launch costs more host time than the work queued ahead of it is timed at its host time;
what a real GPU adds (the driver's queue depth, clock changes during the sleep) only a GPU can show.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from microbench.core.config import TimingSettings
from microbench.core.device import Device
from microbench.core.stats import NoiseSettings
from microbench.roofline import timing

CYCLES_PER_MS = 1.5e6  # the modelled GPU clock: 1.5 GHz


class FakeStream:
    """One in-order stream and the host's clock, in simulated milliseconds."""

    def __init__(self, sleep_works: bool = True):
        self.host = self.gpu = 0.0
        self.log: list[tuple] = []
        self.sleep_works = sleep_works

    def _run(self, duration_ms: float) -> float:
        self.gpu = max(self.gpu, self.host) + duration_ms
        return self.gpu

    # the CudaOps seam
    def event(self, timing: bool = True):
        return FakeEvent(self)

    def sleep(self, cycles: int) -> None:
        self.log.append(("sleep", cycles))
        self._run(cycles / CYCLES_PER_MS if self.sleep_works else 0.0)

    def synchronize(self) -> None:
        self.host = max(self.host, self.gpu)

    def host_ms(self) -> float:
        return self.host

    def call(self, host_ms: float, gpu_ms: float):
        def fn():
            self.host += host_ms
            self.log.append(("call",))
            self._run(gpu_ms)

        return fn


@dataclass
class FakeEvent:
    stream: FakeStream
    at: float | None = None

    def record(self) -> None:
        self.stream.log.append(("record", id(self)))
        self.at = self.stream._run(0.0)

    def query(self) -> bool:
        return self.at is not None and self.at <= self.stream.host

    def elapsed_time(self, end: FakeEvent) -> float:
        return end.at - self.at


class FakeGpu(Device):
    def synchronize(self) -> None:
        self.stream.synchronize()


def _device(stream: FakeStream) -> FakeGpu:
    d = FakeGpu(
        kind="cuda",
        torch_device="cpu",
        name="modelled GPU",
        arch="sm_90",
        units=132,
        memory_bytes=80 * 2**30,
        clock_mhz=1500.0,
    )
    d.stream = stream
    return d


SETTINGS = TimingSettings(warmup_ms=1.0, rep_ms=2.0, min_reps=5, max_reps=200, flush_l2=False)


def _measure(stream, fn, monkeypatch, settings=SETTINGS):
    monkeypatch.setattr(timing, "CudaOps", lambda: stream)
    return timing.time_calls(fn, _device(stream), settings, NoiseSettings())


def test_a_host_bound_call_is_timed_at_its_gpu_time(monkeypatch):
    """30 us of launch, 10 us of GPU work: behind the sleep every start event waits on queued work, so the
    events see the 10 us; the old loop (the flush alone ahead) measured the 30 us of host time."""
    stream = FakeStream()
    t = _measure(stream, stream.call(host_ms=0.030, gpu_ms=0.010), monkeypatch)
    assert t.median_ms == pytest.approx(0.010)
    assert not any(r.startswith("host-bound") for r in t.noise)


def test_the_sleep_is_queued_before_each_batch_start_event(monkeypatch):
    stream = FakeStream()
    _measure(stream, stream.call(host_ms=0.030, gpu_ms=0.010), monkeypatch)
    log = stream.log
    assert log[:4] == [
        ("call",),
        ("record", log[1][1]),
        ("sleep", timing._CALIBRATION_CYCLES),
        ("record", log[3][1]),
    ]  # the untimed first call, then the calibration
    batches = [i for i, e in enumerate(log) if e[0] == "sleep"][1:]
    assert batches
    for i in batches:  # a sleep, the event that marks its end, then the batch's first start event and call
        assert [e[0] for e in log[i + 1 : i + 4]] == ["record", "record", "call"]
    starts = [i for i in range(len(log) - 1) if log[i][0] == "record" and log[i + 1][0] == "call"]
    assert all(any(b < s for b in batches) for s in starts)  # no start event ahead of the first sleep


def test_the_calibration_is_one_bounded_sleep_and_every_lead_is_capped(monkeypatch):
    """A call with 5 ms of launch time: batches shrink so that no head start exceeds gpu_lead_max_ms."""
    stream = FakeStream()
    settings = TimingSettings(
        warmup_ms=50.0, rep_ms=200.0, min_reps=5, max_reps=200, flush_l2=False, gpu_lead_max_ms=20.0
    )
    t = _measure(stream, stream.call(host_ms=5.0, gpu_ms=0.001), monkeypatch, settings)
    sleeps = [e[1] for e in stream.log if e[0] == "sleep"]
    assert sleeps[0] == timing._CALIBRATION_CYCLES  # about 1.3 ms at this clock, once per measure()
    assert max(sleeps[1:]) <= settings.gpu_lead_max_ms * CYCLES_PER_MS + 1
    assert t.median_ms == pytest.approx(0.001)


def test_a_gpu_that_catches_up_is_said_to(monkeypatch):
    """Where the sleep cannot keep the GPU ahead (here it takes no time), each batch is retried a bounded
    number of times and the Timing names the host-bound batches."""
    stream = FakeStream(sleep_works=False)
    t = _measure(stream, stream.call(host_ms=0.030, gpu_ms=0.010), monkeypatch)
    assert t.median_ms == pytest.approx(0.030)  # host time inside the events, as the old loop measured
    assert any(r.startswith("host-bound: the GPU caught up") for r in t.noise)
    calls = sum(1 for e in stream.log if e[0] == "call")
    assert calls <= (timing._RETRIES + 1) * (1 + 3 + int(SETTINGS.warmup_ms / 0.010) + SETTINGS.max_reps)
