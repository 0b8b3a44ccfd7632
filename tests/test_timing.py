"""The timing primitive: statistics and the repeat budget."""

from __future__ import annotations

import time

import pytest

from microbench.core.config import TimingSettings
from microbench.core.device import cpu_device
from microbench.core.stats import NoiseSettings, summarize
from microbench.roofline.timing import _busy_cores, time_calls


def test_summarize_quantiles_and_cov():
    t = summarize([float(x) for x in range(1, 11)])  # 1..10 ms
    assert t.median_ms == 5.5
    assert t.p20_ms == pytest.approx(2.8)  # inclusive deciles: 1 + 0.2 * 9
    assert t.p80_ms == pytest.approx(8.2)
    assert t.mean_ms == 5.5
    assert t.cov == pytest.approx(2.8722813 / 5.5)  # population std of 1..10 over the mean
    assert t.reps == 10
    assert summarize([3.0]).as_dict() == {"median": 3.0, "p20": 3.0, "p80": 3.0, "cov": 0.0, "reps": 1, "noise": []}


def test_measure_cpu_sleep_and_rotation():
    calls = []

    def make(i):
        def fn():
            calls.append(i)
            time.sleep(0.002)

        return fn

    settings = TimingSettings(warmup_ms=4.0, rep_ms=20.0, min_reps=4, max_reps=50)
    t = time_calls([make(0), make(1), make(2)], cpu_device(), settings)
    assert 1.9 <= t.median_ms < 50  # sleep(2 ms) never returns early
    assert t.p20_ms <= t.median_ms <= t.p80_ms
    assert settings.min_reps <= t.reps <= settings.max_reps
    assert {0, 1, 2} <= set(calls)  # every input set was used


def test_measure_honours_min_reps_for_slow_calls():
    settings = TimingSettings(warmup_ms=0.0001, rep_ms=0.001, min_reps=7, max_reps=9)
    t = time_calls(lambda: time.sleep(0.001), cpu_device(), settings)
    assert t.reps == 7


def test_measure_rejects_no_calls():
    with pytest.raises(ValueError):
        time_calls([], cpu_device(), TimingSettings())


def test_cpu_timings_say_how_many_cores_the_calls_kept_busy():
    """cpu_busy_cores (the process's CPU time over the timed window's wall time): a call that sleeps keeps no core
    busy, one that spins in Python keeps at most one (its one thread); the DataLoader finding on a CPU reads it
    (docs/findings.md). A window too short for the figure (threads x tick over it above max_busy_error_cores)
    and a window with calls between the timed ones give none."""
    from microbench.core.conditions import sched_ns

    if sched_ns() is None:
        pytest.skip("no /proc/self/task/*/schedstat on this system")

    def spin():
        end = time.perf_counter() + 0.002
        while time.perf_counter() < end:
            pass

    settings = TimingSettings(warmup_ms=4.0, rep_ms=80.0, min_reps=5, max_reps=50)
    asleep = time_calls(lambda: time.sleep(0.002), cpu_device(), settings).cpu_busy_cores
    busy = time_calls(spin, cpu_device(), settings).cpu_busy_cores
    error = NoiseSettings().max_busy_error_cores  # a tick per thread, at most this over an 80 ms window
    assert 0 <= asleep < error and asleep < busy <= 1 + error
    # a window too short for the figure: decided on the window's wall time, which a loaded machine stretches (3
    # calls of a 2 ms spin took 30 ms with 4 other spinners on 2 cores), so the rule is checked on given windows
    noise = NoiseSettings(tick_ms=(4.0,))
    assert _busy_cores(6_000_000, 6_000_000, 1, noise) is None  # a 4 ms tick is 67 % of a 6 ms window
    assert _busy_cores(0, 0, 1, noise) is None
    assert _busy_cores(40_000_000, 80_000_000, 1, noise) == 0.5  # 4 / 80 = 5 %: under the 25 % bound
    assert _busy_cores(40_000_000, 80_000_000, 6, noise) is None  # 6 threads x 4 ms: 30 %
    assert time_calls(spin, cpu_device(), settings, between=spin).cpu_busy_cores is None


def test_between_runs_untimed_before_every_timed_call():
    """time_calls(between=...): decompose's DataLoader probe runs the rest of the step there; it runs before each
    timed call (and its warm-up), and is in none of the times. A GPU has no such gap: refused."""
    calls = {"between": 0, "timed": 0}

    def between():
        calls["between"] += 1
        time.sleep(0.005)

    def timed():
        calls["timed"] += 1

    settings = TimingSettings(warmup_ms=1e-9, rep_ms=1e-9, min_reps=8, max_reps=8)
    t = time_calls(timed, cpu_device(), settings, between=between)
    assert t.reps == 8 and t.median_ms < 5.0  # a call that does nothing, not the 5 ms sleep before it
    assert calls["between"] == calls["timed"] - 1  # all but time_calls' own first, untimed call

    class FakeGpu:
        is_gpu = True

    with pytest.raises(ValueError, match="between"):
        time_calls(timed, FakeGpu(), settings, between=between)
