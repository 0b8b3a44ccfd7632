"""The timing primitive: statistics and the repeat budget."""
from __future__ import annotations

import time

import pytest

from microbench.core.config import TimingSettings
from microbench.core.device import cpu_device
from microbench.core.stats import summarize
from microbench.harness.timing import time_calls


def test_summarize_quantiles_and_cov():
    t = summarize([float(x) for x in range(1, 11)])  # 1..10 ms
    assert t.median_ms == 5.5
    assert t.p20_ms == pytest.approx(2.8)  # inclusive deciles: 1 + 0.2 * 9
    assert t.p80_ms == pytest.approx(8.2)
    assert t.mean_ms == 5.5
    assert t.cov == pytest.approx(2.8722813 / 5.5)  # population std of 1..10 over the mean
    assert t.reps == 10
    assert summarize([3.0]).as_dict() == {"median": 3.0, "p20": 3.0, "p80": 3.0, "cov": 0.0, "reps": 1,
                                          "noise": []}


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
