"""Kernels no name rule settles, classified by the operator or range that launched them (kernel_rules.toml
[[launcher]], trace/launchers.py): communication by what launched it (nccl:*, c10d::*, record_param_comms),
a GEMM of unknown unit by its fp16 / bf16 / fp8 matrix operator (a custom autograd function such as
LinearWithGradAccumulationFP8 included), labelled inferred; element-wise, copy and cast kernels never change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from microbench.core.config import load_config
from microbench.trace.analysis import TraceAnalysis, read_trace
from microbench.trace.classify import classify_by_launcher, classify_kernel

ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
QUANTIZE = "void transformer_engine::quantize_kernel<fp8e4m3>"  # an FP8 cast inside an FP8 linear


def _launch(kernel: str, ts: int, dur: int, corr: int) -> list[dict]:
    return [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": ts + 1,
            "dur": 1,
            "args": {"correlation": corr},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": kernel,
            "pid": 0,
            "tid": 7,
            "ts": 1000 + 100 * corr,
            "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": corr},
        },
    ]


def _span(cat: str, name: str, ts: int, dur: int, types: list[str] | None = None) -> dict:
    args = {"Input type": types} if types else {}
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def _trace(tmp_path: Path, device: str = "NVIDIA H800", cc: tuple[int, int] = (9, 0)) -> Path:
    ev = [
        # DeepEP-style all-to-all launched under PyTorch's nccl:all_to_all range, with a name no rule knows,
        # and an element-wise kernel in the same range
        _span("user_annotation", "nccl:all_to_all", 10, 20),
        *_launch("dispatch_tokens_v2", 11, 40, 1),
        *_launch(ELEMENTWISE, 15, 10, 2),
        # a GEMM of unknown unit under a bf16 aten::mm; the same under an fp32 one (TF32 or FFMA: not settled)
        _span("cpu_op", "aten::mm", 40, 5, ["c10::BFloat16", "c10::BFloat16"]),
        *_launch("triton_tem_fused_mm_0", 40, 30, 3),
        _span("cpu_op", "aten::mm", 50, 5, ["float", "float"]),
        *_launch("triton_tem_fused_mm_1", 50, 30, 4),
        # a custom autograd function with FP8 in its name and no recorded types: a grouped GEMM and a cast in it
        _span("cpu_op", "LinearWithGradAccumulationFP8", 60, 10),
        *_launch("cutlass_grouped_gemm_kernel", 61, 50, 5),
        *_launch(QUANTIZE, 65, 5, 6),
    ]
    doc = {
        "schemaVersion": 1,
        "traceEvents": ev,
        "deviceProperties": [{"id": 0, "name": device, "computeMajor": cc[0], "computeMinor": cc[1]}],
    }
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    return p


def _by_name(tl) -> dict:
    return {tl.names[tl.activities.name[r]]: tl.classes[tl.activities.cls[r]] for r in range(len(tl.activities))}


def test_a_kernel_launched_inside_nccl_all_to_all_is_communication(tmp_path):
    got = _by_name(read_trace(_trace(tmp_path)))
    assert classify_kernel("dispatch_tokens_v2").cls == "other"  # by name: nothing
    assert (got["dispatch_tokens_v2"].cls, got["dispatch_tokens_v2"].basis) == ("comm", "operator (inferred)")
    assert got[ELEMENTWISE].cls == "elementwise"  # a named kernel keeps its class


def test_gemm_of_unknown_unit_by_its_launching_operators_dtype(tmp_path):
    got = _by_name(read_trace(_trace(tmp_path)))
    assert (got["triton_tem_fused_mm_0"].tensor_cores, got["triton_tem_fused_mm_0"].basis) == (
        "yes",
        "operator (inferred)",
    )
    assert got["triton_tem_fused_mm_1"].tensor_cores == "unknown"  # fp32: TF32 or FFMA, the operator cannot tell
    assert got["cutlass_grouped_gemm_kernel"].tensor_cores == "yes"  # FP8 in LinearWithGradAccumulationFP8's name
    assert got[QUANTIZE].tensor_cores == "no"  # a cast stays a cast


def test_bf16_on_a_gpu_without_bf16_tensor_cores_is_not_inferred(tmp_path):
    got = _by_name(read_trace(_trace(tmp_path, "Tesla V100-SXM2-32GB", (7, 0))))
    assert got["triton_tem_fused_mm_0"].tensor_cores == "unknown"
    assert got["cutlass_grouped_gemm_kernel"].tensor_cores == "unknown"  # no FP8 before compute capability 8.9
    assert got["dispatch_tokens_v2"].cls == "comm"  # communication does not depend on the chip


def test_the_report_counts_launcher_inferred_time_apart(tmp_path):
    a = TraceAnalysis.open(_trace(tmp_path), load_config())
    s = a.summary
    assert s["comm_time_us"] == 40.0 and s["comm_share"] == pytest.approx(40.0 / 165.0)
    assert s["exposed_comm_us"] == 40.0  # nothing runs beside it: all of it exposed
    inferred = s["tensor_core_evidence_us"]["operator (inferred)"]
    assert inferred == {"yes": 80.0, "no": 40.0}  # 30 + 50 us of GEMMs; the 40 us all-to-all (no)
    assert s["tensor_core_inferred_share"] == pytest.approx(80.0 / 165.0)
    rows = {k["params"]["kernel"]: k for k in a.kernels}
    assert rows["triton_tem_fused_mm_0"]["params"]["evidence"] == "operator (inferred)"
    assert "inferred from the launching operator 'aten::mm'" in rows["triton_tem_fused_mm_0"]["tensor_core_evidence"]


def test_launcher_rules_name_their_sources():
    from microbench.trace.classify import _load

    rules = _load()[1]["launcher"]
    assert rules and all("PyTorch" in r.note or "autograd" in r.note for r in rules)
    assert classify_by_launcher(classify_kernel(ELEMENTWISE), "nccl:all_reduce") is None


def test_the_job_view_reads_the_same_class(tmp_path):
    """A rank's summary (python -m microbench.comm ranks / the job view) counts the all-to-all that only its
    nccl:all_to_all range names as communication, as the trace report does."""
    from microbench.comm.ranks import summarize_rank

    s = summarize_rank(_trace(tmp_path), 0)
    assert s.comm_kernels == 1 and s.comm_us == 40.0
