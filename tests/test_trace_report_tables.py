"""What a user reading `trace` at 120 and 80 columns (a pipe, a CI log) must see: the operator table's key columns
whole, the unreliable marks the integrity lines promise, no annotation row that repeats a step with 0 calls."""

from __future__ import annotations

import pytest
from rich.console import Console

from microbench.report.trace_report import print_trace_report
from microbench.trace import metrics
from tests.conftest import DATA, TRACES, needs_traces

from .conftest import analyze


def _report(doc: dict, width: int) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))
    print_trace_report(doc, console=console)
    return console.export_text()


@needs_traces
@pytest.mark.parametrize("width", [120, 80])
def test_op_and_shape_never_cut(cfg, width):
    doc = analyze(TRACES / "h100_bert_small.json.gz", cfg)
    text = _report(doc, width)
    table = text[text.index("operators with a work model") :]
    for o in doc["ops"][:15]:  # each op's name and shape whole, on one line
        assert any(o["op"] in line and o["shape"] in line for line in table.splitlines()), (o["op"], o["shape"])
    assert max(len(line) for line in text.splitlines()) <= width


@needs_traces
def test_annotation_table_shows_its_unreliable_mark(cfg):
    # the CUPTI range-profiler trace has no launches: the integrity line says annotations are unreliable, and the
    # table's title must say so too (its brackets were once eaten as rich markup)
    doc = analyze(TRACES / "a100_cupti_counters.json.gz", cfg)
    assert "annotations" in doc["integrity"]["unreliable"]
    text = _report(doc, 120)
    title = next(line for line in text.splitlines() if "user annotations" in line)
    assert "[unreliable: launches missing]" in title


@needs_traces
def test_a_steps_annotation_row_has_its_own_calls(cfg):
    # h100_bert_small's only GPU-side user annotation is ProfilerStep#6: it was a row of 0 calls, 0.0 wall us and
    # 0 kernels beside its GPU time; it carries the step's own CPU call, wall time and kernels (the step table's)
    doc = analyze(TRACES / "h100_bert_small.json.gz", cfg)
    (step,) = doc["steps"]
    rows = [a for a in doc["annotations"] if a["name"] == step["name"]]
    assert all(a["calls"] >= 1 and a["kernel_count"] == step["kernel_count"] for a in rows)
    assert all(a["wall_us"] == pytest.approx(step["wall_us"]) for a in rows)


def test_gpu_annotations_that_are_not_steps_stay():
    from microbench.trace.analysis import read_trace

    # the DDP slice's GPU-side range DistributedDataParallel.forward is no step: it keeps its row and its time
    rows = {a["name"]: a for a in metrics.annotation_times(read_trace(DATA / "v100_resnet_ddp_2023schema_slice.json"))}
    assert rows["DistributedDataParallel.forward"]["gpu_annotation_us"] > 0
    assert all(a["calls"] >= 1 for a in rows.values())


@needs_traces
def test_withheld_rates_are_withheld_per_kernel_too(cfg):
    # the 2021-schema V100 trace's FLOPs cover 0.1% of its matrix-kernel time: the integrity line withholds
    # achieved TFLOP/s, and the top-kernel table printed 0.0908 for volta_sgemm_128x32_nt all the same
    doc = analyze(TRACES / "v100_resnet50_tbplugin_2021schema.json.gz", cfg)
    assert "achieved_tflops" in doc["integrity"]["withheld"]
    modelled = [k["params"] for k in doc["kernels"] if k["params"].get("model_flops")]
    assert modelled and all(p["achieved_tflops"] is None and p["withheld"] for p in modelled)
    shown = analyze(TRACES / "h100_bert_small.json.gz", cfg)  # 100% covered: every modelled kernel's rate shown
    assert all(k["params"]["achieved_tflops"] > 0 for k in shown["kernels"] if k["params"].get("model_flops"))


@needs_traces
def test_class_table_accounts_for_the_tensor_core_share(cfg):
    # vLLM's MI300 decode: the mxfp4 MoE GEMMs keep their name rule's class ("other GEMM/conv", 65.9%) while the
    # structure rule puts them on matrix cores: the headline said 83.6% on Tensor Cores beside a class table whose
    # "Tensor Core GEMM/conv" row held 17.7%. The table's new column shows where the rest is.
    doc = analyze(TRACES / "mi300_vllm_decode_graph_execution.json.gz", cfg)
    s = doc["summary"]
    by_class = s["tensor_core_time_by_class_us"]
    assert sum(by_class.values()) == pytest.approx(s["tensor_core_time_us"])
    assert by_class["gemm"] == pytest.approx(s["time_by_class_us"]["gemm"])  # every other-GEMM kernel: inferred yes
    text = _report(doc, 120)
    row = next(line for line in text.splitlines() if "other GEMM/conv" in line)
    assert row.split("│")[-2].strip() == "100.0%"
    assert next(line for line in text.splitlines() if "element-wise" in line).split("│")[-2].strip() == "-"


@needs_traces
def test_annotation_names_whole_at_80_columns(cfg):
    # the TorchRec rank's record_function names were cut to "DistributedD…" at 80 columns
    doc = analyze(TRACES / "a100_torchrec_rank0.json.gz", cfg)
    text = _report(doc, 80)
    table = text[text.index("user annotations") :]
    for a in doc["annotations"][:15]:
        assert any(line.lstrip().startswith(a["name"]) for line in table.splitlines()), a["name"]


@needs_traces
def test_both_eligibility_measures_are_named_together(cfg):
    # the V100 ResNet-50: the per-op rules (operators with shapes) and the by-launching-operator measure of the
    # note below; the headline names its measure and gives the other beside it (they differed: 21.7% and 67.8%)
    doc = analyze(TRACES / "v100_resnet50_tbplugin_2021schema.json.gz", cfg)
    s = doc["summary"]
    text = " ".join(_report(doc, 200).split())
    share = s["eligible_unused_us"] / s["kernel_time_us"]
    assert (
        f"Tensor Core eligible but not used: {s['eligible_unused_us']:,.1f} us of kernel time ({share:.1%}: "
        f"the operators with recorded shapes; by launching operator, with or without shapes: "
        f"{s['eligible_unused_by_operator_share']:.1%})"
    ) in text
    assert f"kernels with {s['eligible_unused_by_operator_share']:.1%} of kernel time are launched" in text


@needs_traces
def test_a_process_on_two_gpus_shows_each_devices_own_row(cfg, tmp_path):
    """The H100 bert-small trace with every other GPU activity moved to a second device: the step's GPU span adds
    the two devices' (over its CPU range), so each device's row follows it, and the HTML summary says it sums."""
    import gzip
    import json

    from microbench.report.trace_html import summary_html

    doc = json.loads(gzip.open(TRACES / "h100_bert_small.json.gz").read())
    gpu = [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    for e in gpu[1::2]:
        e["pid"], e["args"]["device"] = 1, 1
    path = tmp_path / "two_gpus.json"
    path.write_text(json.dumps(doc))
    report = analyze(path, cfg)
    by = report["summary"]["gpu_time_by_device"]
    assert set(by) == {"0", "1"} and sum(d["kernel_count"] for d in by.values()) == report["summary"]["kernel_count"]
    step = report["steps"][0]
    assert step["gpu_span_us"] == pytest.approx(sum(d["gpu_span_us"] for d in step["by_device"].values()))
    lines = _report(report, 120).splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith(step["name"]) and "GPU" not in line)
    assert lines[at + 1].strip().startswith("GPU 0") and lines[at + 2].strip().startswith("GPU 1")
    assert "2 devices: a step's figures add theirs" in " ".join(lines)
    assert "summed over 2 devices" in summary_html(report)


def _host_only_trace(path) -> None:
    """Two profiler steps of a CPU run (no kernel, memcpy or memset): a convolution with its shapes in each."""
    import json

    ev = []
    for i, t0 in enumerate((0, 10_000)):
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{i}",
                "ts": t0,
                "dur": 9_000,
                "pid": 1,
                "tid": 1,
            }
        )
        ev.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::conv2d",
                "ts": t0 + 100,
                "dur": 8_000,
                "pid": 1,
                "tid": 1,
                "args": {
                    "Input Dims": [[32, 3, 32, 32], [16, 3, 3, 3], [16], [], [], [], []],
                    "Input type": ["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Int"],
                },
            }
        )
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))


def test_a_trace_of_the_host_alone_says_so_instead_of_tables_of_zeros(cfg, tmp_path):
    """No GPU activity: one line says so and the kernel / GPU time tables are left out; the host's step breakdown
    stays; an operator that launched no kernel shows no kernel time (not 0.0 us, which reads as measured)."""
    trace = tmp_path / "cpu.json"
    _host_only_trace(trace)
    doc = analyze(trace, cfg)
    text = _report(doc, 120)
    assert "no GPU activity: a trace of the host alone (19,000.0 us traced)" in text
    for gone in ("kernel time by class", "top 0 kernels", "GPU time per step", "0 kernels, kernel time"):
        assert gone not in text
    assert "step time by what ran" in text and "ProfilerStep#1" in text
    ops = text[text.index("operators with a work model") :]
    row = next(line for line in ops.splitlines() if "aten::conv2d" in line)
    assert doc["ops"][0]["kernel_time_us"] == 0.0 and " 0.0" not in row
    from microbench.report.trace_html import trace_page

    page = trace_page(doc)
    assert "no GPU activity: a trace of the host alone" in page and "step breakdown" in page
    assert "kernels by class" not in page and "communication and overlap" not in page
