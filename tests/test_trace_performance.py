"""`python -m microbench.trace` on every format (Kineto JSON, Nsight Systems SQLite, Nsight Compute CSV, CUPTI
range-profiler Kineto), with expected values computed here from the files themselves: GPU time per step, the
per-op model and MFU, counters as evidence, eligibility, unknown kernels, and one workload on two vendors."""

from __future__ import annotations

import gzip
import json
import sqlite3

import pytest

from microbench.compare import cli as compare_cli
from microbench.trace import cli as trace_cli
from microbench.trace.analysis import detect_format

from .conftest import SHARED, TRACES, analyze, needs_traces

NSIGHT = SHARED / "nsight"
needs_nsight = pytest.mark.skipif(
    not (NSIGHT / "SOURCES.md").is_file(), reason="tests/data/nsight is not in this checkout"
)


def _events(name: str) -> list[dict]:
    with gzip.open(TRACES / name, "rt") as f:
        return json.load(f)["traceEvents"]


def _union_length(intervals) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e > end:
            total += e - max(s, end)
            end = e
    return total


@needs_traces
@needs_nsight
def test_formats_are_told_apart_by_content(tmp_path):
    assert detect_format(NSIGHT / "power_iteration.nsys.sqlite") == "nsys"
    assert detect_format(NSIGHT / "copy_blocked.ncu.csv") == "ncu"
    assert detect_format(TRACES / "h100_bert_small.json.gz") == "kineto"
    renamed = tmp_path / "report.json"  # the name says JSON, the bytes say SQLite
    renamed.write_bytes((NSIGHT / "power_iteration.nsys.sqlite").read_bytes())
    assert detect_format(renamed) == "nsys"


@needs_traces
@pytest.mark.parametrize(
    "name,tracelens", [("h100_bert_small.json.gz", (307, 3598, 3908)), ("mi300_bert_small.json.gz", (388, 3105, 3496))]
)
def test_gpu_time_per_step_matches_the_definitions_and_tracelens(cfg, name, tracelens):
    ev = _events(name)
    gpu = [
        (e["ts"], e["ts"] + e["dur"], e["cat"]) for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    kernels = [(s, e) for s, e, c in gpu if c == "kernel"]
    span = max(e for _, e, _ in gpu) - min(s for s, _, _ in gpu)
    busy = _union_length([(s, e) for s, e, _ in gpu])
    doc = analyze(TRACES / name, cfg)
    (st,) = doc["steps"]
    assert st["gpu_span_us"] == pytest.approx(span)
    assert st["computation_us"] == pytest.approx(_union_length(kernels))
    assert st["busy_us"] == pytest.approx(busy)
    assert st["exposed_memcpy_us"] == pytest.approx(busy - _union_length(kernels))
    assert st["idle_us"] == pytest.approx(span - busy) and st["exposed_comm_us"] == 0
    assert doc["summary"]["gpu_time"] == pytest.approx({k: st[k] for k in doc["summary"]["gpu_time"]})
    # TraceLens' gpu_timeline for the same files (SOURCES.md), in ms to three digits
    assert [round(st[k] / 1000, 3) for k in ("computation_us", "idle_us", "gpu_span_us")] == [
        x / 1000 for x in tracelens
    ]


def _bert_model_flops(ev) -> int:
    total = 0
    for e in ev:
        if e.get("cat") != "cpu_op":
            continue
        dims = e["args"].get("Input Dims")
        if e["name"] == "aten::linear":  # the outermost GEMM op; aten::addmm inside it is not counted again
            (_, m, k), (n, _) = dims[0], dims[1]
            total += 2 * m * n * k
        elif e["name"] == "aten::scaled_dot_product_attention":
            b, h, lq, d = dims[0]
            total += 2 * b * h * lq * dims[1][2] * (d + dims[2][3])
    return total


@needs_traces
def test_mfu_window_counts_no_time_twice(cfg):
    """ProfilerStep#8 of the plugin's sample starts on the CPU before #7's last kernel ends: its window starts at
    that end, and the steps' summed time is their span, first start to last end, not more."""
    ev = _events("v100_resnet50_tbplugin_2021schema.json.gz")
    steps = sorted(
        (e for e in ev if e.get("name", "").startswith("ProfilerStep#") and e.get("ph") == "X"), key=lambda e: e["ts"]
    )
    doc = analyze(TRACES / "v100_resnet50_tbplugin_2021schema.json.gz", cfg)
    spans = [st["breakdown_span_us"] for st in doc["steps"]]
    assert [s["wall_us"] for s in doc["mfu"]["steps"]] == spans
    assert doc["mfu"]["window_us"] == pytest.approx(sum(spans))
    assert sum(spans) < sum(max(e["dur"], s) for e, s in zip(steps, spans))  # the old window, which overlapped
    kernels_end = max(e["ts"] + e["dur"] for e in ev if e.get("cat") in ("Kernel", "kernel"))
    assert sum(spans) <= max(kernels_end, steps[-1]["ts"] + steps[-1]["dur"]) - steps[0]["ts"]


@needs_traces
def test_mfu_ops_and_kernel_tflops_on_bert_h100(cfg):
    ev = _events("h100_bert_small.json.gz")
    flops = _bert_model_flops(ev)
    (step,) = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    doc = analyze(TRACES / "h100_bert_small.json.gz", cfg, measured={"bf16": 794.5})
    m = doc["mfu"]
    assert m["model_flops"] == flops == doc["steps"][0]["model_flops"]
    assert m["window_us"] == pytest.approx(step["dur"])
    assert m["mfu"] == pytest.approx(flops / (989e12 * step["dur"] * 1e-6))  # H100 SXM bf16 datasheet peak
    assert m["of_measured"] == pytest.approx(flops / (794.5e12 * step["dur"] * 1e-6))
    assert doc["summary"]["mfu"] == m["mfu"]
    vocab = next(o for o in doc["ops"] if o["shape"] == "M=141 N=30522 K=512")
    (kernel,) = [e for e in ev if e.get("cat") == "kernel" and "256x128_64x3_tn_align2" in e["name"]]
    assert vocab["flops"] == 2 * 141 * 30522 * 512 and vocab["kernel_time_us"] == pytest.approx(kernel["dur"])
    assert vocab["op_tflops"] == pytest.approx(vocab["flops"] / kernel["dur"] / 1e6)
    assert vocab["kernel_tflops"] == vocab["op_tflops"]  # one kernel, the GEMM: op time is math time
    assert vocab["pct_of_datasheet"] == pytest.approx(100 * vocab["op_tflops"] / 989)
    assert vocab["pct_of_measured"] == pytest.approx(100 * vocab["op_tflops"] / 794.5)
    row = next(k for k in doc["kernels"] if "256x128_64x3_tn_align2" in k["shape"])
    assert row["params"]["achieved_tflops"] == pytest.approx(vocab["kernel_tflops"])
    # layer norm launches no GEMM: no FLOPs are pinned on it
    assert "model_flops" not in next(k for k in doc["kernels"] if k["op"] == "norm")["params"]
    assert doc["eligibility"]["findings"] == []  # every GEMM here ran on Tensor Cores


@needs_traces
def test_rocm_device_ids_and_the_mi300_datasheet(cfg):
    doc = analyze(TRACES / "mi300_bert_small.json.gz", cfg)
    (d,) = doc["devices"]
    assert (d["id"], d["properties_of"], d["name"]) == (2, 0, "AMD Instinct MI300X VF")
    assert d["datasheet"]["entry"] == "mi300x_vf" and doc["mfu"]["mfu"] is not None
    attn = next(k for k in doc["kernels"] if k["shape"] == "attn_fwd")
    assert (attn["op"], attn["tensor_cores"]) == ("tc_gemm", "yes")  # was "other, unknown"


@needs_nsight
def test_nsys_export_through_the_timeline(cfg):
    path = NSIGHT / "power_iteration.nsys.sqlite"
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    ((n, ns),) = con.execute("SELECT COUNT(*), SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
    # kernels launched inside the NVTX range "Loop": their runtime call (same correlation id) started inside it
    ((loop_n, loop_ns),) = con.execute(
        "SELECT COUNT(*), SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
        "ON r.correlationId = k.correlationId JOIN NVTX_EVENTS e ON r.start >= e.start AND r.start <= e.end "
        "JOIN StringIds s ON s.id = e.textId WHERE s.value = 'Loop'"
    ).fetchall()
    gpu = con.execute(
        "SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY"
    ).fetchall()
    kern = con.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
    doc = analyze(path, cfg)
    s = doc["summary"]
    assert doc["format"] == "nsys" and (s["kernel_count"], s["kernel_time_us"]) == (n, pytest.approx(ns / 1000))
    assert s["memcpy_count"] == 89
    loop = next(a for a in doc["annotations"] if a["name"] == "Loop")
    assert (loop["kernel_count"], loop["kernel_time_us"]) == (loop_n, pytest.approx(loop_ns / 1000))
    g = s["gpu_time"]
    assert g["gpu_span_us"] == pytest.approx((max(e for _, e in gpu) - min(b for b, _ in gpu)) / 1000)
    assert g["computation_us"] == pytest.approx(_union_length(kern) / 1000)
    assert g["busy_us"] == pytest.approx(_union_length(gpu) / 1000)
    assert doc["devices"][0]["name"] == "Tesla T4" and doc["devices"][0]["datasheet"]["entry"] == "t4"
    assert s["tensor_core_share"] == 0 and s["tensor_core_unknown_share"] == 0  # fp64 GEMV, CUB, CuPy: all named


@needs_nsight
def test_ncu_csv_through_the_timeline(cfg):
    import csv

    with open(NSIGHT / "copy_blocked.ncu.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    dur = next(float(r["Metric Value"].replace(",", "")) for r in rows if r["Metric Name"] == "Duration")
    doc = analyze(NSIGHT / "copy_blocked.ncu.csv", cfg)
    assert doc["format"] == "ncu" and doc["summary"]["kernel_count"] == 1
    assert doc["summary"]["kernel_time_us"] == pytest.approx(dur / 1000)
    (k,) = doc["kernels"]
    p = k["params"]
    assert p["counters"]["Elapsed Cycles"] == 12_319_469 and p["counted_flops"] is None
    assert "none measures the tensor pipe" in p["counter_note"] and k["tensor_cores"] == "unknown"
    assert doc["devices"][0]["compute_capability"] == "7.5"
    assert any("Nsight Compute replays kernels one at a time" in n for n in doc["notes"])


@needs_traces
def test_cupti_range_profiler_counts_flops_per_kernel(cfg):
    ranges = [e for e in _events("a100_cupti_counters.json.gz") if e.get("cat") == "cuda_profiler_range"]
    assert len(ranges) == 77
    expect: dict[str, float] = {}
    for e in ranges:
        a = e.get("args", {})
        f = sum(
            v * (2 if "fma" in k else 1) for k, v in a.items() if k.startswith("smsp__sass_thread_inst_executed_op_")
        )
        expect[e["name"]] = expect.get(e["name"], 0) + f
    doc = analyze(TRACES / "a100_cupti_counters.json.gz", cfg)
    assert doc["summary"]["kernel_count"] == 77
    got = {k["params"]["kernel"]: k["params"]["counted_flops"] for k in doc["kernels"]}
    assert got == pytest.approx(expect)
    sgemm = next(k for k in doc["kernels"] if k["shape"] == "ampere_sgemm_32x32_sliced1x4_tn")
    assert sgemm["params"]["counted_flops"] > 0 and sgemm["tensor_cores"] == "no"  # no model FLOPs: name verdict
    assert any("CUPTI range-profiler trace" in n for n in doc["notes"])


def _synthetic(tmp_path, events, device="NVIDIA A100-SXM4-80GB"):
    """A small Kineto trace written here (SYNTHETIC: no GPU ran it) for what no shared trace holds."""
    path = tmp_path / "synthetic.json"
    path.write_text(
        json.dumps(
            {
                "deviceProperties": [{"id": 0, "name": device, "computeMajor": 8, "computeMinor": 0}],
                "traceEvents": events,
            }
        )
    )
    return path


def test_counters_override_a_name_and_the_contradiction_is_reported(cfg, tmp_path):
    ev = [
        {
            "ph": "X",
            "cat": "cuda_profiler_range",
            "name": "volta_sgemm_128x64_nn",
            "pid": 0,
            "tid": 0,
            "ts": 0,
            "dur": 10,
            "args": {"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": 37.5},
        },
        {
            "ph": "X",
            "cat": "cuda_profiler_range",
            "name": "sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x32",
            "pid": 0,
            "tid": 0,
            "ts": 10,
            "dur": 10,
            "args": {"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": 0.0},
        },
    ]
    doc = analyze(_synthetic(tmp_path, ev), cfg)
    by = {k["shape"][:12]: k for k in doc["kernels"]}
    assert by["volta_sgemm_"]["tensor_cores"] == "yes" and by["volta_sgemm_"]["params"]["evidence"] == "counters"
    assert by["volta_sgemm_"]["params"]["name_verdict"] == "no"
    assert by["sm80_xmma_ge"]["tensor_cores"] == "no"
    lines = [n for n in doc["notes"] if n.startswith("counters contradict the kernel name")]
    assert len(lines) == 2 and any("volta_sgemm" in n for n in lines)
    # the totals follow the counters too: the sgemm's 10 us are Tensor Core time, the xmma's are not
    assert doc["summary"]["tensor_core_share"] == 0.5 and doc["summary"]["non_tensor_core_share"] == 0.5


def test_eligibility_in_a_trace_with_time_at_stake(cfg, tmp_path):
    op = {
        "ph": "X",
        "cat": "cpu_op",
        "name": "aten::mm",
        "pid": 1,
        "tid": 1,
        "ts": 0,
        "dur": 50,
        "args": {"External id": 1, "Input Dims": [[2048, 125], [125, 320]], "Input type": ["float", "float"]},
    }
    launch = {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 1,
        "tid": 1,
        "ts": 10,
        "dur": 5,
        "args": {"correlation": 7, "External id": 1},
    }
    kernel = {
        "ph": "X",
        "cat": "kernel",
        "name": "ampere_sgemm_32x32_sliced1x4_tn",
        "pid": 0,
        "tid": 7,
        "ts": 20,
        "dur": 40,
        "args": {"device": 0, "stream": 7, "correlation": 7, "External id": 1},
    }
    doc = analyze(_synthetic(tmp_path, [op, launch, kernel]), cfg)
    el = doc["eligibility"]
    (f,) = el["findings"]
    assert f["rule"] == "fp32_tf32_off" and f["time_us"] == 40 and el["eligible_unused_us"] == 40
    assert "allow_tf32" in f["remedy"] and doc["summary"]["eligible_unused_us"] == 40
    (o,) = doc["ops"]
    assert o["flops"] == 2 * 2048 * 320 * 125 and o["precision"] == "fp32"  # no Tensor Cores: the fp32 peak
    assert o["op_tflops"] == o["kernel_tflops"] == pytest.approx(o["flops"] / 40e6)


def test_op_time_and_math_kernel_time_both_named(tmp_path, cfg):
    """aten::matmul that copies its operand before the GEMM: op_tflops over both kernels, kernel_tflops over
    the GEMM alone, each with its share of the peak."""
    op = {
        "ph": "X",
        "cat": "cpu_op",
        "name": "aten::matmul",
        "pid": 1,
        "tid": 1,
        "ts": 0,
        "dur": 100,
        "args": {
            "External id": 1,
            "Input Dims": [[4, 1024, 1024], [1024, 1024]],
            "Input type": ["c10::BFloat16", "c10::BFloat16"],
        },
    }
    events = [op]
    for corr, (name, ts, dur) in enumerate(
        [
            ("void at::native::elementwise_kernel<128, 4>", 20, 300),
            ("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32", 330, 100),
        ]
    ):
        events += [
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": 5 + corr,
                "dur": 1,
                "args": {"correlation": 10 + corr, "External id": 1},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": 0,
                "tid": 7,
                "ts": ts,
                "dur": dur,
                "args": {"device": 0, "stream": 7, "correlation": 10 + corr, "External id": 1},
            },
        ]
    (o,) = analyze(_synthetic(tmp_path, events), cfg)["ops"]
    assert o["flops"] == 2 * 4 * 1024 * 1024 * 1024
    assert (o["kernel_time_us"], o["math_kernel_time_us"]) == (400, 100)
    assert o["op_tflops"] == pytest.approx(o["flops"] / 400e6)
    assert o["kernel_tflops"] == pytest.approx(o["flops"] / 100e6)
    assert o["kernel_tflops"] == pytest.approx(4 * o["op_tflops"])


def test_math_kernels_above_the_datasheet_peak_are_flagged():
    from microbench.trace.opmetrics import above_peak

    row = {
        "op": "aten::mm",
        "shape": "M=8 N=8 K=8",
        "dtype": "bf16",
        "precision": "bf16",
        "kernel_tflops": 400.0,
        "kernel_pct_of_datasheet": 128.0,
    }
    (note,) = above_peak([row, dict(row, kernel_pct_of_datasheet=104.0), dict(row, kernel_pct_of_datasheet=None)])
    assert "impossible" in note and "128 %" in note


def _unknown_kernel_trace(tmp_path):
    """Two kernels: one no rule (nor the name's structure) settles, 60 % of kernel time, and a SIMT sgemm. (The
    A100 AlexNet trace served here until the structure rules settled its complex GEMM and FFT kernels.)"""
    ev = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": n,
            "pid": 0,
            "tid": 7,
            "ts": ts,
            "dur": d,
            "args": {"device": 0, "stream": 7, "correlation": i},
        }
        for i, (n, ts, d) in enumerate([("totally_new_kernel_v9", 0, 60), ("ampere_sgemm_128x64_nn", 100, 40)])
    ]
    p = tmp_path / "unknown.json"
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    return p


@needs_traces
def test_unknown_kernels_are_listed_with_how_to_add_a_rule(cfg, capsys, tmp_path):
    doc = analyze(_unknown_kernel_trace(tmp_path), cfg)
    u = doc["unknown_kernels"]
    assert u["share"] == doc["summary"]["tensor_core_unknown_share"] > 0.05
    unknown = [k for k in doc["kernels"] if k["tensor_cores"] == "unknown"]
    assert [t["kernel"] for t in u["top"]] == [k["params"]["kernel"] for k in unknown][: len(u["top"])]
    assert "kernel_rules.toml" in u["how_to_add_a_rule"]
    assert analyze(TRACES / "h100_bert_small.json.gz", cfg)["unknown_kernels"] is None
    assert u["share"] == pytest.approx(0.6) and u["top"][0]["kernel"] == "totally_new_kernel_v9"
    assert trace_cli.main([str(_unknown_kernel_trace(tmp_path)), "--top", "3"]) == 0
    assert "to recognise them: add a [[kernel]] rule" in capsys.readouterr().out


@needs_traces
def test_measured_ceilings_from_the_command_line_and_a_results_file(tmp_path, capsys):
    results = tmp_path / "results.json"
    # ceilings of the trace's own machine (another machine's, or a file naming none, is refused)
    results.write_text(
        json.dumps(
            {
                "schema": "dawnscope.results/1",
                "results": [],
                "hardware": {"name": "NVIDIA H100 80GB HBM3"},
                "ceilings": [
                    {
                        "name": "measured bf16",
                        "kind": "compute",
                        "dtype": "bf16",
                        "value": 780.0,
                        "unit": "TFLOP/s",
                        "source": "measured",
                    },
                    {
                        "name": "datasheet bf16",
                        "kind": "compute",
                        "dtype": "bf16",
                        "value": 989.0,
                        "unit": "TFLOP/s",
                        "source": "datasheet",
                    },
                ],
            }
        )
    )
    out = tmp_path / "r.json"
    assert (
        trace_cli.main([str(TRACES / "h100_bert_small.json.gz"), "--ceilings", str(results), "--json", str(out)]) == 0
    )
    doc = json.loads(out.read_text())
    assert doc["mfu"]["measured_ceilings_tflops"] == {"bf16": 780.0}
    o = doc["ops"][0]
    assert o["pct_of_measured"] == pytest.approx(100 * o["op_tflops"] / 780)
    assert o["kernel_pct_of_measured"] == pytest.approx(100 * o["kernel_tflops"] / 780)
    capsys.readouterr()
    assert trace_cli.main([str(TRACES / "h100_bert_small.json.gz"), "--ceiling", "bf17=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --ceiling = 'bf17=3'")


@pytest.mark.parametrize("value", ["bf16=inf", "bf16=nan", "bf16=-5", "bf16=0", "fp8=1e400"])
def test_a_ceiling_must_be_finite_and_positive(value):
    from microbench.core.datasheet import ceilings_from_args
    from microbench.core.errors import InputError

    with pytest.raises(InputError, match="finite positive"):
        ceilings_from_args([value], None)


@pytest.mark.parametrize("top", ["-1", "0", "x"])
def test_top_must_be_a_positive_integer(top, tmp_path, capsys):
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": []}')
    with pytest.raises(SystemExit) as e:
        trace_cli.main([str(trace), "--top", top])
    assert e.value.code == 2 and "--top" in capsys.readouterr().err


@needs_traces
def test_one_workload_across_vendors(tmp_path, capsys):
    h, m = tmp_path / "h100.json", tmp_path / "mi300.json"
    for src, dst in (("h100_bert_small.json.gz", h), ("mi300_bert_small.json.gz", m)):
        assert trace_cli.main([str(TRACES / src), "--json", str(dst)]) == 0
    hd, md = json.loads(h.read_text()), json.loads(m.read_text())
    html, js = tmp_path / "cmp.html", tmp_path / "cmp.json"
    capsys.readouterr()
    assert compare_cli.main([str(h), str(m), "--html", str(html), "--json", str(js)]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA H100 80GB HBM3 (baseline)" in out and "AMD Instinct MI300X VF" in out
    cmp = json.loads(js.read_text())
    tc = next(r for r in cmp["classes"] if r["class"] == "tc_gemm")["cells"]
    h_tc, m_tc = hd["summary"]["time_by_class_us"]["tc_gemm"], md["summary"]["time_by_class_us"]["tc_gemm"]
    assert tc["AMD Instinct MI300X VF"]["ratio_to_baseline"] == pytest.approx(h_tc / m_tc)
    assert tc["AMD Instinct MI300X VF"]["share"] == pytest.approx(m_tc / md["summary"]["kernel_time_us"])
    attn = next(r for r in cmp["ops"] if r["op"] == "aten::scaled_dot_product_attention")["cells"]
    m_attn = next(o for o in md["ops"] if o["op"] == "aten::scaled_dot_product_attention")
    assert attn["AMD Instinct MI300X VF"]["achieved_tflops"] == pytest.approx(m_attn["op_tflops"])
    assert cmp["gpu_time"]["AMD Instinct MI300X VF"]["idle_us"] == md["summary"]["gpu_time"]["idle_us"]
    assert cmp["gpu_time_ratio"]["AMD Instinct MI300X VF"]["idle_us"] == pytest.approx(
        hd["summary"]["gpu_time"]["idle_us"] / md["summary"]["gpu_time"]["idle_us"]
    )
    page = html.read_text()
    assert "kernel time by class" in page and "aten::scaled_dot_product_attention" in page and "idle_us" in page
    capsys.readouterr()
    assert compare_cli.main([str(h), str(tmp_path / "cmp.json")]) == 2  # a trace report beside something else
    assert "not a profiler trace or a trace report" in capsys.readouterr().err


@needs_traces
def test_compare_reads_two_traces_as_it_reads_their_reports(tmp_path, capsys):
    """`compare A.json.gz B.json.gz` analyses each trace as `trace --json` does: the comparison is the one of the
    two reports, and a trace beside a results file names the trace."""
    traces = [TRACES / "h100_bert_small.json.gz", TRACES / "mi300_bert_small.json.gz"]
    reports = [tmp_path / "h.json", tmp_path / "m.json"]
    for src, dst in zip(traces, reports):
        assert trace_cli.main([str(src), "--json", str(dst)]) == 0
    of_reports, of_traces = tmp_path / "r.json", tmp_path / "t.json"
    assert compare_cli.main([*map(str, reports), "--json", str(of_reports)]) == 0
    assert compare_cli.main([*map(str, traces), "--json", str(of_traces)]) == 0
    a, b = json.loads(of_reports.read_text()), json.loads(of_traces.read_text())
    assert [m["file"] for m in b["machines"]] == [str(t) for t in traces]
    for key in ("classes", "ops", "gpu_time", "gpu_time_ratio", "baseline"):
        assert a[key] == b[key], key
    assert a["ops"] and a["classes"]
    capsys.readouterr()
    assert compare_cli.main([str(reports[0]), str(traces[1])]) == 0  # a report beside a trace: both traces
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"schema": "dawnscope.results/1", "results": []}))
    assert compare_cli.main([str(results), str(traces[0])]) == 2
    assert capsys.readouterr().err.startswith(f"error: {traces[0]}: a profiler trace, and the first input is not")


def test_compare_says_why_a_table_is_empty(tmp_path, capsys):
    """Two traces recorded without shapes: the operator table is one line saying so, not headers over nothing."""
    paths = []
    for i, dur in enumerate((10, 20)):
        events = [
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": 100,
                "dur": 5,
                "args": {"correlation": 1},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": "volta_sgemm_128x64_nn",
                "pid": 0,
                "tid": 7,
                "ts": 110,
                "dur": dur,
                "args": {"device": 0, "stream": 7, "correlation": 1},
            },
        ]
        paths.append(tmp_path / f"t{i}.json")
        paths[-1].write_text(json.dumps({"traceEvents": events}))
    capsys.readouterr()
    assert compare_cli.main([str(p) for p in paths]) == 0
    out = capsys.readouterr().out
    assert "recorded shapes): none (no trace recorded operator shapes (record_shapes=True))" in out
    assert "kernel time by class; vs base" in out
