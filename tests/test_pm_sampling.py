"""CUPTI PM sampling in a Kineto trace: device-wide samples of hardware metrics over time, the top layer of Tensor
Core evidence for a kernel that ran alone through a sample. No public capture with them exists yet (libkineto's
CuptiPMSamplingProfiler reached its JSON output in August 2026, pytorch/kineto #1530), so the events here are
written as libkineto's output_json.cpp `ChromeTraceLogger::handleCounterEvent` writes a HARDWARE_COUNTERS
activity: one counter event per sample and metric, {"ph": "C", "cat": "hardware_counters", "name": METRIC,
"pid": "GPU <device> Counters", "tid": <resource id>, "ts": <sample start>, "args": {"": VALUE}}."""

from __future__ import annotations

import json

import pytest

from microbench.core.errors import InputError
from microbench.trace import counters
from microbench.trace.analysis import read_trace

from .conftest import analyze

TENSOR = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"
ACTIVE = "sm__cycles_active.avg"
CUSTOM, SGEMM, SMALL = "my_fused_block_kernel", "volta_sgemm_128x64_nn", "vectorized_elementwise_kernel"


def _kernel(name: str, ts: float, dur: float, corr: int, stream: int = 7) -> list[dict]:
    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts - 5,
              "dur": 2, "args": {"correlation": corr}}  # fmt: skip
    kernel = {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
              "args": {"device": 0, "stream": stream, "correlation": corr}}  # fmt: skip
    return [launch, kernel]


def _samples(metric: str, value_at, start: float = 90, stop: float = 320, every: float = 10) -> list[dict]:
    out, t = [], start
    while t <= stop:
        out.append({"ph": "C", "cat": "hardware_counters", "name": metric, "pid": "GPU 0 Counters", "tid": 0,
                    "ts": t, "args": {"": value_at(t)}})  # fmt: skip
        t += every
    return out


def _trace(tmp_path, events) -> str:
    path = tmp_path / "pm.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _rows(doc: dict) -> dict[str, dict]:
    return {k["params"]["kernel"]: k for k in doc["kernels"]}


def test_samples_settle_the_kernels_that_ran_alone_through_them(tmp_path):
    """A kernel whose name says nothing gets the samples' verdict, a named one keeps its own where they agree; a
    sample two kernels share measures neither."""
    events = _kernel(CUSTOM, 100, 100, 1) + _kernel(SGEMM, 250, 50, 2) + _kernel(SMALL, 150, 10, 3, stream=8)
    events += _samples(TENSOR, lambda t: 40.0 if 100 <= t < 200 else 0.0)
    events += _samples(ACTIVE, lambda t: 90.0)
    path = _trace(tmp_path, events)
    tl = read_trace(path)
    got = {tl.names[tl.activities.name[r]]: c for r, c in counters.pm_sample_counters(tl).items()}
    # the custom kernel alone through [100, 150) and [160, 200): 9 samples; the small kernel shares [150, 160)
    assert got[CUSTOM] == {TENSOR: 40.0, counters.PM_SAMPLES: 9}
    assert got[SGEMM] == {TENSOR: 0.0, counters.PM_SAMPLES: 5} and SMALL not in got
    doc = analyze(path)
    rows = _rows(doc)
    assert rows[CUSTOM]["tensor_cores"] == "yes" and rows[CUSTOM]["params"]["evidence"] == "counters"
    assert rows[CUSTOM]["tensor_core_evidence"] == f"PM sampling (9 samples while it ran alone): {TENSOR} = 40"
    assert rows[SGEMM]["tensor_cores"] == "no"
    assert (
        rows[SGEMM]["tensor_core_evidence"]
        == "PM sampling (5 samples while it ran alone): 1 tensor-pipe metrics, all zero"
    )
    assert rows[SMALL]["params"].get("evidence") != "counters"
    assert any(
        "CUPTI PM sampling: 48 values of 2 metric(s) on device(s) 0; 2 kernel(s) ran alone" in n for n in doc["notes"]
    )


def test_samples_against_the_name_are_a_contradiction(tmp_path):
    """The fp32 SGEMM's name says no Tensor Core; tensor-pipe activity while it ran alone says otherwise."""
    path = _trace(tmp_path, _kernel(SGEMM, 100, 100, 1) + _samples(TENSOR, lambda t: 12.5))
    doc = analyze(path)
    assert _rows(doc)[SGEMM]["tensor_cores"] == "yes"
    assert any(
        n.startswith(
            f"counters contradict the kernel name: {SGEMM}: the kernel name says tensor_cores=no, the counters say yes (PM sampling"
        )
        for n in doc["notes"]
    )


def test_samples_without_a_tensor_pipe_metric_settle_nothing(tmp_path):
    doc = analyze(_trace(tmp_path, _kernel(CUSTOM, 100, 100, 1) + _samples(ACTIVE, lambda t: 90.0)))
    assert _rows(doc)[CUSTOM]["tensor_cores"] == "unknown"
    assert any("none measures the tensor pipe" in n for n in doc["notes"])


def test_bad_samples_are_named(tmp_path):
    bad = _samples(TENSOR, lambda t: "n/a", stop=90)
    with pytest.raises(
        InputError, match=r"traceEvents\[2\]: PM-sampling counter 'sm__pipe_tensor_op_hmma.*' has args.\"\"='n/a'"
    ):
        read_trace(_trace(tmp_path, _kernel(CUSTOM, 100, 100, 1) + bad))
    elsewhere = [dict(e, pid=3) for e in _samples(TENSOR, lambda t: 1.0)]
    tl = read_trace(_trace(tmp_path, _kernel(CUSTOM, 100, 100, 1) + elsewhere))
    assert not tl.pm_samples and len(elsewhere) in tl.skipped.values()
