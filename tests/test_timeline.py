"""The timeline model (microbench/trace/timeline.py) and its Kineto reader: typed columns checked against an
independent reading of the whole file, the one correlation, step and window rules, a timeline built by hand
as another format's reader would, and commands that never import torch."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from microbench.trace import gpu_time, kineto, metrics
from microbench.trace.timeline import CPU_RANGE, GPU_RANGE, KERNEL, MEMCPY, MEMSET, NO_ID, Timeline, TimelineBuilder

from .conftest import REPO, TRACES, needs_traces

AMD = Path(__file__).resolve().parent / "data" / "amd_mi300x_synthetic.json"


@pytest.fixture(scope="module")
def v100() -> tuple[Timeline, list[dict]]:
    path = TRACES / "v100_resnet_ddp_rank0.json.gz"
    raw = [e for e in json.loads(gzip.open(path, "rt").read())["traceEvents"] if e.get("ph") == "X"]
    return kineto.read(path), raw


@needs_traces
def test_columns_hold_every_event_of_their_kind(v100):
    tl, raw = v100
    by = {
        c: [e for e in raw if e.get("cat") == c]
        for c in (
            "kernel",
            "gpu_memcpy",
            "gpu_memset",
            "cuda_runtime",
            "cpu_op",
            "user_annotation",
            "gpu_user_annotation",
        )
    }
    k = tl.activities
    for cat, code in (("kernel", KERNEL), ("gpu_memcpy", MEMCPY), ("gpu_memset", MEMSET)):
        rows = k.category == code
        assert rows.sum() == len(by[cat])
        assert k.dur_us[rows].sum() == pytest.approx(sum(e["dur"] for e in by[cat]))
        assert [tl.names[n] for n in k.name[rows]] == [e["name"] for e in by[cat]]  # trace order kept
        assert k.stream[rows].tolist() == [e["args"]["stream"] for e in by[cat]]
    assert len(tl.launches) == len(by["cuda_runtime"]) == 15_329  # every runtime call here carries a correlation
    assert len(tl.cpu_ops) == len(by["cpu_op"])
    assert (tl.ranges.kind == CPU_RANGE).sum() == len(by["user_annotation"])
    assert (tl.ranges.kind == GPU_RANGE).sum() == len(by["gpu_user_annotation"])
    # typed columns, not objects; each distinct name stored once
    for table in (tl.activities, tl.launches, tl.cpu_ops, tl.ranges):
        assert all(getattr(table, f).dtype != object for f in type(table).typecodes())
    assert len(tl.names) < len(raw) / 20
    lo = min(e["ts"] for e in raw if e["cat"] != "Trace")
    # its ts are read relative to an origin, exactly (test_epoch_timestamps.py); the origin gives the clock back
    assert tl.span_us[0] + tl.meta["ts_origin_us"] == pytest.approx(lo, abs=0.25)
    assert tl.wall_span_us == pytest.approx(495_002.377, abs=1e-6)  # docs/traces.md


@needs_traces
def test_cpu_op_argument_columns(v100):
    tl, raw = v100
    ops = [e for e in raw if e.get("cat") == "cpu_op"]
    seq = [e["args"].get("Sequence number", NO_ID) for e in ops]
    assert tl.cpu_ops.seq.tolist() == seq and any(s != NO_ID for s in seq)
    dims = [tl.arg_values[i] if i != NO_ID else None for i in tl.cpu_ops.input_dims]
    assert dims == [e["args"].get("Input Dims") for e in ops]
    types = [tl.arg_values[i] if i != NO_ID else None for i in tl.cpu_ops.input_types]
    assert types == [e["args"].get("Input type") for e in ops]
    assert len(tl.arg_values) < len(ops) / 5  # equal argument lists share one entry


@needs_traces
def test_every_gpu_activity_finds_its_launch(v100):
    tl, raw = v100
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in raw if e.get("cat") == "cuda_runtime"}
    li = tl.launch_index()
    assert (li != NO_ID).all()
    origin = tl.meta["ts_origin_us"]  # the raw events here are json's floats: 0.25 us at this clock's 1.7e15
    expected = [launch_ts[c] - origin for c in tl.activities.correlation]
    assert tl.launches.ts_us[li].tolist() == pytest.approx(expected, abs=0.25)
    assert metrics.unlaunched_kernels(tl) == 0


def _trace(tmp_path, events, name="t.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps({"traceEvents": events}))
    return p


def _x(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def test_step_rule_named_range_else_profiler_steps_of_either_category(tmp_path):
    events = [
        _x("cpu_op", "ProfilerStep#3", 200, 100),
        _x("user_annotation", "ProfilerStep#2", 100, 100),
        _x("cpu_op", "aten::mm", 110, 10),
    ]
    tl = kineto.read(_trace(tmp_path, events))
    # older profilers wrote ProfilerStep#N as a cpu_op: a step range either way, never an operator
    assert tl.step_windows().names == ["ProfilerStep#2", "ProfilerStep#3"]
    assert [tl.names[n] for n in tl.cpu_ops.name] == ["aten::mm"]
    w = tl.step_windows("step")
    assert w.names == ["ProfilerStep#2", "ProfilerStep#3"] and "no 'step' ranges" in w.note
    tl = kineto.read(
        _trace(tmp_path, events + [_x("user_annotation", "step", 120, 50), _x("user_annotation", "step", 20, 50)])
    )
    w = tl.step_windows("step")
    assert (w.names, w.ts_us.tolist(), w.note) == (["step", "step"], [20.0, 120.0], "")


def test_window_rule_launch_inside_same_process_any_thread(tmp_path):
    events = [
        _x("user_annotation", "## backward ##", 100, 100, tid=1),
        _x("cuda_runtime", "cudaLaunchKernel", 150, 5, tid=2, correlation=1),  # another thread: inside
        _x("cuda_runtime", "cudaLaunchKernel", 200.0005, 1, correlation=2),  # at the end, within EPS_US
        _x("cuda_runtime", "cudaLaunchKernel", 150, 5, pid=9, correlation=3),  # another process: outside
        _x("hip_runtime", "hipMemcpyAsync", 160, 5, correlation=4),  # a copy, launched inside
        _x("cuda_sync", "cudaDeviceSynchronize", 170, 5, correlation=5),  # not a launch
        _x("kernel", "volta_sgemm_64x64_nt", 300, 10, pid=0, device=0, stream=7, correlation=1),
        _x("kernel", "volta_sgemm_64x64_nt", 310, 20, pid=0, device=0, stream=7, correlation=2),
        _x("kernel", "volta_sgemm_64x64_nt", 330, 40, pid=0, device=0, stream=7, correlation=3),
        _x("gpu_memcpy", "Memcpy HtoD", 400, 80, pid=0, device=0, stream=7, correlation=4),
        _x("kernel", "volta_sgemm_64x64_nt", 500, 160, pid=0, device=0, stream=7, correlation=5),  # no launch
    ]
    tl = kineto.read(_trace(tmp_path, events))
    assert tl.launches.correlation.tolist() == [1, 2, 3, 4]
    w = tl.windows(np.array([0]))
    kern = metrics.in_windows(tl, w)
    assert (kern.count.tolist(), kern.time_us.tolist(), kern.gpu_span_us.tolist()) == ([2], [30.0], [30.0])
    every = metrics.in_windows(tl, w, categories=(KERNEL, MEMCPY, MEMSET))
    assert every.time_us.tolist() == [110.0]
    assert metrics.unlaunched_kernels(tl) == 1
    ann = metrics.annotation_times(tl)
    assert [(a["name"], a["calls"], a["kernel_count"], a["kernel_time_us"]) for a in ann] == [
        ("## backward ##", 1, 2, 30.0)
    ]


def test_a_reader_of_another_format_fills_the_same_timeline():
    """What an Nsight Systems or Nsight Compute reader does: fill a TimelineBuilder; every metric follows."""
    b = TimelineBuilder("report.nsys-rep.sqlite", "nsys")
    thread = b.thread(b.process(7), 7)
    b.add_range("ProfilerStep#0", 0.0, 100.0, 7, thread, CPU_RANGE)
    b.add_launch("cudaLaunchKernel", 10.0, 2.0, 7, thread, 1)
    b.add_launch("cudaLaunchKernel", 20.0, 2.0, 7, thread, 2)
    b.add_activity("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn", 30.0, 40.0, 0, 7, 1, NO_ID, KERNEL)
    b.add_activity("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", 50.0, 40.0, 0, 8, 2, NO_ID, KERNEL)
    b.cover(0.0, 100.0)
    tl = b.build()
    assert metrics.kernel_time(tl) == (2, 80.0)
    assert metrics.time_by_class(tl) == {"tc_gemm": (1, 40.0), "comm": (1, 40.0)}
    assert metrics.matrix_unit_time(tl)["yes"] == 40.0
    whole = gpu_time.breakdown(tl)
    assert (whole["exposed_comm_us"], whole["busy_us"], whole["gpu_span_us"]) == (20.0, 60.0, 60.0)
    _, steps, _ = gpu_time.step_breakdowns(tl)
    assert [
        (s["name"], s["wall_us"], s["kernel_count"], s["kernel_time_us"], s["gpu_span_us"], s["gpu_time_us"])
        for s in steps
    ] == [("ProfilerStep#0", 100.0, 2, 80.0, 60.0, 80.0)]
    assert [g.name[:22] for g in metrics.top_kernels(tl)] == ["ampere_fp16_s16816gemm", "ncclDevKernel_Generic("]


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)


def test_trace_and_compare_commands_do_not_import_torch(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"schema": "dawnscope.results/1", "results": []}))
    code = (
        "import sys\n"
        "from microbench.trace import cli as trace\nfrom microbench.compare import cli as compare\n"
        f"print(trace.main([{str(AMD)!r}, '--json', {str(tmp_path / 'out.json')!r}]))\n"
        f"print(trace.main([{str(empty)!r}]))\n"
        f"print(compare.main([{str(results)!r}, {str(results)!r}]))\n"
        "print('torch' in sys.modules)\n"
    )
    p = _run(code)
    out = p.stdout.strip().splitlines()
    assert out[-1] == "False", p.stdout + p.stderr
    assert out[-3] == "2" and "empty file" in p.stderr  # the empty file: one line, exit 2
    assert json.loads((tmp_path / "out.json").read_text())["summary"]["kernel_count"] == 6


def test_attribution_reads_the_same_timeline_and_rules():
    """The step attribution of decompose over the synthetic AMD trace: the ProfilerStep fallback, the window
    rule (the memcpy has no launch: in no step, and said so), kernels to the phase of their launch."""
    from microbench.decompose.attribution import attribute, load_trace

    a = attribute(load_trace(AMD), phase_ranges={"## forward ##": "forward"})
    assert a.unit == "kernel" and a.steps == 1
    assert a.total_per_step_us == [900.0] and a.unlaunched_us == 20.0 and a.outside_steps_us == 0.0
    assert any("no 'step' ranges" in n for n in a.notes) and any("20.0 us of GPU activity" in n for n in a.notes)
    # launched at 20, 30, 40 us inside `## forward ##` [10, 310]: 200 + 100 + 100; the rest outside any phase
    assert {k: b.time_us for k, b in a.buckets.items()} == {("(forward)", "forward"): 400.0, ("(step)", "step"): 500.0}
    assert a.buckets[("(forward)", "forward")].tensor_cores["yes"] == 300.0  # the two MFMA GEMMs


def test_pieces_cut_only_between_events(tmp_path, monkeypatch):
    """Nested objects whose `},` looks like the end of an event, header keys before and after the array, and
    an array that ends inside a chunk: the piecewise reading agrees with the whole-file one, cut anywhere."""
    events = [
        _x(
            "kernel",
            f"k{i}",
            10.0 * i,
            5.0,
            pid=0,
            device=0,
            stream=7,
            correlation=i,
            nested={"a": {"b": [1, {"c": "},{"}]}, "d": i},
        )
        for i in range(40)
    ]
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}, {"id": 1}],
        "traceEvents": events,
        "distributedInfo": {"rank": 3, "world_size": 8},
        "traceName": "x",
    }
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc, indent=1))
    whole = kineto._read_whole(p)
    for chunk in (5, 64, 333, 1 << 20):
        monkeypatch.setattr(kineto, "CHUNK_BYTES", chunk)
        tl = kineto._read_pieces(p)
        assert [tl.names[n] for n in tl.activities.name] == [f"k{i}" for i in range(40)]
        assert tl.activities.ts_us.tolist() == whole.activities.ts_us.tolist()
        assert (tl.distributed, tl.meta["traceName"], sorted(tl.device_properties)) == (
            {"rank": 3, "world_size": 8},
            "x",
            [0, 1],
        )
