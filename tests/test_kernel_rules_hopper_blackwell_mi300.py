"""Kernel rules for Hopper, Blackwell and MI300 (microbench/data/kernel_rules.toml), each checked on real kernel
names: the names of tests/data/traces and tests/data/nsight are read from the files themselves; names from
Blackwell and newer library kernels, which no shared trace holds, are copied verbatim from public profiles
(each with where it was seen)."""
from __future__ import annotations

import gzip
import json
import sqlite3

import pytest

from microbench.timeline.classify import classify_kernel

from .conftest import SHARED, TRACES, needs_traces

NSYS = SHARED / "nsight" / "power_iteration.nsys.sqlite"


def _kernel_names(trace: str) -> set[str]:
    with gzip.open(TRACES / trace, "rt") as f:
        return {e["name"] for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel"}


def _one(names: set[str], part: str) -> str:
    hits = sorted(n for n in names if part in n)
    assert hits, f"no kernel name containing {part!r} in the trace"
    return hits[0]


@needs_traces
@pytest.mark.parametrize("trace,part,cls,tc", [
    # H100 bert-small (TraceLens): Ampere CUTLASS WMMA/mma.sync kernels, a Hopper cuBLAS xmma, FlashAttention 2
    ("h100_bert_small.json.gz", "cutlass_80_wmma_tensorop_bf16_s161616gemm", "tc_gemm", "yes"),
    ("h100_bert_small.json.gz", "cutlass_80_tensorop_bf16_s16816gemm_relu", "tc_gemm", "yes"),
    ("h100_bert_small.json.gz", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1", "tc_gemm", "yes"),
    ("h100_bert_small.json.gz", "pytorch_flash::flash_fwd_kernel", "tc_gemm", "yes"),
    ("h100_bert_small.json.gz", "vectorized_layer_norm_kernel", "norm", "no"),
    # MI300X VF bert-small: hipBLASLt MFMA kernels and ROCm's Triton flash attention (was "other, unknown")
    ("mi300_bert_small.json.gz", "Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x128_MI16x16x1", "tc_gemm", "yes"),
    ("mi300_bert_small.json.gz", "Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT128x144x64_MI16x16x1", "tc_gemm", "yes"),
    ("mi300_bert_small.json.gz", "attn_fwd", "tc_gemm", "yes"),
])
def test_rules_on_shared_trace_names(trace, part, cls, tc):
    name = _one(_kernel_names(trace), part)
    c = classify_kernel(name)
    assert (c.cls, c.tensor_cores) == (cls, tc), (name, c.rule)


@pytest.mark.skipif(not NSYS.is_file(), reason="tests/data/nsight is not in this checkout")
def test_rules_on_nsys_kernel_names():
    """The T4 power-iteration export: fp64 cuBLAS GEMV and its split-K reduction, CUB reductions, CuPy
    element-wise kernels: none of them on Tensor Cores, and no name left unknown."""
    con = sqlite3.connect(f"file:{NSYS}?mode=ro", uri=True)
    names = [r[0] for r in con.execute("SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                                       "JOIN StringIds s ON s.id = k.demangledName")]
    got = {n: classify_kernel(n) for n in names}
    assert len(got) == 10
    assert all(c.tensor_cores == "no" for c in got.values()), {n: c.rule for n, c in got.items()}
    by_cls = {n.split("<")[0].split("(")[0]: c.cls for n, c in got.items()}
    assert by_cls["void gemv2T_kernel_val"] == "gemm"
    assert by_cls["void cublasLt::splitKreduce_kernel"] == "reduction"
    assert by_cls["cupy_multiply__float64_float64_float64"] == "elementwise"


# Names copied verbatim from public profiles (Nsight Systems summaries, torch.profiler tables, kernel
# listings in issues and docs) of Hopper and Blackwell machines and MI300 / MI355 runs.
@pytest.mark.parametrize("name,cls,tc", [
    # Blackwell block-scaled GEMMs: CUTLASS 3 MXFP8 (sm120 in a PyTorch trace), cuBLASLt NVFP4 (B200 vLLM profile)
    ("cutlass3x_sm120_bstensorop_s16832gemm_block_scaled_ue8m0xe4m3_ue8m0xe4m3_f32_bf16_bf16_128x128x128_1x1x1_0_tnn"
     "_align16_q_bias_bf16_relu", "tc_gemm", "yes"),
    ("nvjet_sm100_ootst_128x128_256x7_4x1_2cta_v_bx_Avec16UE4M3_Bvec16UE4M3_", "tc_gemm", "yes"),
    # cuBLASLt nvjet on Hopper and Blackwell
    ("nvjet_tst_64x32_64x16_2x2_2cta_h_bz_splitK_TNT", "tc_gemm", "yes"),
    ("nvjet_tss_64x8_64x16_2x1_v_bz_splitK_TNT", "tc_gemm", "yes"),
    ("nvjet_sm100_tst_128x256_64x4_1x2_h_bz_TNT", "tc_gemm", "yes"),
    # DeepGEMM FP8 (wgmma)
    ("void deep_gemm::sm90_fp8_gemm_1d2d_impl<(cute::UMMA::Major)0, 0u, 4096u, 1024u, 1u, 256u, 128u, 128u, 128u, "
     "128u, 128u, 3u, 128u, 256u, 2u, true, 132u, (deep_gemm::GemmType)0>", "tc_gemm", "yes"),
    # cuDNN 9 engines: SDPA runtime fusion (wgmma on Hopper, sm100), implicit-GEMM convolution
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x", "tc_gemm", "yes"),
    ("cudnn_generated_fort_native_sdpa_sm100_flash_fprop_f16", "tc_gemm", "yes"),
    ("cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_3_64x64x128_4x1x1_kernel0_0", "tc_gemm", "yes"),
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1"
     "_execute_segment_k_off_kernel__5x_cudnn", "tc_gemm", "yes"),
    # FlashAttention 3 (Hopper), 4 (CuTe DSL, Blackwell) and their non-matrix helpers
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90"
     "<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, cute::C<176>, cute::C<128> >, "
     "128, cutlass::bfloat16_t, float, cutlass::arch::Sm90", "tc_gemm", "yes"),
    ("kernel_cutlass_kernel_flash_attncuteflash_fwd_sm100FlashAttentionForwardSm100_object_at__tensor0000o11101213"
     "_tensor0000o11101213_tensor0000o10111213_tensor0000o11101213_None_None_None_Non_0", "tc_gemm", "yes"),
    ("void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<(int)128, (int)64, (int)128, (int)4, "
     "(bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)128, (int)64, (int)128, ", "reduction", "no"),
    ("flash::FlashAttnFwdCombine", "reduction", "no"),
    ("flash::prepare_varlen_num_blocks", "elementwise", "no"),
    # TensorRT-LLM FMHA on Blackwell
    ("fmhaSm100aKernel_QE4m3KvE2m1OE4m3H128PagedKvDenseP16VarSeqQ8Kv128PersistentSwapsAbForGen", "tc_gemm", "yes"),
    # a CuTe DSL RMSNorm: `tensorptr...` in its name is an argument encoding, not a Tensor Core
    ("kernel_cutlass_kernel_flashinfernormkernelsrmsnormRMSNormKernel_object_at__tensorptrbf16gmemalign128oi64409640961"
     "_tensorptrbf16gmemalign16o40961_tensorptrbf1", "norm", "no"),
    # AMD: Triton attention (vLLM), HIP paged attention with MFMA, CK XDL (MFMA) GEMMs, Tensile vector-FMA GEMMs
    ("kernel_unified_attention_2d", "tc_gemm", "yes"),
    ("_ZN5aiter33paged_attention_ll4mi_QKV_mfma16_kernelI13__hip_bfloat16EEvv", "tc_gemm", "yes"),
    ("paged_attention_ll4mi_reduce_kernel", "reduction", "no"),
    ("void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemmMultiD_ABScale_xdl_cshuffle_v3<ck::tensor_layout::gemm::"
     "RowMajor, c", "tc_gemm", "yes"),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x128x64_MI16x16x1_SN_LDSB1_GRPM1_GSU1_ISA950_K1_WG32_8_1",
     "tc_gemm", "yes"),
    ("Cijk_Ailk_Bljk_SB_MT128x64x8_SN_1LDSB0_APM1_ABV0_ACED0_AF0EM1_AF1EM1_AMAS3_ASAE01_ASCE01_ASEM1_AAC0_BL1_DTL0_DVO0"
     "_EPS1_FL0_GRVW4_GSU1_GSUAMB_GLS0_ISA1030_IU1_K1_KLA_LBSPP0_LPA0_LPB0_LDL1_LRVW4_FMA_MIAV0_M", "gemm", "no"),
    # quantization around low-precision GEMMs
    ("_ZN5aiter37dynamic_per_group_scaled_quant_kernelIDhDB8_Li32EEEvPT0_PfPKT_PKfiliibP", "elementwise", "no"),
    ("quantize_with_block_size", "elementwise", "no"),
])
def test_rules_on_published_names(name, cls, tc):
    c = classify_kernel(name)
    assert (c.cls, c.tensor_cores) == (cls, tc), c.rule
