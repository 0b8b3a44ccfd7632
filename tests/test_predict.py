"""Cross-chip prediction (microbench.predict, python -m microbench.predict): the model's rules on generated
kernels, the shared bert-small pair in both directions, the what-ifs, TraceLens' arch JSON, and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from microbench.core.archjson import read_arch, to_arch
from microbench.core.config import load_config
from microbench.core.datasheet import find_entry
from microbench.predict.chips import chip
from microbench.predict.cli import main
from microbench.predict.estimate import Scenario, Variant, datasheet_roof_us, predict_activities, wave_factor
from microbench.predict.kernels import ActivityWork

from .conftest import TRACES, needs_traces

CFG = load_config()


def _chip(name, **kw):
    return chip(find_entry(name, CFG.devices), **kw)


def _work(groups, dur, flops=None, nbytes=None, precision=None, tiles=None, names=None) -> ActivityWork:
    n = len(groups)
    return ActivityWork(
        names or [f"k{i}" for i in range(n)],
        np.array(dur, dtype=float),
        np.array(groups, dtype=object),
        np.array(groups, dtype=object),
        np.array(flops or [0.0] * n, dtype=float),
        np.array(nbytes or [np.nan] * n, dtype=float),
        np.array(precision or [None] * n, dtype=object),
        np.array(tiles or [0] * n, dtype=np.int64),
        np.array([None] * n, dtype=object),
        np.array([None] * n, dtype=object),
        1,
        [],
    )


def test_devices_are_found_by_key_name_or_short_name():
    assert find_entry("h100_sxm5", CFG.devices).key == "h100_sxm5"
    assert find_entry("NVIDIA H100 80GB HBM3", CFG.devices).key == "h100_sxm5"
    assert find_entry("V100", CFG.devices).key == "v100_sxm2"
    assert find_entry("AMD Instinct MI300X VF", CFG.devices).key == "mi300x_vf"
    h100 = _chip("H100")
    assert h100.rate("bf16") == 794.5 and "published" in h100.sources["bf16"]  # MAMF, not the 989 datasheet
    assert h100.rate("bf16", datasheet=True) == 989.0
    assert h100.rate("fp32") == pytest.approx(67.0 * 0.8) and "default" in h100.sources["fp32"]


def test_memory_bound_kernel_scales_with_bandwidth_above_the_floor():
    src, tgt = _chip("H100", floor_us=2.0, floor_source="t"), _chip("MI300X", floor_us=3.0, floor_source="t")
    t, why = predict_activities(_work(["elementwise"], [12.0]), src, tgt)
    assert why[0] == ""
    assert t[0] == pytest.approx(3.0 + 10.0 * src.memory_tbs / tgt.memory_tbs)
    held, _ = predict_activities(_work(["elementwise"], [12.0]), src, tgt, v=Variant(hold_floor=True))
    assert held[0] == pytest.approx(2.0 + 10.0 * src.memory_tbs / tgt.memory_tbs)


def test_memory_bound_kernel_with_known_bytes_moves_its_roofline_part_and_its_slack_by_regime():
    src, tgt = _chip("H100", floor_us=2.0, floor_source="t"), _chip("MI300X", floor_us=3.0, floor_source="t")
    big, small = 20e6, 1e6  # bytes alone: ~7 us on the H100 (streams: >= its 2 us floor), ~0.35 us (latency-bound)
    roof = {n: (n / (src.memory_tbs * 1e6), n / (tgt.memory_tbs * 1e6)) for n in (big, small)}
    w = _work(
        ["elementwise", "elementwise", "normalization"],
        [2.0 + roof[big][0] + 5.0, 2.0 + roof[small][0] + 5.0, 2.5],
        nbytes=[big, small, 0.0],
    )
    t, why = predict_activities(w, src, tgt)
    assert list(why) == ["", "", ""]
    ratio = roof[big][1] / roof[big][0]
    assert t[0] == pytest.approx(3.0 + (roof[big][0] + 5.0) * ratio)  # streams: its efficiency carries over
    assert t[1] == pytest.approx(3.0 + roof[small][1] + 5.0)  # latency-bound: 5 us of slack held
    assert t[2] == pytest.approx(3.0 + 0.5)  # no bytes to move: all of its time above the floor is slack
    flipped, _ = predict_activities(w, src, tgt, v=Variant(scale_slack=True))  # the range's alternative
    assert flipped[0] == pytest.approx(3.0 + roof[big][1] + 5.0)
    assert flipped[1] == pytest.approx(3.0 + (roof[small][0] + 5.0) * ratio)
    assert np.isnan(datasheet_roof_us(w, tgt)).all()  # DRAM bytes do not bound a kernel whose operands sit in L2


@needs_traces
def test_memory_bound_kernels_of_a_trace_get_their_operators_bytes():
    from microbench.predict.kernels import activity_work
    from microbench.trace.analysis import read_trace

    w = activity_work(read_trace(TRACES / "h100_bert_small.json.gz"), {}, 128, 128)
    gelu = [i for i, n in enumerate(w.names) if "Gelu" in n]
    # aten::gelu of [1, 141, 2048] bf16 in the 4 layers and of [1, 141, 512] in the head: read once, written once
    assert w.bytes[gelu].tolist() == [2 * 141 * 2048 * 2] * 4 + [2 * 141 * 512 * 2]
    norms = w.group == "normalization"
    assert norms.sum() == 10 and np.isfinite(w.bytes[norms]).all()
    host = [i for i, n in enumerate(w.names) if "DtoH" in n]
    assert np.isnan(w.bytes[host]).all()  # a host copy: no operator's bytes


@needs_traces
def test_inferred_bytes_never_beat_the_dram_bandwidth_beyond_l2():
    """The bytes inferred for the A100 trace's memory kernels, judged by physics: a kernel whose operands do not
    fit in the A100's 40 MB L2 cannot move them faster than its DRAM (2.04 TB/s; 10 % for the attribution of one
    operator's bytes over its kernels by time). Smaller ones can, from L2: a sqrt over 16.8 MB runs at 2.2 TB/s.
    Tensor lists, fills and scatters once gave 1.6 GB for a 156 us concatenation."""
    from microbench.predict.kernels import MEMORY_BOUND, activity_work
    from microbench.trace.analysis import read_trace

    w = activity_work(read_trace(TRACES / "a100_torchrec_rank0.json.gz"), {}, 128, 128)
    known = np.isin(w.group, MEMORY_BOUND) & np.isfinite(w.bytes)
    assert known.sum() > 400  # most of its 822 memory kernels have their operator's bytes
    beyond_l2 = known & (w.bytes > 40e6)
    assert beyond_l2.sum() > 10
    tbs = w.bytes[beyond_l2] / (w.dur_us[beyond_l2] * 1e6)
    assert tbs.max() <= 2.039 * 1.1, [w.names[i][:60] for i in np.flatnonzero(beyond_l2)[tbs > 2.039 * 1.1]]


def test_matrix_kernel_roofline_part_scales_and_its_slack_is_held():
    src, tgt = _chip("A100", floor_us=2.0, floor_source="t"), _chip("H100", floor_us=2.0, floor_source="t")
    flops = 1e12  # a compute-bound GEMM: 1 TFLOP at 271.2 TFLOP/s = 3,687 us on the A100's achievable rate
    roof_a100 = flops / 271.2e6
    w = _work(["gemm_conv"], [2.0 + roof_a100 + 100.0], flops=[flops], nbytes=[1e6], precision=["bf16"])
    t, _ = predict_activities(w, src, tgt)
    assert t[0] == pytest.approx(2.0 + flops / 794.5e6 + 100.0)
    scaled, _ = predict_activities(w, src, tgt, v=Variant(scale_slack=True))
    assert scaled[0] == pytest.approx(2.0 + (roof_a100 + 100.0) * 271.2 / 794.5)


def test_wave_quantization_from_one_full_wave():
    assert wave_factor(np.array([8, 132, 133, 264]), 132).tolist() == pytest.approx([1.0, 1.0, 264 / 133, 1.0])
    assert wave_factor(np.array([133]), None).tolist() == [1.0]


def test_unplaced_kernels_keep_their_time_and_say_why():
    src, tgt = _chip("H100"), _chip("MI300X")
    w = _work(
        ["other", "gemm_conv", "communication", "copies"],
        [7.0, 9.0, 11.0, 5.0],
        names=["mystery", "sgemm", "ncclDevKernel_AllReduce", "Memcpy HtoD (Pageable -> Device)"],
    )
    t, why = predict_activities(w, src, tgt)
    assert t.tolist() == [7.0, 9.0, 11.0, 5.0]
    assert "no kernel rule" in why[0] and "without FLOPs" in why[1] and "--fabric" in why[2] and "host" in why[3]


def test_what_if_bf16_moves_fp32_matrix_work_to_tensor_cores():
    src = tgt = _chip("A100", floor_us=2.0, floor_source="t")
    flops = 1e12
    w = _work(
        ["gemm_conv", "elementwise"],
        [2.0 + flops / (19.5 * 0.8e6), 12.0],
        flops=[flops, 0.0],
        nbytes=[1e6, np.nan],
        precision=["fp32", None],
    )
    same, _ = predict_activities(w, src, tgt)
    assert same.tolist() == pytest.approx(w.dur_us.tolist())
    t, _ = predict_activities(w, src, tgt, Scenario(dtype="bf16"))
    assert t[0] == pytest.approx(2.0 + flops / 271.2e6)
    assert t[1] == pytest.approx(2.0 + 10.0 * 0.5)  # activations in 2 bytes
    double, _ = predict_activities(w, src, tgt, Scenario(batch_scale=2.0))
    assert double[1] == pytest.approx(2.0 + 20.0)


def test_arch_json_round_trip():
    ceilings = [
        {"kind": "compute", "dtype": "bf16", "value": 700.0, "source": "measured"},
        {"kind": "compute", "dtype": "fp32", "value": 50.0, "source": "measured"},
        {"kind": "compute", "dtype": "bf16", "value": 989.0, "source": "datasheet"},
        {"kind": "memory", "dtype": None, "value": 3000.0, "source": "measured"},
    ]
    doc = to_arch("NVIDIA H100", ceilings, 80.0)
    assert doc["max_achievable_tflops"] == {"matrix_bf16": 700.0, "vector_fp32": 50.0}
    assert doc["mem_bw_gbps"] == 3000.0 and doc["name"] == "NVIDIA H100"
    compute, mem = read_arch(doc)
    assert compute == {"bf16": 700.0, "fp32": 50.0} and mem == pytest.approx(3.0)
    tracelens = {
        "name": "MI300X",
        "mem_bw_gbps": 5300,
        "memory_gb": 192,
        "max_achievable_tflops": {
            "matrix_fp16": 654,
            "matrix_bf16": 708,
            "matrix_fp32": 163,
            "matrix_fp64": 81,
            "matrix_fp8": 1273,
            "matrix_int8": 2600,
            "vector_fp16": 163,
            "vector_bf16": 163,
            "vector_fp32": 81,
            "vector_fp64": 40,
        },
    }
    compute, mem = read_arch(tracelens)
    assert compute["bf16"] == 708 and compute["tf32"] == 163 and compute["fp32"] == 81 and mem == 5.3


@needs_traces
@pytest.mark.parametrize("src,on,actual", [("h100", "MI300X VF", "mi300"), ("mi300", "H100", "h100")])
def test_bert_pair_both_directions(tmp_path, src, on, actual, capsys):
    out = tmp_path / "p.json"
    assert (
        main(
            [
                str(TRACES / f"{src}_bert_small.json.gz"),
                "--on",
                on,
                "--json",
                str(out),
                "--html",
                str(tmp_path / "p.html"),
            ]
        )
        == 0
    )
    doc = json.loads(out.read_text())
    for k in ("device", "busy_us"):
        assert doc["source"][k] and doc["target"][k]
    t = doc["target"]
    assert t["busy_us_low"] <= t["busy_us"] <= t["busy_us_high"]
    assert doc["range"]["dominant"] in {a["name"] for a in doc["range"]["assumptions"]}
    labels = {c["label"] for c in doc["classes"]}
    assert {"GEMM / conv", "attention", "element-wise", "normalization"} <= labels
    if src == "h100":  # its device-to-host copy is not placed: listed with its time, kept, not dropped
        assert doc["unplaced"][0]["why"].startswith("host copy") and doc["unplaced"][0]["time_us"] > 0
    assert sum(c["target_us"] for c in doc["classes"] if c["class"] != "idle") == pytest.approx(t["kernel_time_us"])
    ops = {o["op"]: o for o in doc["ops"]}  # per operator and shape: what the two vendors' traces share
    assert ops["aten::linear M=141 N=512 K=512 bf16"]["kernels"] == 17
    assert "by class" in capsys.readouterr().out


@needs_traces
def test_same_chip_predicts_the_source():
    from microbench.predict.from_trace import from_trace

    doc = from_trace(TRACES / "h100_bert_small.json.gz", "h100_sxm5", CFG)
    assert doc["target"]["busy_us"] == pytest.approx(doc["source"]["busy_us"])


def _tiny_trace(tmp_path, shapes: bool):
    args = {"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]} if shapes else {}
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 50, "args": args},
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 10,
            "dur": 5,
            "args": {"correlation": 7},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "volta_sgemm_128x64_nn",
            "pid": 0,
            "tid": 7,
            "ts": 20,
            "dur": 30,
            "args": {"correlation": 7, "device": 0, "stream": 7},
        },
    ]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"deviceProperties": [{"id": 0, "name": "Tesla V100-SXM2-32GB"}], "traceEvents": events}))
    return p


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    with_shapes = _tiny_trace(tmp_path, shapes=True)
    assert main([str(with_shapes), "--on", "XYZ"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown device" in err and "--on" in err
    no_shapes = _tiny_trace(tmp_path, shapes=False)
    assert main([str(no_shapes), "--on", "H100"]) == 2
    assert "record_shapes" in capsys.readouterr().err
    bad = tmp_path / "c.json"
    bad.write_text(json.dumps({"hello": 1}))
    assert main([str(with_shapes), "--on", "H100", "--ceilings", str(bad)]) == 2
    assert "TraceLens" in capsys.readouterr().err
    bad.write_text(json.dumps({"max_achievable_tflops": {"matrix_bf16": "fast"}}))
    assert main([str(with_shapes), "--on", "H100", "--ceilings", str(bad)]) == 2
    assert "matrix_bf16" in capsys.readouterr().err
    assert main([str(with_shapes), "--on", "H100", "--batch", "64"]) == 2
    assert "--source-batch" in capsys.readouterr().err


def test_a_users_ceilings_override_the_published_figures(tmp_path, capsys):
    trace = _tiny_trace(tmp_path, shapes=True)
    arch = tmp_path / "arch.json"
    arch.write_text(
        json.dumps({"name": "NVIDIA H100 80GB HBM3", "mem_bw_gbps": 2000, "max_achievable_tflops": {"vector_fp32": 30}})
    )
    out = tmp_path / "p.json"
    assert main([str(trace), "--on", "H100", "--ceilings", str(arch), "--json", str(out)]) == 0
    tgt = json.loads(out.read_text())["target"]["chip"]
    assert tgt["tflops"]["fp32"] == 30 and tgt["memory_tbs"] == 2.0 and "measured" in tgt["sources"]["fp32"]


def test_roofline_arch_json_is_read_by_trace_and_predict(tmp_path):
    from microbench.core.datasheet import ceilings_file, ceilings_from_args
    from microbench.roofline.cli import _write_arch

    doc = {
        "hardware": {"name": "NVIDIA H200", "memory_gib": 139.8},
        "ceilings": [
            {"kind": "compute", "dtype": "bf16", "value": 780.0, "source": "measured"},
            {"kind": "memory", "dtype": None, "value": 4300.0, "source": "measured"},
        ],
    }
    path = tmp_path / "H200.json"
    assert _write_arch(doc, path) == f"wrote {path}"
    arch = json.loads(path.read_text())
    assert arch["name"] == "NVIDIA H200" and arch["memory_gb"] == 139.8
    assert arch["max_achievable_tflops"] == {"matrix_bf16": 780.0} and arch["mem_bw_gbps"] == 4300.0
    assert ceilings_file(path) == ({"bf16": 780.0}, 4.3)
    assert ceilings_from_args([], path) == {"bf16": 780.0}  # what `trace --ceilings` uses


@pytest.mark.slow
def test_model_step_predicted_from_recorded_operators(tmp_path):
    """A model's step recorded on fake tensors (no arithmetic) and timed at the target's roofline + floor; the
    tensor-core what-if (fp16 instead of fp32) is faster on a V100, never slower."""
    out = tmp_path / "m.json"
    assert (
        main(
            ["--model", "tests.ext_model:make", "--batch", "64", "--dtype", "fp32", "--on", "V100", "--json", str(out)]
        )
        == 0
    )
    fp32 = json.loads(out.read_text())
    assert fp32["model"]["batch"] == 64 and fp32["model"]["flops"] > 0
    v100 = _chip("V100")
    assert fp32["target"]["busy_us"] >= fp32["model"]["operators"] * v100.floor_us  # every kernel pays its floor
    assert fp32["target"]["busy_us_low"] <= fp32["target"]["busy_us"] <= fp32["target"]["busy_us_high"]
    assert {c["label"] for c in fp32["classes"]} >= {"GEMM / conv", "element-wise"}
    assert (
        main(
            ["--model", "tests.ext_model:make", "--batch", "64", "--dtype", "fp16", "--on", "V100", "--json", str(out)]
        )
        == 0
    )
    fp16 = json.loads(out.read_text())
    gemm = {
        d["model"]["dtype"]: next(c["target_us"] for c in d["classes"] if c["class"] == "gemm_conv")
        for d in (fp32, fp16)
    }
    assert gemm["fp16"] < gemm["fp32"]


def test_communication_moves_through_the_fabric_presets():
    from microbench.predict.from_trace import fabrics

    f = fabrics("nvlink4", "v100_nvlink")  # 450 GB/s, 5 us against 150 GB/s, 10 us (data/fabrics.toml)
    assert (f.source_gbps, f.source_latency_us, f.target_gbps, f.target_latency_us) == (150.0, 10.0, 450.0, 5.0)
    assert fabrics(None, None) is None
    src, tgt = _chip("V100"), _chip("H100")
    t, why = predict_activities(_work(["communication"], [310.0]), src, tgt, fabrics=f)
    assert why[0] == "" and t[0] == pytest.approx(5.0 + 300.0 / 3)


def test_one_fabric_alone_is_bad_input(tmp_path, capsys):
    trace = _tiny_trace(tmp_path, shapes=True)
    assert main([str(trace), "--on", "H100", "--fabric", "nvlink4"]) == 2
    assert "--source-fabric" in capsys.readouterr().err


@needs_traces
def test_per_step_prediction_over_each_steps_own_activities():
    from microbench.predict.from_trace import from_trace

    doc = from_trace(TRACES / "a100_torchrec_rank0.json.gz", "h100", CFG, source="A100")
    steps = doc["steps"]
    assert [s["name"] for s in steps] == ["ProfilerStep#551", "ProfilerStep#552"]
    # every activity in exactly one step: the steps' busy times add up to the whole trace's
    assert sum(s["source_busy_us"] for s in steps) == pytest.approx(doc["source"]["busy_us"], rel=0.01)
    assert doc["source"]["busy_us_per_step"] == pytest.approx(sum(s["source_busy_us"] for s in steps) / 2)
    assert all(s["target_busy_us"] > 0 for s in steps)


def test_roofline_refuses_an_unusable_arch_json_path_before_any_work(tmp_path, capsys):
    from microbench.roofline.cli import main as roofline_main

    assert roofline_main(["--arch-json", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "--arch-json" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@needs_traces
def test_trace_reads_tracelens_arch_json(tmp_path):
    from microbench.trace.cli import main as trace_main

    arch = tmp_path / "H100.json"
    arch.write_text(json.dumps({"name": "H100", "mem_bw_gbps": 3000, "max_achievable_tflops": {"matrix_bf16": 700}}))
    out = tmp_path / "t.json"
    assert trace_main([str(TRACES / "h100_bert_small.json.gz"), "--ceilings", str(arch), "--json", str(out)]) == 0
    ops = json.loads(out.read_text())["ops"]
    assert any(o.get("pct_of_measured") is not None for o in ops)  # judged against the file's 700 TFLOP/s


def test_a_kernel_belongs_to_the_innermost_operator_around_its_launch(tmp_path):
    from microbench.trace import opmetrics
    from microbench.trace.analysis import read_trace
    from microbench.trace.timeline import NO_ID

    events, launched = [], []

    def op(name, ts, dur, tid=1):
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": name,
                "pid": 1,
                "tid": tid,
                "ts": ts,
                "dur": dur,
                "args": {"Input Dims": [[4, 8]], "Input type": ["float"]},
            }
        )

    def launch(ts, owner, tid=1):
        c = len(launched) + 1
        launched.append(owner)
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": tid,
                "ts": ts,
                "dur": 1,
                "args": {"correlation": c},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"elementwise_kernel_{c}",
                "pid": 0,
                "tid": 7,
                "ts": 1000 + 10 * c,
                "dur": 2,
                "args": {"correlation": c, "device": 0, "stream": 7},
            }
        )

    op("P", 0, 100), op("C1", 10, 10), op("C2", 30, 10)
    launch(15, "C1")  # inside a child
    launch(50, "P")  # after both children ended: their parent
    op("Q", 0, 100, tid=2)
    launch(60, "Q", tid=2)  # the other thread's operator, though P also spans that time
    op("R", 200, 100)
    for j in range(20):  # many earlier siblings, each with a child
        op(f"G{j}", 201 + 4 * j, 3), op(f"H{j}", 202 + 4 * j, 1)
    launch(290, "R")
    op("S", 400, 10), op("S2", 400, 5)  # same start: the shorter one is inside
    launch(402, "S2")
    launch(500, None)  # no operator around it
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}]}))
    tl = read_trace(path)
    rows = np.flatnonzero(tl.cpu_ops.input_dims != NO_ID)
    kernels = np.argsort([int(tl.names[n].rsplit("_", 1)[1]) for n in tl.activities.name])
    owner = opmetrics._innermost_owner(tl, rows, kernels)
    assert [tl.names[tl.cpu_ops.name[o]] if o >= 0 else None for o in owner] == launched
