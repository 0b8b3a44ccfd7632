"""Kernels launched from CUDA / HIP graphs (microbench/trace/graphs.py): counted one by one, and attributed to
the operators that captured them given the capture trace; on the real vLLM MI300 pair and a generated CUDA graph."""

from __future__ import annotations

import gzip
import json

import pytest

from .conftest import analyze

GEMM = "ampere_sgemm_128x64_nn"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _raw(path):
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


def _write(path, events, **meta):
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events, **meta}))
    return path


def _x(cat, name, ts, dur, **args):
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 1 if cat != "kernel" else 0,
        "tid": 1 if cat != "kernel" else 7,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def _cuda_graph_pair(tmp_path, replay_names=(GEMM, ADD, NCCL)):
    """A replay: one cudaGraphLaunch, its kernels with its correlation id, plus one eager kernel; and a capture:
    BeginCapture, three launches (args.kernel) inside aten::mm, aten::add, c10d::allreduce_, EndCapture."""
    replay = [
        _x("cuda_runtime", "cudaGraphLaunch", 100.0, 5.0, correlation=50),
        _x("cuda_runtime", "cudaLaunchKernel", 300.0, 2.0, correlation=51),
        _x("kernel", "void eager_kernel()", 310.0, 4.0, correlation=51, device=0, stream=7),
    ]
    for i, name in enumerate(replay_names):
        replay.append(_x("kernel", name, 110.0 + 20 * i, 10.0 + i, correlation=50, device=0, stream=7))
    capture = [_x("cuda_runtime", "cudaStreamBeginCapture", 1.0, 1.0, correlation=1)]
    for i, (op, name) in enumerate((("aten::mm", GEMM), ("aten::add", ADD), ("c10d::allreduce_", NCCL))):
        ts = 10.0 + 20 * i
        capture.append(_x("cpu_op", op, ts, 10.0, **{"Input Dims": [[4, 4]], "Input type": ["float"]}))
        capture.append(_x("cuda_runtime", "cudaLaunchKernel", ts + 2, 2.0, correlation=2 + i, kernel=name))
    capture.append(_x("cuda_runtime", "cudaStreamEndCapture", 90.0, 1.0, correlation=9))
    return _write(tmp_path / "replay.json", replay), _write(tmp_path / "capture.json", capture)


def test_generated_cuda_graph_counted_and_attributed(tmp_path):
    replay, capture = _cuda_graph_pair(tmp_path)
    doc = analyze(replay, graph_capture=capture)
    s = doc["summary"]
    assert s["kernel_count"] == 4 and s["graph_kernel_count"] == 3 and s["graph_launches"] == 1
    assert s["graph_kernel_time_us"] == pytest.approx(10 + 11 + 12)
    assert s["graph_attributed_share"] == pytest.approx(1.0)
    assert s["count_by_class"]["comm"] == 1 and s["comm_time_us"] == pytest.approx(12)  # not lumped into the launch
    ops = {o["op"]: o for o in doc["graphs"]["ops"]}
    assert set(ops) == {"aten::mm", "aten::add", "c10d::allreduce_"}
    assert ops["aten::mm"]["kernel_time_us"] == pytest.approx(10) and ops["aten::mm"]["input_dims"] == [[4, 4]]
    assert list(ops["c10d::allreduce_"]["classes"]) == ["comm"]


def test_a_kernel_that_does_not_line_up_stays_unattributed(tmp_path):
    replay, capture = _cuda_graph_pair(tmp_path, replay_names=(GEMM, "void other_kernel()", NCCL))
    s = analyze(replay, graph_capture=capture)["summary"]
    assert s["graph_attributed_share"] == pytest.approx((10 + 12) / (10 + 11 + 12))


def test_without_capture_counted_and_noted(tmp_path):
    replay, _ = _cuda_graph_pair(tmp_path)
    doc = analyze(replay)
    assert doc["summary"]["graph_kernel_count"] == 3 and doc["summary"]["graph_attributed_share"] is None
    assert doc["graphs"] is None and any("--graph-capture" in n for n in doc["notes"])


def test_real_vllm_mi300_pair(shared_dir):
    ex = shared_dir / "traces" / "mi300_vllm_decode_graph_execution.json.gz"
    cap = shared_dir / "traces" / "mi300_vllm_decode_graph_capture.json.gz"
    events = _raw(ex)
    graph_corr = {e["args"]["correlation"] for e in events if e.get("name") == "hipGraphLaunch"}
    replayed = sorted(
        (e for e in events if e.get("cat") == "kernel" and e["args"].get("correlation") in graph_corr),
        key=lambda e: e["ts"],
    )
    doc = analyze(ex, graph_capture=cap)
    s = doc["summary"]
    assert s["graph_kernel_count"] == len(replayed) == 421
    assert s["graph_kernel_time_us"] == pytest.approx(sum(e["dur"] for e in replayed))
    assert s["graph_kernel_time_us"] / s["kernel_time_us"] > 0.9  # the replay is nearly all the GPU time
    # independently: the capture's launches between Begin/EndCapture name the replayed kernels one for one
    cev = sorted((e for e in _raw(cap) if e.get("cat") == "cuda_runtime"), key=lambda e: e["ts"])
    begin = next(i for i, e in enumerate(cev) if e["name"] == "hipStreamBeginCapture")
    end = next(i for i, e in enumerate(cev) if e["name"] == "hipStreamEndCapture")
    captured = [e["args"]["kernel"] for e in cev[begin:end] if "kernel" in e.get("args", {})]
    assert captured == [e["name"] for e in replayed]
    assert s["graph_attributed_share"] == pytest.approx(1.0)
    ops = doc["graphs"]["ops"]
    assert sum(o["kernels"] for o in ops) == 421 and ops[0]["op"] == "vllm::moe_forward"
    # a modelled operator's FLOPs, once per captured call replayed: 24 layers' addmm(bias, x, W) of 32x2880x5120
    mm = next(o for o in ops if o["op"] == "aten::addmm" and o["input_dims"][1:3] == [[32, 2880], [2880, 5120]])
    assert mm["calls"] == 24 and mm["flops"] == 24 * 2 * 32 * 2880 * 5120
    assert mm["achieved_tflops"] == pytest.approx(mm["flops"] / (mm["kernel_time_us"] * 1e6))
    # its deviceProperties entries have empty names: the properties (9.4 = gfx94x, 304 CUs, 192 GB) are an MI300X's
    # and no other entry's (the MI325X has 256 GB, the MI300A 228 CUs), and the note says it was found by them
    (dev,) = doc["devices"]
    assert dev["name"] is None and dev["datasheet"]["entry"] == "mi300x"
    assert "by properties alone (cc 9.4, 304 SMs, 192.0 GiB" in dev["datasheet"]["note"]


def test_bad_capture_path_one_line(tmp_path, capsys):
    from microbench.trace import cli as trace

    replay, _ = _cuda_graph_pair(tmp_path)
    assert trace.main([str(replay), "--graph-capture", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "missing.json" in err and "\n" not in err, err
