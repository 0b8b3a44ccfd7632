"""Timestamps counted from the Unix epoch with nanoseconds in the decimals (Kineto since 2024: the shared
V100 DDP trace's `"ts": 1712195495519689.047`) are read exactly: a float64 keeps 0.25 us at 1.7e15, which made
the V100 trace's kernel time 20 us too long and a union of 1 us kernels 4 % off."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal

import pytest

from microbench.comm import ranks
from microbench.trace import gpu_time, kineto
from microbench.trace.timeline import KERNEL

from .conftest import TRACES, needs_traces

EPOCH_START = Decimal("1712195495999900.123")  # 100 us before a whole second: the trace crosses it
KERNELS, DUR_US, PERIOD_US = 300, Decimal("1.3"), Decimal("2.017")


def _trace(start: Decimal) -> str:
    """KERNELS kernels of DUR_US every PERIOD_US from `start`, in one ProfilerStep, as JSON text with the
    decimals a profiler writes (json.dumps of a float would write its 0.25 us rounding)."""
    step = (
        f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": {start}, '
        f'"dur": {PERIOD_US * KERNELS}}}'
    )
    kernels = [
        f'{{"ph": "X", "cat": "kernel", "name": "void gemm_kernel<float>", "pid": 0, "tid": 7, '
        f'"ts": {start + PERIOD_US * i}, "dur": {DUR_US}, '
        f'"args": {{"device": 0, "stream": 7, "correlation": {i + 1}}}}}'
        for i in range(KERNELS)
    ]
    return '{"traceEvents": [' + ", ".join([step, *kernels]) + "]}"


@pytest.fixture(params=["pieces", "whole"])
def reader(request):
    return kineto.read if request.param == "pieces" else kineto._read_whole


def test_epoch_timestamps_keep_their_nanoseconds(tmp_path, reader):
    epoch, near_zero = tmp_path / "epoch.json", tmp_path / "near_zero.json"
    epoch.write_text(_trace(EPOCH_START))
    near_zero.write_text(_trace(Decimal("1000.123")))
    tl, ref = reader(epoch), reader(near_zero)
    assert gpu_time.breakdown(tl)["busy_us"] == pytest.approx(float(DUR_US * KERNELS), abs=1e-6)
    assert gpu_time.breakdown(tl) == pytest.approx(gpu_time.breakdown(ref), abs=1e-6)
    first = Decimal(tl.meta["ts_origin_us"]) + Decimal(float(tl.activities.ts_us[0]))
    assert abs(first - EPOCH_START) < Decimal("1e-6")  # the origin gives the clock back
    assert ref.meta["ts_origin_us"] == 0  # small clocks are read as they were


def test_the_helper_writes_the_decimals_a_profiler_writes():
    doc = json.loads(_trace(EPOCH_START), parse_float=Decimal)
    assert doc["traceEvents"][2]["ts"] == EPOCH_START + PERIOD_US  # 1712195495999902.140, not its float


@needs_traces
def test_the_v100_ddp_trace_kernel_time_is_the_sum_of_its_durations():
    path = TRACES / "v100_resnet_ddp_rank0.json.gz"
    written = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)["traceEvents"]
    kernel_us = sum(e["dur"] for e in written if e.get("cat") == "kernel" and e.get("ph") == "X")
    tl = kineto.read(path)
    k = tl.activities
    assert float((k.end_us - k.ts_us)[k.category == KERNEL].sum()) == pytest.approx(float(kernel_us), abs=1e-3)
    assert gpu_time.breakdown(tl)["computation_us"] == pytest.approx(float(kernel_us), abs=1e-3)


@needs_traces
def test_ranks_are_placed_on_the_clock_not_on_their_origins():
    path = TRACES / "v100_resnet_ddp_rank0.json.gz"
    tl = kineto.read(path)
    s = ranks.summarize_rank(path, 0)
    assert tl.meta["ts_origin_us"] > 1e15
    assert s.gpu_first_us == pytest.approx(tl.meta["ts_origin_us"] + float(tl.activities.ts_us.min()), abs=0.5)
    assert all(c.kernel_ts > 1e15 for c in s.calls if c.kernel_ts is not None)


def test_header_keys_after_the_events_stay_plain_numbers(tmp_path):
    """Only the events are decoded exact: a long number in a key written after the array (distributedInfo, the
    tail's) is a float, not a Decimal that the JSON report and the job's arithmetic would meet."""
    path = tmp_path / "tail.json"
    path.write_text(_trace(EPOCH_START)[:-1] + ', "distributedInfo": {"rank": 0, "skew": 12345678901234567.5}}')
    tl = kineto.read(path)
    assert tl.meta["ts_origin_us"] and type(tl.distributed["skew"]) is float
