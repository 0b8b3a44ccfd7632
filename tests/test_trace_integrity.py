"""The integrity block of a trace report (microbench/trace/integrity.py): what the trace lacks, which figures
that makes unreliable, and the figures withheld, said before any figure; on cuts of real traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import TRACES, analyze

DATA = Path(__file__).parent / "data"
SLICE_2021 = DATA / "v100_resnet50_2021schema_slice.json"
H100 = DATA / "h100_bert_small_slice.json"


def _missing(doc: dict) -> dict:
    return {m["what"]: m for m in doc["integrity"]["missing"]}


def _write(tmp_path: Path, doc: dict) -> Path:
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    return p


def test_a_copy_placed_by_the_gpu_step_annotation_leaves_the_steps_reliable(cfg):
    # the H100 cut: 8 kernels, each with its cudaLaunchKernel, shapes, the ProfilerStep#6 range and its GPU copy;
    # its one memcpy has no launch in the cut, and the step's GPU-side annotation holds it
    doc = analyze(H100, cfg)
    (m,) = doc["integrity"]["missing"]
    assert m["detail"].startswith("0 of 8 kernels and 1 memcpy / memset have no launching runtime call")
    assert "1 placed by the GPU-side step annotations, 0 outside" in m["detail"]
    assert "per-step values" not in doc["integrity"]["unreliable"] and "annotations" in doc["integrity"]["unreliable"]


def test_kernels_without_launches_make_steps_and_annotations_unreliable(cfg, tmp_path):
    doc = json.loads(SLICE_2021.read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("name") != "cudaLaunchKernel"]
    out = analyze(_write(tmp_path, doc), cfg)
    m = _missing(out)
    assert m["launches"]["detail"].startswith("20 of 20 kernels have no launching runtime call")
    assert {"per-step values", "annotations", "per-op totals"} <= set(m["launches"]["unreliable"])
    # the 2021 schema has no GPU-side step annotations: those kernels are outside the steps, and it says so
    assert m["GPU-side step annotations"]["unreliable"] == ["per-step values"]
    assert out["outside_steps"]["unlaunched_outside_steps"] == 20


def test_what_the_profiler_says_it_dropped_is_named(cfg, tmp_path):
    # libkineto writes its log as top-level lists by severity (output_json.cpp); CuptiActivityApi.cpp logs these
    doc = json.loads(H100.read_text())
    doc["WARNING"] = [
        "Dropped 1024 activity records",
        "Exceeded max GPU buffer count (33 >= 32) - terminating tracing",
        "Unknown flow type: 3",
    ]
    m = _missing(analyze(_write(tmp_path, doc), cfg))
    assert "Dropped 1024 activity records" in m["events the profiler dropped"]["detail"]
    assert m["events the profiler dropped"]["unreliable"] == ["every figure"]
    assert "Unknown flow type" in m["profiler log"]["detail"]


def test_device_work_in_an_unknown_category_is_one_line(cfg, tmp_path):
    # an MTIA trace's device work (libkineto ActivityType MTIA_CCP_EVENTS), which no reader here knows
    doc = json.loads(H100.read_text())
    doc["traceEvents"] += [e | {"cat": "mtia_ccp_events"} for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    m = _missing(analyze(_write(tmp_path, doc), cfg))
    assert "mtia_ccp_events (8)" in m["device work in unknown categories"]["detail"]


def test_mfu_is_withheld_when_its_flops_cover_little_of_the_matrix_time(cfg):
    # the 2021 slice's convolutions have Input Dims but no Concrete Inputs: no FLOPs for them
    out = analyze(SLICE_2021, cfg)
    cov = out["integrity"]["flop_coverage"]
    assert cov["share"] < cov["threshold"] and cov["withheld"]
    assert out["mfu"]["mfu"] is None and out["mfu"]["achieved_tflops"] is None and "withheld" in out["mfu"]
    assert all(r["op_tflops"] is None and "withheld" in r for r in out["ops"])


@pytest.mark.skipif(TRACES is None, reason="tests/data/traces not here")
def test_mfu_is_shown_where_the_flops_cover_the_matrix_time(cfg):
    out = analyze(TRACES / "mi300_bert_small.json.gz", cfg)
    cov = out["integrity"]["flop_coverage"]
    assert cov["share"] >= cov["threshold"] and not cov["withheld"]
    assert out["mfu"]["mfu"] is not None


def test_the_terminal_says_what_is_missing_before_the_headline_and_splits_the_span(cfg):
    from rich.console import Console

    from microbench.report.trace_report import print_trace_report

    doc = analyze(SLICE_2021, cfg)
    console = Console(record=True, width=400)
    print_trace_report(doc, console=console)
    lines = console.export_text().splitlines()
    first_figure = next(i for i, line in enumerate(lines) if " kernels, kernel time " in line)
    said = [i for i, line in enumerate(lines) if line.startswith("integrity:")]
    assert said and max(said) < first_figure
    head = lines[first_figure]
    s = doc["summary"]
    for label, key in (
        ("computation", "computation_share"),
        ("copies", "copy_share"),
        ("exposed communication", "exposed_comm_share"),
        ("idle", "idle_share"),
    ):
        assert f"{label} {s[key]:.1%}" in head
    assert "GPU busy" not in head
    assert s["computation_share"] + s["copy_share"] + s["exposed_comm_share"] + s["idle_share"] == pytest.approx(1)


def _step(n: int, ts: float, dur: float, pid: int = 1) -> dict:
    return {
        "ph": "X",
        "cat": "user_annotation",
        "name": f"ProfilerStep#{n}",
        "pid": pid,
        "tid": 1,
        "ts": ts,
        "dur": dur,
    }


def test_steps_that_overlap_are_said_and_counted_once(cfg, tmp_path):
    """ProfilerStep#3 inside #1, #2 starting before #1 ends (a writer's nesting): per-step values are unreliable,
    the line names the first such step, and the whole trace's CPU range is the steps' union, not a sum past the
    trace (2,100 us in a 1,500 us trace before). Another process's step at the same time is no overlap."""
    events = [_step(1, 0, 1000), _step(2, 500, 1000), _step(3, 200, 100), _step(1, 0, 1000, pid=2)]
    doc = analyze(_write(tmp_path, {"traceEvents": events}), cfg)
    m = _missing(doc)["disjoint steps"]
    assert m["detail"].startswith("2 of 4 steps start inside an earlier step of their process (ProfilerStep#3 at 200.0")
    assert "per-step values" in doc["integrity"]["unreliable"]
    assert doc["outside_steps"]["steps_cpu_us"] == 1500
    apart = [_step(1, 0, 100), _step(2, 100, 100), _step(1, 50, 100, pid=2)]  # back to back; another process
    doc = analyze(_write(tmp_path, {"traceEvents": apart}), cfg)
    assert "disjoint steps" not in _missing(doc) and doc["outside_steps"]["steps_cpu_us"] == 200


def test_a_kernel_name_over_the_cap_is_read_on_its_head_and_said(tmp_path, cfg, monkeypatch):
    """A hostile 70 MB kernel name ran the name rules over all of it (minutes); names over kernel_rules.toml's
    name_cap_chars are classified on their first that many characters, and integrity says so. Counted:
    the rules never see more than the cap."""
    from microbench.trace import classify

    cap = classify.name_cap_chars()
    doc = json.loads(H100.read_text())
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    long_name = "sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel"
    kernel["name"] = long_name + "<" + "x" * (3 * cap) + ">"
    seen = []
    real = classify.kernel_signature_name
    monkeypatch.setattr(classify, "kernel_signature_name", lambda n: seen.append(len(n)) or real(n))
    classify.classify_kernel.cache_clear()
    out = analyze(_write(tmp_path, doc), cfg)
    classify.classify_kernel.cache_clear()
    assert seen and max(seen) <= cap
    entry = _missing(out)["whole kernel names"]
    assert (
        f"longer than {cap:,} characters" in entry["detail"] and f"{3 * cap + len(long_name) + 2:,}" in entry["detail"]
    )
    row = next(k for k in out["kernels"] if k["kernel"].startswith("sm80_xmma_gemm"))
    assert row["tensor_cores"] == "yes"  # the head settles it


def test_launches_without_kernel_records_are_lost_device_activity_not_the_host_alone(tmp_path, cfg, capsys):
    """A Kineto trace whose launches are there and whose kernels are not (CUPTI's buffers not flushed): was called
    'recorded without ProfilerActivity.CUDA?' and 'a trace of the host alone', with the CPU advice."""
    from microbench.trace import cli as trace_cli

    from .conftest import analyze_with_findings

    doc = json.loads(H100.read_text())
    launches = sum(
        1 for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    )
    device = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in device]
    path = _write(tmp_path, doc)
    out = analyze_with_findings(path, cfg)
    lost = _missing(out)["device activity"]
    assert lost["detail"].startswith(f"{launches:,} launch calls, 0 kernel records") and lost["unreliable"]
    assert not any("ProfilerActivity.CUDA" in n for n in out["notes"])
    (why,) = out["findings_not_checked"]
    assert "device activity was lost" in why["why"] and "decompose" not in why["why"]
    assert trace_cli.main([str(path)]) == 0
    text = capsys.readouterr().out
    assert "host alone" not in text and "no GPU activity recorded" in text
