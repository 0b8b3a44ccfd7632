"""The one GPU time breakdown (microbench/trace/gpu_time.py): the whole trace, steps whose GPU work overlaps
(every activity in exactly one step, sums that add up), windows, and the shared V100 ResNet DDP trace."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from microbench.trace import gpu_time, kineto
from microbench.trace.analysis import read_trace
from microbench.trace.timeline import positions_by_key

from .conftest import TRACES, needs_traces

GEMM, COPY, SET = "volta_sgemm_128x64_nn", "Memcpy HtoD (Pageable -> Device)", "Memset (Device)"


def _launch(corr: int, ts: float) -> dict:
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "dur": 1,
        "args": {"correlation": corr},
    }


def _gpu(cat: str, name: str, ts: float, dur: float, stream: int, corr: int) -> dict:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 0,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": {"device": 0, "stream": stream, "correlation": corr},
    }


def _step(n: int, ts: float) -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": ts, "dur": 100}


def pipelined_trace(tmp_path, gpu_steps=()):
    """Two steps on the CPU, [100, 200) and [200, 300). Step 1's GEMM runs [120, 250); step 2's first copy,
    launched at 205, runs [130, 150) under it (the pipelined prefetch), its GEMM [260, 300) and a copy
    [300, 310). A memset launched at 50 (before the first step) runs [60, 70); a kernel without a launch in
    the trace runs [280, 285): outside the steps, unless a GPU-side step annotation (`gpu_steps`: (n, ts, dur))
    holds it."""
    events = [
        _step(1, 100),
        _step(2, 200),
        _launch(1, 50),
        _gpu("gpu_memset", SET, 60, 10, 8, 1),
        _launch(2, 110),
        _gpu("kernel", GEMM, 120, 130, 7, 2),
        _launch(3, 205),
        _gpu("gpu_memcpy", COPY, 130, 20, 8, 3),
        _launch(4, 210),
        _gpu("kernel", GEMM, 260, 40, 7, 4),
        _launch(5, 220),
        _gpu("gpu_memcpy", COPY, 300, 10, 8, 5),
        _gpu("kernel", GEMM, 280, 5, 9, 99),
    ]
    events += [
        {"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{n}", "pid": 0, "tid": 7, "ts": ts, "dur": dur}
        for n, ts, dur in gpu_steps
    ]
    path = tmp_path / "pipelined.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return kineto.read(path)


def test_whole_trace_breakdown(tmp_path):
    whole = gpu_time.breakdown(pipelined_trace(tmp_path))
    # activity [60, 310): busy [60, 70) + [120, 250) + [260, 310); the memset counts with the copies
    assert whole == {
        "gpu_span_us": 250,
        "busy_us": 190,
        "computation_us": 170,
        "exposed_comm_us": 0,
        "exposed_memcpy_us": 20,
        "idle_us": 60,
        "comm_us": 0,
        "overlapped_comm_us": 0,
    }


def test_pipelined_steps_own_each_instant_once(tmp_path):
    tl = pipelined_trace(tmp_path)
    a = gpu_time.assign_steps(tl, tl.step_windows())
    # trace order of the activities; the kernel without a launch is in no step: nothing shows which launched it
    assert a.step.tolist() == [gpu_time.BEFORE_FIRST_STEP, 0, 1, 1, 1, gpu_time.OUTSIDE_STEPS]
    assert not a.by_gpu_annotation.any()
    _, steps, outside = gpu_time.step_breakdowns(tl)
    s1, s2 = steps
    # step 2's early copy runs under step 1's GEMM: that time is step 1's computation, not step 2's
    assert (s1["busy_us"], s1["computation_us"], s1["idle_us"], s1["gpu_span_us"]) == (130, 130, 0, 130)
    # step 2 owns its GEMM [260, 300), its last copy [300, 310) and the gap [250, 260) inside its own span
    assert (s2["busy_us"], s2["computation_us"], s2["exposed_memcpy_us"], s2["idle_us"]) == (50, 40, 10, 10)
    assert (s2["kernel_count"], s2["gpu_time_us"]) == (1, 70)
    before = outside["before_first_step"]
    assert (before["activities"], before["busy_us"], before["exposed_memcpy_us"]) == (1, 10, 10)
    assert outside["between_steps_idle_us"] == 50 and outside["placed_by_gpu_annotation"] == 0
    # its instants [280, 285) lie under step 2's GEMM, which owns them: outside the steps it owns no time
    assert (outside["outside_steps"]["activities"], outside["outside_steps"]["busy_us"]) == (1, 0)
    assert outside["unlaunched_outside_steps"] == 1
    whole = gpu_time.breakdown(tl)
    for f in ("busy_us", "computation_us", "exposed_memcpy_us"):
        assert s1[f] + s2[f] + before[f] == whole[f]
    assert s1["idle_us"] + s2["idle_us"] + outside["between_steps_idle_us"] == whole["idle_us"]


def test_a_kernel_without_a_launch_goes_to_the_gpu_step_annotation_that_holds_it(tmp_path):
    # Kineto writes each step's GPU-side copy (`gpu_user_annotation` ProfilerStep#N) over the GPU work it launched
    tl = pipelined_trace(tmp_path, gpu_steps=[(1, 120, 130), (2, 255, 55)])
    a = gpu_time.assign_steps(tl, tl.step_windows())
    assert a.step.tolist() == [gpu_time.BEFORE_FIRST_STEP, 0, 1, 1, 1, 1]
    assert a.by_gpu_annotation.tolist() == [False] * 5 + [True]
    _, steps, outside = gpu_time.step_breakdowns(tl)
    assert (steps[1]["kernel_count"], steps[1]["gpu_time_us"]) == (2, 75)
    assert outside["placed_by_gpu_annotation"] == 1 and outside["unlaunched_outside_steps"] == 0
    # one that starts before every GPU step annotation stays outside
    tl = pipelined_trace(tmp_path, gpu_steps=[(2, 285, 25)])
    assert gpu_time.assign_steps(tl, tl.step_windows()).step[-1] == gpu_time.OUTSIDE_STEPS


def test_a_window_clips_every_activity(tmp_path):
    tl = pipelined_trace(tmp_path)
    w = gpu_time.breakdown(tl, window=(240.0, 270.0))
    assert (w["gpu_span_us"], w["busy_us"], w["computation_us"], w["idle_us"]) == (30, 20, 20, 10)
    comm = gpu_time.of_intervals([0, 50], [100, 80], [gpu_time.COMM, gpu_time.COMPUTE], window=(0, 100))
    assert (comm["comm_us"], comm["exposed_comm_us"], comm["overlapped_comm_us"], comm["idle_us"]) == (100, 70, 30, 0)


@pytest.mark.slow
@needs_traces
def test_v100_resnet_ddp_steps_add_up():
    tl = read_trace(TRACES / "v100_resnet_ddp_rank0.json.gz")
    whole = gpu_time.breakdown(tl)
    w = tl.step_windows()
    steps, outside = gpu_time.per_step(tl, w)
    a = gpu_time.assign_steps(tl, w)
    assert len(steps) == 5 and (a.step >= 0).all()  # every activity in exactly one step
    assert sum(s["kernel_count"] for s in steps) == 4350
    busy = (
        sum(s["busy_us"] for s in steps) + outside["before_first_step"]["busy_us"] + outside["outside_steps"]["busy_us"]
    )
    assert busy == pytest.approx(whole["busy_us"], rel=0.01)
    assert sum(s["idle_us"] for s in steps) <= whole["idle_us"]
    assert np.isclose(sum(s["idle_us"] for s in steps) + outside["between_steps_idle_us"], whole["idle_us"])


def test_ddp_split_per_step_and_bucket(tmp_path):
    """comm/ddp.py's split of a GPU trace is this breakdown: two DDP steps [0, 100) and [100, 200); each
    backward GEMM runs while the previous bucket's all-reduce runs on NCCL's stream."""
    from microbench.comm.ddp import STEP_RANGE, split_steps, summarize_steps

    nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    events = []
    for n, t0 in enumerate((0, 100)):
        c = 10 * n
        events += [
            {"ph": "X", "cat": "user_annotation", "name": STEP_RANGE, "pid": 1, "tid": 1, "ts": t0, "dur": 100},
            _launch(c + 1, t0 + 1),
            _gpu("kernel", GEMM, t0 + 10, 40, 7, c + 1),
            _launch(c + 2, t0 + 2),
            _gpu("kernel", nccl, t0 + 30, 30, 20, c + 2),  # 20 hidden, 10 exposed
            _launch(c + 3, t0 + 3),
            _gpu("kernel", nccl, t0 + 60, 20, 20, c + 3),
        ]  # all exposed
    path = tmp_path / "ddp.json"
    path.write_text(json.dumps({"traceEvents": events}))
    steps = split_steps(path)
    assert [s["allreduce_calls"] for s in steps] == [2, 2]
    s = steps[0]
    assert (s["step_ms"], s["compute_ms"], s["comm_ms"], s["overlapped_comm_ms"], s["exposed_comm_ms"]) == (
        0.1,
        0.04,
        0.05,
        0.02,
        0.03,
    )
    assert s["buckets"] == [
        {"at_ms": 0.03, "comm_ms": 0.03, "exposed_comm_ms": 0.01},
        {"at_ms": 0.06, "comm_ms": 0.02, "exposed_comm_ms": 0.02},
    ]
    assert summarize_steps(steps)["comm_share"] == pytest.approx(0.3)


def test_devices_are_broken_down_apart_and_summed():
    """Two devices (a trace of two GPUs, or the same time on two ranks): no overlap across devices hides
    anything; the whole is the sum."""
    from microbench.trace.timeline import KERNEL, NO_ID, TimelineBuilder

    b = TimelineBuilder("two devices", "kineto")
    b.add_activity(GEMM, 0.0, 10.0, 0, 7, NO_ID, NO_ID, KERNEL)
    b.add_activity("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 0.0, 10.0, 1, 7, NO_ID, NO_ID, KERNEL)
    b.add_activity(GEMM, 20.0, 5.0, 1, 7, NO_ID, NO_ID, KERNEL)
    tl = b.build()
    dev = gpu_time.per_device(tl)
    assert (dev["0"]["computation_us"], dev["0"]["idle_us"], dev["0"]["kernel_count"]) == (10, 0, 1)
    assert (dev["1"]["exposed_comm_us"], dev["1"]["computation_us"], dev["1"]["idle_us"], dev["1"]["gpu_span_us"]) == (
        10,
        5,
        10,
        25,
    )
    whole = gpu_time.breakdown(tl)
    assert all(whole[f] == dev["0"][f] + dev["1"][f] for f in gpu_time.FIELDS + gpu_time.COMM_FIELDS)


def test_a_step_on_two_devices_has_each_devices_own_breakdown(tmp_path):
    """A process driving two GPUs: the step's figures add the devices' spans (its GPU span can exceed its wall
    time), so each step also carries each device's own (`by_device`), which the steps table prints under it."""
    events = [
        _step(1, 100),
        _launch(1, 110),
        _gpu("kernel", GEMM, 120, 50, 7, 1),
        _launch(2, 115),
        {**_gpu("kernel", GEMM, 130, 60, 7, 2), "pid": 1},
    ]
    events[-1]["args"] = {**events[-1]["args"], "device": 1}
    path = tmp_path / "two.json"
    path.write_text(json.dumps({"traceEvents": events}))
    tl = kineto.read(path)
    _, (step,), _ = gpu_time.step_breakdowns(tl)
    assert step["gpu_span_us"] == 110 and step["computation_us"] == 110  # 50 + 60: the devices summed

    def all_computation(us: float) -> dict:
        return {
            "kernel_count": 1,
            "gpu_span_us": us,
            "busy_us": us,
            "computation_us": us,
            "exposed_comm_us": 0,
            "exposed_memcpy_us": 0,
            "idle_us": 0,
            "comm_us": 0,
            "overlapped_comm_us": 0,
        }

    assert step["by_device"] == {"0": pytest.approx(all_computation(50)), "1": pytest.approx(all_computation(60))}
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"traceEvents": events[:3]}))
    assert "by_device" not in gpu_time.step_breakdowns(kineto.read(one))[1][0]


@needs_traces
def test_work_from_before_the_step_stays_out_of_it(tmp_path):
    """The MI300X bert-small trace (TraceLens' test data) with 20 of its kernels copied, without their launch,
    into the 449 us between the CPU step's start and its GPU-side annotation, as an MI300X trace whose first 463
    kernels were still running from before the profiled step: the step keeps TraceLens' figures (3.496 ms span,
    3.105 ms idle: tests/data/traces/SOURCES.md), the copies go outside the steps."""
    import gzip

    doc = json.loads(gzip.decompress((TRACES / "mi300_bert_small.json.gz").read_bytes()))
    kernels = sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    t0 = next(e["ts"] for e in doc["traceEvents"] if e.get("cat") == "user_annotation") + 10
    for j, e in enumerate(kernels[:20]):
        args = {k: v for k, v in e["args"].items() if k != "correlation"}
        doc["traceEvents"].append(e | {"ts": t0 + 20 * j, "dur": 15, "args": args})
    path = tmp_path / "leftover.json"
    path.write_text(json.dumps(doc))
    _, (step,), outside = gpu_time.step_breakdowns(kineto.read(path))
    assert step["kernel_count"] == 60
    assert step["gpu_span_us"] == pytest.approx(3496.0, abs=0.5)
    assert step["idle_us"] / step["gpu_span_us"] == pytest.approx(3105 / 3496, abs=0.005)
    assert outside["outside_steps"]["kernel_count"] == 20 and outside["unlaunched_outside_steps"] == 20


def _naive_split(lo, hi, layers):
    """The definition: every interval of the trace clipped to the window, each instant to the first layer."""
    bounds = sorted({lo, hi, *(min(max(x, lo), hi) for _, s, e in layers for x in (*s, *e))})
    out = {}
    for a, z in zip(bounds, bounds[1:]):
        mid = (a + z) / 2
        n = next((n for n, s, e in layers if any(x <= mid < y for x, y in zip(s, e))), "other")
        out[n] = out.get(n, 0.0) + (z - a)
    return out


interval_lists = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 60)), max_size=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(interval_lists, min_size=1, max_size=3), st.integers(0, 220), st.integers(0, 120))
def test_a_windows_split_takes_only_its_intervals_and_agrees_with_the_definition(layers, lo, width):
    """gpu_time._split finds a window's intervals by search (sorted starts, running maximum end) instead of
    clipping the whole trace's per step (quadratic in a long trace): the same parts as the definition."""
    named = [
        (f"l{i}", np.array([float(a) for a, _ in iv]), np.array([float(a + d) for a, d in iv]))
        for i, iv in enumerate(layers)
    ]
    halves = [(n, [gpu_time._by_start(s[::2], e[::2]), gpu_time._by_start(s[1::2], e[1::2])]) for n, s, e in named]
    got = gpu_time._split(float(lo), float(lo + width), halves)  # a layer of two sets, as `runtime` is
    want = _naive_split(float(lo), float(lo + width), named)
    assert {k: v for k, v in got.items() if v} == pytest.approx({k: v for k, v in want.items() if v})
    assert sum(got.values()) == pytest.approx(width)


@given(st.lists(st.integers(-1, 6), max_size=40))
def test_positions_by_key_is_each_keys_positions(keys):
    keys = np.array(keys, dtype=np.int64)
    got = positions_by_key(keys)
    assert set(got) == {int(k) for k in keys if k >= 0}
    for k, at in got.items():
        assert at.tolist() == [i for i, x in enumerate(keys) if x == k]


def _setup_trace(tmp_path, host_range: str) -> object:
    """One step [0, 1000): a kernel [0, 100), then the host inside `host_range` [150, 850) with no operator and
    no launch (an NVTX range of an Nsight export, a record_function range), then a kernel [900, 1000)."""
    events = [
        {**_step(1, 0), "dur": 1000},
        _launch(1, 0),
        _gpu("kernel", GEMM, 0, 100, 7, 1),
        {"ph": "X", "cat": "user_annotation", "name": host_range, "pid": 1, "tid": 1, "ts": 150, "dur": 700},
        _launch(2, 890),
        _gpu("kernel", GEMM, 900, 100, 7, 2),
    ]
    path = tmp_path / "setup.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return kineto.read(path)


@pytest.mark.parametrize(
    "host_range",
    [
        "FusionKernelRuntime::compileFusionParallel",  # nvFuser's JIT compilation (a public nvFuser Nsight export)
        "executor_utils::NVRTC",
        "MPI_Init",  # an MPI program's NVTX range (a public Nsight export)
    ],
)
def test_one_off_setup_is_its_own_idle_kind(tmp_path, host_range):
    tl = _setup_trace(tmp_path, host_range)
    (st,) = gpu_time.step_breakdowns(tl)[1]
    idle = st["idle_by_host_us"]
    # the rest of the idle: [100, 150) and [850, 900) less the 1 us launch call at 890 (runtime)
    assert idle["setup"] == pytest.approx(700) and idle["other"] == pytest.approx(99) and idle["runtime"] == 1


def test_a_range_that_is_no_setup_stays_with_the_untraced_host_time(tmp_path):
    (st,) = gpu_time.step_breakdowns(_setup_trace(tmp_path, "forward"))[1]
    assert st["idle_by_host_us"]["setup"] == 0.0 and st["idle_by_host_us"]["other"] == pytest.approx(799)


def test_no_pytorch_fix_for_a_trace_without_pytorch_operators(tmp_path):
    """The host waits 800 us of a 1,000 us step between two launches inside a plain range and no PyTorch operator
    is in the trace (a C / MPI program under Nsight Systems): host_bound, with no DataLoader or torch.profiler
    advice."""
    from .conftest import analyze_with_findings

    _setup_trace(tmp_path, "forward")
    doc = analyze_with_findings(tmp_path / "setup.json")
    (found,) = [f for f in doc["findings"] if f["id"] == "host_bound"]
    assert "DataLoader" not in found["fix"] and "torch" not in found["fix"] and "nsys" in found["fix"]
    # the finding names the range that holds the idle time: [150, 850) is all idle
    assert "700 us of it inside the range 'forward'" in found["what"]
    assert found["evidence"]["idle_in_ranges_us"] == {"forward": 700.0}


def test_one_off_setup_is_never_a_host_saving(tmp_path):
    from .conftest import analyze_with_findings

    def host_savings(host_range: str) -> list[float]:
        _setup_trace(tmp_path, host_range)
        doc = analyze_with_findings(tmp_path / "setup.json")
        return [f["saving_us"]["high"] for f in doc["findings"] if f["id"] in ("host_bound", "launch_bound")]

    # the same 800 us of host time: a per-step saving when it is the host's own work, none when it is compilation
    assert max(host_savings("forward")) >= 799
    assert all(high <= 100 + 1e-6 for high in host_savings("FusionKernelRuntime::compileFusionParallel"))


def test_a_file_of_several_ranks_says_so_in_integrity(tmp_path):
    """Two processes (a TraceFusion-style merge of two ranks), each with its ProfilerSteps and the kernels it launched:
    the integrity section names the processes; one process says nothing of the kind."""
    from .conftest import analyze

    def rank(pid: int, dev: int, corr: int) -> list[dict]:
        return [
            {**_step(1, 0), "pid": pid, "dur": 500},
            {**_launch(corr, 10), "pid": pid},
            {
                **_gpu("kernel", GEMM, 20, 100, 7, corr),
                "pid": 100 + dev,
                "args": {"device": dev, "stream": 7, "correlation": corr},
            },
        ]

    path = tmp_path / "merged.json"
    path.write_text(json.dumps({"traceEvents": rank(1, 0, 1) + rank(2, 1, 2)}))
    found = [m for m in analyze(path)["integrity"]["missing"] if m["what"] == "several processes in one file"]
    assert len(found) == 1 and "2 processes (pids 1, 2)" in found[0]["detail"]
    assert "read each process as a rank" in found[0]["detail"]
    path.write_text(json.dumps({"traceEvents": rank(1, 0, 1)}))
    assert not [m for m in analyze(path)["integrity"]["missing"] if m["what"] == "several processes in one file"]


def test_set_up_inside_the_steps_is_an_integrity_line_and_no_range_s_idle(tmp_path):
    """700 us of nvFuser compilation in a 1,000 us step: the integrity section says the steps are warm-up (per-step
    values unreliable: profile after it), and the compilation's range is not named as holding the host's idle."""
    from .conftest import analyze

    _setup_trace(tmp_path, "FusionKernelRuntime::compileFusionParallel")
    doc = analyze(tmp_path / "setup.json")
    (line,) = [m for m in doc["integrity"]["missing"] if m["what"] == "steady-state steps"]
    assert line["detail"].startswith("700 us (70%) of the steps' 1,000 us is one-off set-up")
    assert "profile after warm-up" in line["detail"] and line["unreliable"] == ["per-step values"]
    assert doc["steps"][0]["idle_in_ranges_us"] == {}
    _setup_trace(tmp_path, "forward")  # the same host time in the user's own range: a per-step cause, no such line
    doc = analyze(tmp_path / "setup.json")
    assert not [m for m in doc["integrity"]["missing"] if m["what"] == "steady-state steps"]
    assert doc["steps"][0]["idle_in_ranges_us"] == {"forward": pytest.approx(700)}
