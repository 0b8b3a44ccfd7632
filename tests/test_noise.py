"""The stability judgement of repeated timings, on synthetic sample lists (no timing happens here)."""

from __future__ import annotations

import random

import pytest

from microbench.core.stats import NoiseSettings, bimodal, noise_reasons, spreads_overlap, summarize, tick_quantised

ST = NoiseSettings()  # the defaults are bench.toml's values; test_config checks that file separately


def _steady(n=20, centre=2.37, rel=0.02, seed=0):
    rng = random.Random(seed)
    return [centre * (1 + rng.uniform(-rel, rel)) for _ in range(n)]


def test_steady_samples_are_stable():
    assert noise_reasons(_steady(), ST) == []
    assert summarize(_steady(), ST).noisy is False


def test_wide_spread_is_noisy():
    x = [1.0, 1.1, 1.3, 1.5, 1.8, 2.0, 2.2, 2.6, 3.0, 3.3]  # p20 1.26, p80 2.68: 96 % of the 1.9 median
    reasons = noise_reasons(x, ST)
    assert any(r.startswith("p20-p80 spread") for r in reasons)


def test_two_clusters_are_bimodal():
    x = _steady(10, 0.1, seed=1) + _steady(10, 16.0, seed=2)  # alone vs sharing the cores
    b = bimodal(sorted(x), ST)
    assert b is not None and b[0] == 10 and b[2] == 10
    assert b[1] == pytest.approx(0.1, rel=0.03) and b[3] == pytest.approx(16.0, rel=0.03)
    assert any("bimodal" in r for r in noise_reasons(x, ST))


def test_one_outlier_is_not_a_mode():
    x = _steady(19) + [9.0]  # one preempted repeat among 20: below min_cluster_share
    assert bimodal(sorted(x), ST) is None


def test_uniform_spread_is_not_bimodal():
    x = [1.0 + 0.1 * i for i in range(20)]  # many small gaps, no large one
    assert bimodal(x, ST) is None


def test_samples_on_scheduler_ticks():
    # The symptom on a loaded 2-core machine: a 14 us op timed at 8, 12 and 16 ms (2, 3, 4 ticks of 4 ms).
    x = [8.01, 7.98, 12.02, 15.99, 16.03, 8.0, 11.97, 16.0, 8.02, 12.0]
    tick = tick_quantised(sorted(x), ST)
    assert tick is not None and tick[0] == 4.0 and tick[1] == 1.0
    assert any("scheduler tick" in r for r in noise_reasons(x, ST))


def test_fast_op_that_mostly_waited_one_tick():
    # Same multiple every time, but the fastest repeat shows the op itself takes 0.05 ms.
    x = [0.05] + [16.0 + 0.01 * i for i in range(9)]
    assert tick_quantised(sorted(x), ST) is not None


def test_steady_op_near_a_multiple_is_not_flagged_as_ticks():
    # A steady 8.0 ms op on one multiple with no fast repeat cannot be told from ticks by its repeats alone.
    assert tick_quantised(sorted(_steady(20, 8.0, rel=0.005)), ST) is None


def test_too_few_repeats():
    assert noise_reasons([1.0, 1.0], ST) == ["only 2 repeat(s): no spread to judge (need 3)"]


def test_spreads_overlap():
    a = {"p20": 1.0, "p80": 1.2}
    assert spreads_overlap(a, {"p20": 1.15, "p80": 1.4})
    assert not spreads_overlap(a, {"p20": 1.25, "p80": 1.4})


def test_long_ops_are_not_judged_by_ticks():
    # 150 ms GEMMs landing near multiples of 4 ms: a tick is under 3 % of their time.
    assert tick_quantised([148.0, 152.01, 156.02, 160.0, 163.5], ST) is None


def test_waiting_for_a_cpu():
    from microbench.core.stats import wait_reason

    assert wait_reason(0.02, ST) is None and wait_reason(None, ST) is None
    assert "waited for a CPU 86%" in wait_reason(0.86, ST)
