"""Tensor Core evidence for vendor calls: kernel names (GPU) and oneDNN implementations (CPU)."""

from __future__ import annotations

import pytest
import torch

from microbench.roofline.evidence import from_kernel_names, from_onednn, onednn_implementations
from microbench.trace.classify import classify_kernel


@pytest.mark.parametrize(
    "name, cls, tc",
    [
        (
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
            "tc_gemm",
            "yes",
        ),
        ("nvjet_tst_128x256_64x4_2x1_v_bz_coopB_TNT", "tc_gemm", "yes"),
        ("volta_h884gemm_128x128_ldg8_nn", "tc_gemm", "yes"),
        ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn", "tc_gemm", "yes"),
        ("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_APM1", "tc_gemm", "yes"),
        ("ampere_sgemm_128x64_nn", "gemm", "no"),
        (
            "void cudnn::detail::implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>",
            "gemm",
            "no",
        ),
        ("Cijk_Ailk_Bljk_SB_MT64x64x8_SN_1LDSB0", "gemm", "unknown"),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "comm", "no"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >",
            "elementwise",
            "no",
        ),
        ("Memcpy DtoD (Device -> Device)", "memcpy", "no"),
        ("bn_fw_tr_1C11_kernel_NCHW", "norm", "no"),
        ("totally_new_kernel_v9", "other", "unknown"),
    ],
)
def test_kernel_rules(name, cls, tc):
    c = classify_kernel(name)
    assert (c.cls, c.tensor_cores) == (cls, tc)
    assert (c.rule == "unknown") == (cls == "other" and tc == "unknown")


def test_verdict_from_the_dominant_gemm_kernel():
    ev = from_kernel_names({"ampere_fp16_s16816gemm_fp16_128x128_nn": 90.0, "splitKreduce_kernel": 10.0})
    assert ev.tensor_cores == "yes" and "90%" in ev.evidence and "s16816gemm" in ev.evidence
    ev = from_kernel_names({"ampere_sgemm_128x64_nn": 50.0})
    assert ev.tensor_cores == "no"
    assert from_kernel_names({}).tensor_cores == "unknown"
    assert from_kernel_names({"vectorized_elementwise_kernel": 5.0}).tensor_cores == "no"


def test_onednn_verdicts():
    assert from_onednn([("reorder", "jit:uni"), ("matmul", "brg_matmul:avx512_core_amx")]).tensor_cores == "yes"
    assert from_onednn([("convolution", "brg_conv_fwd:avx512_core")]).tensor_cores == "no"
    ev = from_onednn([])
    assert ev.tensor_cores == "unknown" and "not visible" in ev.evidence


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="PyTorch built without oneDNN")
def test_onednn_verbose_is_captured_for_a_real_convolution():
    # large enough for PyTorch to pick oneDNN (a 1x8x8x8 input goes to ATen's own kernel: no verbose line)
    x = torch.randn(2, 16, 14, 14).contiguous(memory_format=torch.channels_last)
    w = torch.randn(16, 16, 3, 3).contiguous(memory_format=torch.channels_last)
    impls = onednn_implementations(lambda: torch.nn.functional.conv2d(x, w, padding=1))
    assert any(kind == "convolution" and impl for kind, impl in impls)


@pytest.mark.parametrize(
    "op, cls",
    [
        ("aten::max_pool2d_with_indices", "elementwise"),  # pooling: element-wise, as in the kernel rules
        ("aten::max_pool2d_with_indices_backward", "elementwise"),
        ("aten::max", "reduction"),
        ("aten::_log_softmax_backward_data", "reduction"),
        ("aten::threshold_backward", "elementwise"),  # not a copy (aten::t / aten::to)
        ("aten::mkldnn_convolution", "gemm"),
        ("aten::native_batch_norm_backward", "norm"),
    ],
)
def test_operator_rules(op, cls):
    from microbench.trace.classify import classify_operator

    assert classify_operator(op).cls == cls


@pytest.mark.parametrize(
    "impl, tc",
    [
        ("brg_matmul:avx10_1_512_amx", "yes"),  # oneDNN 3.5+: bf16 on AMX
        ("brg_matmul:avx10_1_512", "yes"),  # oneDNN 3.5+: fp16 on AVX512-FP16 (the former avx512_core_fp16)
        ("brg_matmul:avx512_core_fp16", "yes"),
        ("brg_matmul:avx512_core", "no"),  # fp32 on vector FMA
    ],
)
def test_onednn_avx10_names(impl, tc):
    assert from_onednn([("matmul", impl)]).tensor_cores == tc


def test_a_structural_verdict_says_it_is_inferred():
    """triton_kernels' MXFP4 matmul (the MI300 vLLM decode trace): no library grammar reads it, the FP8 / FP4
    element type in its name settles it, and the evidence says it is inferred."""
    ev = from_kernel_names({"_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1": 10.0})
    assert ev.tensor_cores == "yes" and "inferred from its structure" in ev.evidence and "structure[2]" in ev.evidence


def test_a_grammar_verdict_names_what_the_name_says():
    """cuBLAS's FFMA GEMM (a public H100 export): the xmma grammar reads its instruction word."""
    ev = from_kernel_names(
        {
            "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_"
            "aligna4_alignc4_execute_kernel__5x_cublas": 10.0
        }
    )
    assert ev.tensor_cores == "no" and "xmma" in ev.evidence and "ffma" in ev.evidence
