"""Kernel names read by their library's naming grammar (microbench/data/kernel_grammars.toml): each grammar
parses the real names it was written for, and the verdicts follow from what the names say."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from microbench.core.kernel_names import kernel_signature_name
from microbench.trace import kernel_grammar
from microbench.trace.classify import classify_kernel

TRACES = Path(__file__).parent / "data" / "traces"


@pytest.fixture(scope="module")
def shipped_kernel_names() -> set[str]:
    names: set[str] = set()
    for path in sorted(TRACES.glob("*.json.gz")):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        events = doc.get("traceEvents", []) if isinstance(doc, dict) else []
        names |= {e["name"] for e in events if isinstance(e, dict) and e.get("cat") == "kernel"}
    assert len(names) > 300  # the shipped traces' distinct kernels: the test reads them all
    return names


def _examples():
    for g in kernel_grammar._data()["grammar"]:
        for name in g["example"]:
            yield pytest.param(g["family"], name, id=name[:50])


@pytest.mark.parametrize("family,name", list(_examples()))
def test_every_grammar_reads_the_names_it_was_written_for(family, name):
    parsed = kernel_grammar.parse(kernel_signature_name(name))
    assert parsed is not None and parsed.family == family


@pytest.mark.parametrize(
    "name,cls,tensor_cores",
    [
        # TensorRT's pooling kernels, built for sm_50 (no Tensor Cores), in a public RTX 3090 / Turing TensorRT
        # profile: a generic `xmma` rule called them Tensor Core GEMMs (+5.3 points of Tensor Core share)
        ("sm50_xmma_pooling_coalescedC_NHWC_kMAX_3_False_execute_kernel_trt", "elementwise", "no"),
        ("sm50_xmma_pooling_fw_4d_FP32FP32NHWC_Average_FastDiv_CAlign", "elementwise", "no"),
        # a CUTLASS 2.x GEMM by its device-API template name (a public Nsight export: 100 % unknown before)
        (
            "void cutlass::Kernel<cutlass::gemm::kernel::Gemm<cutlass::gemm::threadblock::MmaPipelined<"
            "cutlass::gemm::GemmShape<128, 128, 32>, cutlass::gemm::warp::MmaTensorOp<cutlass::gemm::GemmShape<64, "
            "64, 32>, cutlass::half_t, cutlass::arch::Mma<cutlass::gemm::GemmShape<16, 8, 8>, 32, cutlass::half_t, "
            "cutlass::layout::RowMajor, cutlass::half_t, cutlass::layout::ColumnMajor, float, "
            "cutlass::layout::RowMajor, cutlass::arch::OpMultiplyAdd>>>>>(Params)",
            "tc_gemm",
            "yes",
        ),
        # the same device API's SIMT path: arch::Mma<GemmShape<1, 1, 1>> is one FMA per thread
        (
            "void cutlass::Kernel<cutlass::gemm::kernel::Gemm<cutlass::gemm::threadblock::MmaPipelined<"
            "cutlass::gemm::GemmShape<128, 128, 8>, cutlass::arch::Mma<cutlass::gemm::GemmShape<1, 1, 1>, 1, float, "
            "cutlass::layout::RowMajor, float, cutlass::layout::ColumnMajor, float>>>>(Params)",
            "gemm",
            "no",
        ),
        # MIOpen's Winograd assembly on packed-fp16 dot products (20-41 % of an MI300X job's kernel time: unknown)
        ("miopenSp3AsmConv_v21_1_3_gfx9_fp16_dot2_edc_stride1", "gemm", "no"),
        ("igemm_fwd_gtc_nchw_fp32_bx0_ex0_bt256x128x16_wt64x32_ws1x1_wr2x2", "gemm", "no"),  # non-xdlops igemm
        ("cutlass_80_simt_sgemm_128x128_8x5_nn_align1", "gemm", "no"),
        ("nvjet_sss_128x64_64x4_2x1_v_bz_NNN", "gemm", "unknown"),  # plain fp32: the name cannot tell
        ("volta_hgemm_128x128_nn", "gemm", "no"),  # an fp16 GEMM on HFMA2: no MMA shape in the name
        ("maxwell_scudnn_128x64_relu_interior_nn", "gemm", "no"),
    ],
)
def test_verdicts_follow_from_what_the_name_says(name, cls, tensor_cores):
    c = classify_kernel(name)
    assert (c.cls, c.tensor_cores) == (cls, tensor_cores), c


def test_a_kernel_built_for_an_arch_without_tensor_cores_is_never_tensor_core_work():
    # an xmma GEMM built for sm_61 (Pascal) with fp16 operands: the types alone would say yes
    c = classify_kernel("sm61_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize64x64x8_kernel")
    assert c.tensor_cores == "no" and "sm_61" in c.note


def test_no_copy_pooling_or_elementwise_kernel_of_the_shipped_traces_is_tensor_core_work(shipped_kernel_names):
    for name in shipped_kernel_names:
        c = classify_kernel(name)
        if c.tensor_cores == "yes":
            assert c.cls in ("tc_gemm", "gemm"), name  # a matrix kernel (by its name, or inferred from structure)
            low = name.lower()
            assert not any(w in low for w in ("pooling", "elementwise", "copy_kernel", "routing", "cast_")), name
