"""The communication finding on a CPU trace of a data-parallel job (gloo: collectives on the CPU, no GPU activity):
its figures are the one breakdown over CPU intervals (trace/gpu_time.py `cpu_intervals`), the DDP split's own
(comm/ddp.py), and the rules that need GPU activity or decompose's measurements say so."""

from __future__ import annotations

import json

import pytest

from microbench.core.config import load_config
from microbench.findings import engine as F
from microbench.findings import facts as FX
from microbench.findings import rules as R
from microbench.trace.analysis import TraceAnalysis

STEP = "train_step"
TRAIN, GLOO = 1, 2  # the training thread and the process group's worker thread


def _x(cat, name, ts, dur, tid=TRAIN):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 7, "tid": tid, "args": {}}


def _step(t0: float) -> list[dict]:
    """One 1,000 us step: forward and backward [0, 600) on the training thread, a first bucket's 100 us all-reduce
    under the backward [300, 400), the last bucket's 200 us all-reduce after it [600, 800) with nothing on the
    training thread (gloo's own copy inside it is not the step's computation), the optimizer [800, 1000)."""
    return [
        _x("user_annotation", STEP, t0, 1000),
        _x("cpu_op", "aten::convolution", t0, 300),
        _x("cpu_op", "aten::convolution_backward", t0 + 300, 300),
        _x("user_annotation", "gloo:all_reduce", t0 + 300, 100, GLOO),
        _x("user_annotation", "gloo:all_reduce", t0 + 600, 200, GLOO),
        _x("cpu_op", "aten::copy_", t0 + 600, 50, GLOO),
        _x("cpu_op", "aten::_foreach_add_", t0 + 800, 200),
    ]


SPARE_CORE = {"cores": 4, "local_ranks": 2, "intra_op_threads": 1}  # a core per rank left for gloo's work
NO_SPARE_CORE = {"cores": 2, "local_ranks": 2, "intra_op_threads": 1}


def _trace(tmp_path, events, host=SPARE_CORE, name="rank0.json"):
    """A rank's trace as `comm ddp --out` writes it: the host facts in its dawnscope_host key (None: not there)."""
    p = tmp_path / name
    doc = {"traceEvents": events, "distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 2}}
    p.write_text(json.dumps(doc | ({"dawnscope_host": host} if host is not None else {})))
    return p


def _findings(path, step_range=STEP):
    return F.findings_of(TraceAnalysis.open(path, load_config(None), step_range), load_config(None))


def test_exposed_communication_on_a_cpu_trace_is_the_breakdown_over_its_cpu_intervals(tmp_path):
    out = _findings(_trace(tmp_path, _step(0.0) + _step(2000.0)))
    f = out["findings"][0]
    assert f["id"] == "exposed_comm" and out["step_time_us"] == pytest.approx(1000.0)
    # exposed: the last bucket's 200 us; computation 800 us, 100 of it already under the first bucket, so 700
    # could hide it, and each rank has a core its thread leaves idle: expected all 200; low 0 (a CPU); high 200
    assert f["saving_us"] == pytest.approx({"low": 0.0, "expected": 200.0, "high": 200.0})
    assert f["evidence"]["host"] == SPARE_CORE and "1 of a core per rank idle" in f["what"]
    assert f["share"] == pytest.approx(0.2) and "700 us of computation" in f["what"]
    ev = f["evidence"]
    assert ev["unit"] == "collective" and ev["kernels"] == [{"kernel": "gloo:all_reduce", "time_us": 300.0}]
    assert ev["exposed_comm_us"] == pytest.approx(200.0) and ev["overlapped_comm_us"] == pytest.approx(100.0)
    assert "bucket_cap_mb" in f["fix"]  # the all-reduce's fix (findings.toml by_collective)
    assert f["validation"]["on"] == "cpu"


def test_a_cpu_trace_checks_only_the_communication_rule_and_says_why_not_the_rest(tmp_path):
    out = _findings(_trace(tmp_path, _step(0.0)))
    why = FX.rules()["cpu_trace"]["why"]
    not_checked = {n["id"]: n["why"] for n in out["not_checked"]}
    assert set(not_checked) == set(R.RULES) - {"exposed_comm"} and set(not_checked.values()) == {why}


def test_a_cpu_trace_without_step_ranges_does_not_check_communication(tmp_path):
    out = _findings(_trace(tmp_path, _step(0.0)), step_range=None)  # no ProfilerStep#, and its range not named
    assert out["findings"] == []
    assert {"id": "exposed_comm", "why": FX.NEEDS_WHY["steps"]} in out["not_checked"]


def test_a_cpu_trace_without_collectives_has_no_finding_to_check(tmp_path):
    events = [e for e in _step(0.0) if not e["name"].startswith("gloo:")]
    out = _findings(_trace(tmp_path, events))
    assert out["not_checked"] == [{"id": "all", "why": FX.rules()["host_only"]["why"]}]
    assert out["not_checked"][0]["why"].startswith("no GPU activity in the trace; for a CPU run")


@pytest.mark.parametrize(
    "host, expected_us", [(NO_SPARE_CORE, 0.0), ({"cores": 3, "local_ranks": 2, "intra_op_threads": 1}, 100.0)]
)
def test_on_a_cpu_the_collectives_hide_only_on_the_cores_the_ranks_threads_leave_idle(tmp_path, host, expected_us):
    """Two ranks of one thread on two cores: hidden under the computation the all-reduce takes its CPU time from it,
    so the expected saving is 0 and no finding is made, said as checked under the threshold with its range; on three
    cores half a core per rank is idle: half the 200 us."""
    out = _findings(_trace(tmp_path, _step(0.0), host))
    made = {x["id"]: x["saving_us"] for x in out["findings"]} | {x["id"]: x["saving_us"] for x in out["below"]}
    assert made["exposed_comm"] == pytest.approx({"low": 0.0, "expected": expected_us, "high": 200.0})
    assert bool(out["findings"]) == (expected_us >= FX.threshold("min_saving_share") * 1000.0)
    # the line under the findings says why the expected is below the exposed time (no core idle: 0 of a core)
    from microbench.report.findings_report import below_line

    line = below_line({"findings_below_threshold": out["below"]}) or ""
    if not expected_us:
        assert "exposed_comm 0 us (up to 200: the ranks' threads leave 0 of a core per rank idle" in line


@pytest.mark.parametrize(
    "host",
    [
        None,
        {"cores": "two", "local_ranks": 2, "intra_op_threads": 1},
        {"cores": 2, "local_ranks": 0, "intra_op_threads": 1},
    ],
)
def test_a_cpu_trace_without_its_hosts_cores_does_not_guess_the_saving(tmp_path, host):
    out = _findings(_trace(tmp_path, _step(0.0), host))
    assert out["findings"] == []
    assert {"id": "exposed_comm", "why": FX.rules()["rules"]["exposed_comm"]["cpu_no_host"]} in out["not_checked"]
