"""Findings never contradict the report they open: on every shipped trace, each finding's range is ordered, never
above the time it says it acts on, never above the step (or trace) it is per, and the share it states is that time
over that step (findings/engine.py bounded)."""

from __future__ import annotations

from pathlib import Path

import pytest

from microbench.findings.engine import bounded

from .conftest import DATA, TRACES, analyze_with_findings

SHIPPED = sorted(TRACES.glob("*.json.gz")) + sorted(DATA.glob("*.json")) + sorted((DATA / "nsight").glob("*.sqlite"))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_finding_of_every_shipped_trace_holds_its_bounds(path: Path, cfg):
    doc = analyze_with_findings(path, cfg)
    step = doc["findings_step_time_us"]
    for f in doc["findings"] + doc["findings_below_threshold"]:
        s = f["saving_us"]
        assert 0 <= s["low"] <= s["expected"] <= s["high"], (f["id"], s)
        model = f.get("saving_model_us")
        if model:  # calibration widens the model's range, never narrows it (findings/calibration.py)
            assert s["low"] <= model["low"], (f["id"], s, model)
            assert s["high"] >= model["high"] or "saving_cut" in f, (f["id"], s, model)  # unless cut, and said
        if step:
            assert s["high"] <= step * (1 + 1e-9), (f["id"], s, step)
        acts_on = f.get("acts_on_us", f.get("time_us"))
        if acts_on:
            assert s["high"] <= acts_on * (1 + 1e-9), (f["id"], s, acts_on)
            assert acts_on >= (f.get("time_us") or 0) * (1 - 1e-9)  # it holds the time the finding quotes
        if f.get("time_us"):
            if step and f.get("share") is not None:
                assert f["share"] == pytest.approx(f["time_us"] / step)


def test_a_range_past_the_time_it_acts_on_is_cut_and_says_so():
    """A CNN's amp finding covered 332,353 us of operators and said 'saves ... 33,691 - 419,882'."""
    f = {
        "id": "amp",
        "time_us": 332_353.0,
        "per": "step",
        "saving_us": {"low": 33_691.0, "expected": 150_000.0, "high": 419_882.0},
    }
    cut = bounded(f, step_us=500_000.0)
    assert cut["saving_us"] == {"low": 33_691.0, "expected": 150_000.0, "high": 332_353.0}
    assert "cut to the time it acts on" in cut["saving_cut"]
    within = {
        "id": "allocator",
        "time_us": 90_000.0,
        "per": "step",
        "saving_us": {"low": 1.0, "expected": 2.0, "high": 111_000.0},
    }
    assert bounded(within, step_us=86_312.0)["saving_us"]["high"] == 86_312.0  # the step is the lower bound
    ok = {"id": "sync", "time_us": 10.0, "per": "step", "saving_us": {"low": 1.0, "expected": 2.0, "high": 3.0}}
    assert bounded(ok, step_us=100.0) is ok
