"""Eligibility without shapes (eligibility.toml [by_operator]), the TensorBoard plugin's measure: the share of
kernel time launched by operators that could run on Tensor Cores, in a dtype the chip takes or could take with
AMP / TF32, that ran without them. Checked on a small trace in the modern schema (written here), on the 2021-schema
cut of the plugin's ResNet-50 sample, and on the whole sample against the plugin's own 68 %."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from microbench.core.config import load_config
from microbench.trace.analysis import TraceAnalysis
from microbench.trace.eligibility import operator_could_use_matrix_units

from .conftest import TRACES

DATA = Path(__file__).parent / "data"
TB_SAMPLE = TRACES / "v100_resnet50_tbplugin_2021schema.json.gz" if TRACES else None


def _op(name: str, ts: int, dur: int, ext: int, types: list[str]) -> dict:
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": name,
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "dur": dur,
        "args": {"External id": ext, "Input type": types},
    }


def _launch_and_kernel(name: str, ts: int, dur: int, corr: int) -> list[dict]:
    return [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": ts + 1,
            "dur": 2,
            "args": {"correlation": corr},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": name,
            "pid": 0,
            "tid": 7,
            "ts": 1000 + corr * 200,
            "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": corr},
        },
    ]


def _trace(tmp_path: Path, cc: tuple[int, int] = (7, 0)) -> Path:
    """fp32 mm on CUDA cores (eligible, unused: AMP would move it), an fp16 mm on Tensor Cores (eligible,
    used), an fp64 mm (not eligible), an element-wise add (not a Tensor Core family), on a V100-class GPU."""
    ev = [
        _op("aten::mm", 10, 10, 1, ["float", "float"]),
        *_launch_and_kernel("volta_sgemm_128x64_nn", 10, 100, 1),
        _op("aten::mm", 30, 10, 2, ["c10::Half", "c10::Half"]),
        *_launch_and_kernel("volta_h884gemm_64x64_nn", 30, 30, 2),
        _op("aten::mm", 50, 10, 3, ["double", "double"]),
        *_launch_and_kernel("volta_dgemm_64x64_nn", 50, 20, 3),
        _op("aten::add", 70, 10, 4, ["float", "float"]),
        *_launch_and_kernel(
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", 70, 50, 4
        ),
    ]
    doc = {
        "schemaVersion": 1,
        "traceEvents": ev,
        "deviceProperties": [{"id": 0, "name": "Tesla V100-SXM2-32GB", "computeMajor": cc[0], "computeMinor": cc[1]}],
    }
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    return p


def test_fp32_matmul_without_tensor_cores_is_eligible_and_unused(tmp_path):
    a = TraceAnalysis.open(_trace(tmp_path), load_config())
    e = a.eligibility["by_operator"]
    assert e["eligible_time_us"] == 130.0  # fp32 100 + fp16 30; fp64 and the add are not eligible
    assert e["unused_time_us"] == 100.0  # the fp16 mm ran on Tensor Cores (h884)
    assert e["unused_share"] == pytest.approx(100.0 / 200.0)
    assert [(o["op"], o["dtype"]) for o in e["ops"]] == [("aten::mm", "fp32"), ("aten::mm", "fp16")]
    assert any("50.0% of kernel time are launched by operators that could run on Tensor Cores" in n for n in a.notes)


def test_a_gpu_without_tensor_cores_has_nothing_eligible(tmp_path):
    e = TraceAnalysis.open(_trace(tmp_path, cc=(6, 0)), load_config()).eligibility["by_operator"]
    assert e["eligible_time_us"] == 0.0 and e["unused_share"] == 0.0


@pytest.mark.parametrize(
    "name, eligible",
    [
        ("aten::cudnn_convolution", True),
        ("aten::cudnn_convolution_backward_weight", True),  # the 2021 sample's
        ("aten::convolution_backward", True),
        ("aten::addmm", True),
        ("aten::_flash_attention_forward", True),
        ("MmBackward0", True),
        ("aten::cudnn_batch_norm", False),
        ("aten::add_", False),
        ("aten::threshold_backward", False),
        ("aten::mm_something_else", False),
    ],
)
def test_operator_families(name, eligible):
    assert operator_could_use_matrix_units(name) is eligible


def test_the_2021_schema_cut_counts_only_convolution_kernels():
    """The 169-event cut of the plugin's sample: its eligible kernels are those of aten::cudnn_convolution, fp32 on
    a V100 (cc 7.0: fp16 Tensor Cores, reachable with AMP), none on Tensor Cores."""
    a = TraceAnalysis.open(DATA / "v100_resnet50_2021schema_slice.json", load_config())
    e = a.eligibility["by_operator"]
    assert e["ops"] and {o["op"] for o in e["ops"]} <= {"aten::cudnn_convolution"}
    assert {o["dtype"] for o in e["ops"]} == {"fp32"}
    assert e["unused_time_us"] == e["eligible_time_us"] > 0


@pytest.mark.skipif(TB_SAMPLE is None or not TB_SAMPLE.is_file(), reason="tests/data/traces not found")
def test_the_plugins_own_sample_gives_its_68_percent():
    """SOURCES.md: the plugin says "Kernels with 68% time are launched by Tensor Cores eligible operators" (0.0 %
    of kernel time on Tensor Cores): the same figure within 3 points, from the launching operators alone."""
    a = TraceAnalysis.open(TB_SAMPLE, load_config())
    e = a.eligibility["by_operator"]
    assert e["unused_share"] == pytest.approx(0.68, abs=0.03)
    assert a.summary["eligible_unused_by_operator_share"] == e["unused_share"]
    assert e["untyped_time_us"] == 0  # the sample records Input type


def _fp16_trace(tmp_path: Path, kernel: str, types: tuple[str, str] = ("c10::Half", "c10::Half")) -> Path:
    """One convolution (fp16 unless `types` say otherwise) on a given kernel, on a V100."""
    ev = [
        _op("aten::cudnn_convolution", 10, 10, 1, list(types)),
        *_launch_and_kernel(kernel, 10, 100, 1),
    ]
    ev += [_op("aten::add", 70, 10, 4, ["float", "float"])]
    ev += _launch_and_kernel(
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", 70, 20, 4
    )
    doc = {
        "schemaVersion": 1,
        "traceEvents": ev,
        "deviceProperties": [{"id": 0, "name": "Tesla V100-SXM2-32GB", "computeMajor": 7, "computeMinor": 0}],
    }
    p = tmp_path / "fp16.json"
    p.write_text(json.dumps(doc))
    return p


def test_an_fp16_operator_on_a_cuda_core_kernel_gets_the_librarys_remedy_not_amp(tmp_path):
    """An operator already in fp16 whose kernel ran without Tensor Cores: the remedy is the library's algorithm
    choice (cuDNN benchmark mode, channels_last, MIOpen's find-db), never 'enable AMP' (was: AMP whatever the dtype)."""
    a = TraceAnalysis.open(_fp16_trace(tmp_path, "volta_fp16_sgemm_fp16_128x64_nn"), load_config())
    e = a.eligibility["by_operator"]
    assert e["unused_time_us"] == e["unused_16bit_time_us"] == 100.0
    (note,) = [n for n in a.notes if "could run on Tensor Cores" in n]
    assert "cudnn.benchmark" in note and "AMP" not in note


def test_a_kernel_whose_tensor_core_use_is_unknown_is_not_counted_unused(tmp_path):
    """`unknown` is not `unused`: an fp32 convolution on a kernel no rule settles (a V100 has no TF32, so the
    launching operator settles nothing either) is said apart, not counted as a Tensor Core left idle."""
    a = TraceAnalysis.open(_fp16_trace(tmp_path, "my_company_conv_kernel_v3", ("float", "float")), load_config())
    e = a.eligibility["by_operator"]
    assert e["unused_time_us"] == 0.0 and e["unknown_time_us"] == 100.0
    assert not [n for n in a.notes if "could run on Tensor Cores" in n]
