"""The kernel rules (microbench/data/kernel_rules.toml), all in one place, on real kernel names: every [[kernel]]
rule against the names of tests/data/kernel_names.toml (which says where each was seen; each rule the first
match of at least one of them, so no rule stands untested), the names read from the real traces and exports of
tests/data, names of Hopper, Blackwell and MI300 library kernels copied verbatim from public profiles (each with
where it was seen), and the signature part of a name."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pytest
import tomllib

from microbench.trace.classify import _first, _load, _structure, classify_kernel, kernel_signature_name

from .conftest import NSYS, TRACES, needs_traces

NAMES = tomllib.loads((Path(__file__).parent / "data" / "kernel_names.toml").read_text())["name"]


@pytest.mark.parametrize("entry", NAMES, ids=lambda e: kernel_signature_name(e["name"])[:60])
def test_real_name_gets_its_class_and_verdict(entry):
    c = classify_kernel(entry["name"])
    assert (c.cls, c.tensor_cores) == (entry["class"], entry["tensor_cores"]), c.rule
    # the evidence layer: a name rule, or the name's structure (an inference, labelled so)
    assert c.basis == entry.get("basis", "unknown" if c.tensor_cores == "unknown" else "name rule"), c.rule


# Rules that came without a real kernel name (those added with the Nsight readers; named by the start of their
# pattern): a real name for each is wanted, and a new rule is not to join this list.
NO_REAL_NAME_YET = ("fmha_cutlass[FB]_f32", "^cupy_(sum|prod|")


def _flat(name: str):
    """The flat rules and structure alone, as they decide a name no naming grammar settles (the fallback)."""
    sig = kernel_signature_name(name)
    c = _first("kernel", sig)
    return _structure(c, sig) if c.tensor_cores == "unknown" else c


def test_every_kernel_rule_is_the_first_match_of_a_real_name():
    # among the flat rules (the fallback behind the grammars of kernel_grammars.toml): none dead or shadowed
    hit = {_flat(e["name"]).rule.split(" ")[0] for e in NAMES}
    rules = [r for r in _load()[1]["kernel"] if not r.pattern.pattern.startswith(NO_REAL_NAME_YET)]
    assert len(rules) == len(_load()[1]["kernel"]) - len(NO_REAL_NAME_YET)
    untested = [f"{r.rule_id} /{r.pattern.pattern}/" for r in rules if r.rule_id not in hit]
    assert not untested, f"rules with no real name in tests/data/kernel_names.toml: {untested}"


def test_strict_fp32_nvjet_is_not_tensor_core_work_by_name():
    """The issue's case: cuBLAS's nvjet on fp32 without tf32 in the name is not counted as Tensor Core
    work; with tf32 (or on 16-bit types) it is."""
    from microbench.roofline.evidence import from_kernel_names

    assert from_kernel_names({"nvjet_sss_128x256_TNT": 1.0}).tensor_cores == "unknown"
    assert from_kernel_names({"nvjet_sm100_sss_64x32_64x16_2x1_v_bz_TNT": 1.0}).tensor_cores == "unknown"
    assert from_kernel_names({"nvjet_sss_tf32_128x256_TNT": 1.0}).tensor_cores == "yes"
    assert from_kernel_names({"nvjet_tst_128x256_64x6_2x1_2cta_v_bz_TNT": 1.0}).tensor_cores == "yes"


# Real names of kernels that are never matrix work: every entry of kernel_names.toml of a non-matrix class,
# and these (where each was seen: tests/data/kernel_names.toml's entries, or the comment).
NOT_MATRIX = [e["name"] for e in NAMES if e["class"] not in ("gemm", "tc_gemm", "other")] + [
    "SubTensorOpWithScalar2d",  # MIOpen: SubTensorOpWithScalar<N>d for N = 1..5 (MIOpenSubTensorOpWithScalarKernel.cl)
    "SubTensorOpWithSubTensor4d",
    "flash_bwd_convert_dq_kernel",  # FlashAttention 2's fp32 -> bf16 gradient conversion
    "flash_bwd_dot_do_o_kernel",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >",
]


def test_no_tensor_core_rule_can_match_an_element_wise_kernel():
    """A Tensor Core pattern that can match an element-wise kernel is a bug, even where an earlier rule
    happens to catch that name first: every `tensor_cores = yes` rule against every non-matrix name."""
    tc_rules = [r for r in _load()[1]["kernel"] if r.tensor_cores == "yes"]
    assert len(tc_rules) >= 8
    hits = [
        (r.rule_id, r.pattern.pattern[:40], n[:60])
        for r in tc_rules
        for n in NOT_MATRIX
        if r.pattern.search(kernel_signature_name(n))
    ]
    assert hits == []


def test_communication_kernels_are_comm():
    from microbench.trace.classify import is_comm

    comm = [e["name"] for e in NAMES if e["class"] == "comm"]
    assert len(comm) >= 10 and all(is_comm(n) for n in comm)
    assert not any(is_comm(n) for n in NOT_MATRIX if n not in comm)


def test_every_structure_rule_settles_a_real_name():
    """Each [[structure]] rule (the name's instruction family or element type: an inferred verdict) is what
    settles at least one real name of kernel_names.toml, and its verdict says it is inferred."""
    got = [_flat(e["name"]) for e in NAMES]
    hit = {c.rule.split(" + ")[1].split(" ")[0] for c in got if c.basis == "structure (inferred)"}
    assert hit == {r.rule_id for r in _load()[1]["structure"]}
    assert all(c.note.startswith("inferred") for c in got if c.basis == "structure (inferred)")


def test_structure_never_calls_element_wise_routing_copy_or_cast_work_tensor_core():
    """No element-wise, routing, copy or cast kernel called Tensor Core work, whatever the
    structure rules would read in its name (fp8 in a quantize kernel, `bf16` in a cast)."""
    # and an FP8 / FP4 GEMM on CUDA cores is no Tensor Core work, though the FP8 structure rule would read one
    assert (
        classify_kernel(
            "void tensorrt_llm::kernels::cudaCoreGemm<__nv_fp8_e4m3, __nv_bfloat16, 1, 2, 128>"
        ).tensor_cores
        == "no"
    )
    casts = [
        ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda, c10::Float8_e4m3fn>"),
        "fp8_quantize_kernel",
        "_combined_routing_memset",
    ]
    for n in NOT_MATRIX + casts:
        assert classify_kernel(n).tensor_cores == "no", (n, classify_kernel(n).rule)


# --- names read from the real traces and exports of tests/data ----------------------------------------------


def _kernel_names(trace: str) -> set[str]:
    with gzip.open(TRACES / trace, "rt") as f:
        return {e["name"] for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel"}


def _one(names: set[str], part: str) -> str:
    hits = sorted(n for n in names if part in n)
    assert hits, f"no kernel name containing {part!r} in the trace"
    return hits[0]


@needs_traces
@pytest.mark.parametrize(
    "trace,part,cls,tc",
    [
        # H100 bert-small (TraceLens): Ampere CUTLASS WMMA/mma.sync kernels, a Hopper cuBLAS xmma, FlashAttention 2
        ("h100_bert_small.json.gz", "cutlass_80_wmma_tensorop_bf16_s161616gemm", "tc_gemm", "yes"),
        ("h100_bert_small.json.gz", "cutlass_80_tensorop_bf16_s16816gemm_relu", "tc_gemm", "yes"),
        (
            "h100_bert_small.json.gz",
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1",
            "tc_gemm",
            "yes",
        ),
        ("h100_bert_small.json.gz", "pytorch_flash::flash_fwd_kernel", "tc_gemm", "yes"),
        ("h100_bert_small.json.gz", "vectorized_layer_norm_kernel", "norm", "no"),
        # MI300X VF bert-small: hipBLASLt MFMA kernels and ROCm's Triton flash attention (was "other, unknown")
        (
            "mi300_bert_small.json.gz",
            "Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x128_MI16x16x1",
            "tc_gemm",
            "yes",
        ),
        (
            "mi300_bert_small.json.gz",
            "Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT128x144x64_MI16x16x1",
            "tc_gemm",
            "yes",
        ),
        ("mi300_bert_small.json.gz", "attn_fwd", "tc_gemm", "yes"),
    ],
)
def test_rules_on_shared_trace_names(trace, part, cls, tc):
    name = _one(_kernel_names(trace), part)
    c = classify_kernel(name)
    assert (c.cls, c.tensor_cores) == (cls, tc), (name, c.rule)


@pytest.mark.skipif(not NSYS.is_file(), reason="tests/data/nsight is not in this checkout")
def test_rules_on_nsys_kernel_names():
    """The T4 power-iteration export: fp64 cuBLAS GEMV and its split-K reduction, CUB reductions, CuPy
    element-wise kernels: none of them on Tensor Cores, and no name left unknown."""
    con = sqlite3.connect(f"file:{NSYS}?mode=ro", uri=True)
    names = [
        r[0]
        for r in con.execute(
            "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName"
        )
    ]
    got = {n: classify_kernel(n) for n in names}
    assert len(got) == 10
    assert all(c.tensor_cores == "no" for c in got.values()), {n: c.rule for n, c in got.items()}
    by_cls = {n.split("<")[0].split("(")[0]: c.cls for n, c in got.items()}
    assert by_cls["void gemv2T_kernel_val"] == "gemm"
    assert by_cls["void cublasLt::splitKreduce_kernel"] == "reduction"
    assert by_cls["cupy_multiply__float64_float64_float64"] == "elementwise"


# Names copied verbatim from public profiles (Nsight Systems summaries, torch.profiler tables, kernel
# listings in issues and docs) of Hopper and Blackwell machines and MI300 / MI355 runs.
@pytest.mark.parametrize(
    "name,cls,tc",
    [
        # Blackwell block-scaled GEMMs: CUTLASS 3 MXFP8 (sm120 in a PyTorch trace), cuBLASLt NVFP4 (B200 vLLM profile)
        (
            "cutlass3x_sm120_bstensorop_s16832gemm_block_scaled_ue8m0xe4m3_ue8m0xe4m3_f32_bf16_bf16_128x128x128_1x1x1_0_tnn"
            "_align16_q_bias_bf16_relu",
            "tc_gemm",
            "yes",
        ),
        ("nvjet_sm100_ootst_128x128_256x7_4x1_2cta_v_bx_Avec16UE4M3_Bvec16UE4M3_", "tc_gemm", "yes"),
        # cuBLASLt nvjet on Hopper and Blackwell
        ("nvjet_tst_64x32_64x16_2x2_2cta_h_bz_splitK_TNT", "tc_gemm", "yes"),
        ("nvjet_tss_64x8_64x16_2x1_v_bz_splitK_TNT", "tc_gemm", "yes"),
        ("nvjet_sm100_tst_128x256_64x4_1x2_h_bz_TNT", "tc_gemm", "yes"),
        # DeepGEMM FP8 (wgmma)
        (
            "void deep_gemm::sm90_fp8_gemm_1d2d_impl<(cute::UMMA::Major)0, 0u, 4096u, 1024u, 1u, 256u, 128u, 128u, 128u, "
            "128u, 128u, 3u, 128u, 256u, 2u, true, 132u, (deep_gemm::GemmType)0>",
            "tc_gemm",
            "yes",
        ),
        # cuDNN 9 engines: SDPA runtime fusion (wgmma on Hopper, sm100), implicit-GEMM convolution
        ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x", "tc_gemm", "yes"),
        ("cudnn_generated_fort_native_sdpa_sm100_flash_fprop_f16", "tc_gemm", "yes"),
        (
            "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_3_64x64x128_4x1x1_kernel0_0",
            "tc_gemm",
            "yes",
        ),
        (
            "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1"
            "_execute_segment_k_off_kernel__5x_cudnn",
            "tc_gemm",
            "yes",
        ),
        # FlashAttention 3 (Hopper), 4 (CuTe DSL, Blackwell) and their non-matrix helpers
        (
            "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90"
            "<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, cute::C<176>, cute::C<128> >, "
            "128, cutlass::bfloat16_t, float, cutlass::arch::Sm90",
            "tc_gemm",
            "yes",
        ),
        (
            "kernel_cutlass_kernel_flash_attncuteflash_fwd_sm100FlashAttentionForwardSm100_object_at__tensor0000o11101213"
            "_tensor0000o11101213_tensor0000o10111213_tensor0000o11101213_None_None_None_Non_0",
            "tc_gemm",
            "yes",
        ),
        (
            "void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<(int)128, (int)64, (int)128, (int)4, "
            "(bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)128, (int)64, (int)128, ",
            "reduction",
            "no",
        ),
        ("flash::FlashAttnFwdCombine", "reduction", "no"),
        ("flash::prepare_varlen_num_blocks", "elementwise", "no"),
        # TensorRT-LLM FMHA on Blackwell
        ("fmhaSm100aKernel_QE4m3KvE2m1OE4m3H128PagedKvDenseP16VarSeqQ8Kv128PersistentSwapsAbForGen", "tc_gemm", "yes"),
        # a CuTe DSL RMSNorm: `tensorptr...` in its name is an argument encoding, not a Tensor Core
        (
            "kernel_cutlass_kernel_flashinfernormkernelsrmsnormRMSNormKernel_object_at__tensorptrbf16gmemalign128oi64409640961"
            "_tensorptrbf16gmemalign16o40961_tensorptrbf1",
            "norm",
            "no",
        ),
        # AMD: Triton attention (vLLM), HIP paged attention with MFMA, CK XDL (MFMA) GEMMs, Tensile vector-FMA GEMMs
        ("kernel_unified_attention_2d", "tc_gemm", "yes"),
        ("sage_fwd", "tc_gemm", "yes"),  # aiter's Triton SageAttention (a TraceLens xDiT Flux.1 MI300X profile)
        ("sage_fwd_mxfp4", "tc_gemm", "yes"),
        ("_ZN5aiter33paged_attention_ll4mi_QKV_mfma16_kernelI13__hip_bfloat16EEvv", "tc_gemm", "yes"),
        ("paged_attention_ll4mi_reduce_kernel", "reduction", "no"),
        (
            "void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemmMultiD_ABScale_xdl_cshuffle_v3<ck::tensor_layout::gemm::"
            "RowMajor, c",
            "tc_gemm",
            "yes",
        ),
        (
            "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x128x64_MI16x16x1_SN_LDSB1_GRPM1_GSU1_ISA950_K1_WG32_8_1",
            "tc_gemm",
            "yes",
        ),
        (
            "Cijk_Ailk_Bljk_SB_MT128x64x8_SN_1LDSB0_APM1_ABV0_ACED0_AF0EM1_AF1EM1_AMAS3_ASAE01_ASCE01_ASEM1_AAC0_BL1_DTL0_DVO0"
            "_EPS1_FL0_GRVW4_GSU1_GSUAMB_GLS0_ISA1030_IU1_K1_KLA_LBSPP0_LPA0_LPB0_LDL1_LRVW4_FMA_MIAV0_M",
            "gemm",
            "no",
        ),
        # quantization around low-precision GEMMs
        ("_ZN5aiter37dynamic_per_group_scaled_quant_kernelIDhDB8_Li32EEEvPT0_PfPKT_PKfiliibP", "elementwise", "no"),
        ("quantize_with_block_size", "elementwise", "no"),
    ],
)
def test_rules_on_published_names(name, cls, tc):
    c = classify_kernel(name)
    assert (c.cls, c.tensor_cores) == (cls, tc), c.rule


# --- names of the real traces, written out ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,cls,tc",
    [
        (
            "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1"
            "_g1_tensor16x8x8_alignc4_execute_kernel_cudnn",
            "tc_gemm",
            "yes",
        ),
        (
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x64_32x6_nt_align1>(cutlass_80_tensorop_s1688gemm_128x64"
            "_32x6_nt_align1::Params)",
            "tc_gemm",
            "yes",
        ),
        ("cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1", "gemm", "no"),
        ("cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1", "gemm", "no"),
        ("volta_sgemm_64x64_nt", "gemm", "no"),
        ("ampere_gcgemm_64x64_nt", "gemm", "no"),  # structure (inferred): cuBLAS's complex fp32 GEMM family
        (
            "void fft2d_c2r_32x32<float, false, false, 0u, false, false>(float*, float2 const*, int, int, int, int, int, int, "
            "int, int, int, float, float, cudnn::reduced_divisor, bool, float*, float*, int2, int, int)",
            "gemm",
            "no",
        ),
        (
            "void fbgemm_gpu::(anonymous namespace)::_compute_FP8_quantize_cuda_kernel<float>(float const*, float const*, "
            "int, int, unsigned char*, bool)",
            "elementwise",
            "no",
        ),
        (
            "void split_embedding_codegen_forward_unweighted_kernel<c10::Half, c10::Half, float, false, long, 2ul, 32ul>("
            "at::GenericPackedTensorAccessor<c10::Half, 1ul, at::RestrictPtrTraits, long>)",
            "embedding",
            "no",
        ),
        (
            "void epilogue::impl::globalKernel<float, float, float, true, true>(int, int, long, float*, cublasLtEpilogue_t)",
            "elementwise",
            "no",
        ),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "comm", "no"),
        ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "comm", "no"),
        ("Cijk_Ailk_Bljk_BBS_BH_MT256x256x64_MI32x32x8x1_SN_1LDSB1", "tc_gemm", "yes"),
        ("void compute_cuda_kernel<long>(long const*, long const*, long*, long, long)", "other", "unknown"),
    ],
)
def test_kernel_rules_on_trace_names(name, cls, tc):
    c = classify_kernel(name)
    assert (c.cls, c.tensor_cores) == (cls, tc), c.rule


@pytest.mark.parametrize(
    "name,expected",
    [
        ("void f<int>(float*, cudnn::reduced_divisor)", "void f<int>"),
        ("void at::native::(anonymous namespace)::k<float>(int)", "void at::native::(anonymous namespace)::k<float>"),
        (
            "void g<4, X::h(at::Tensor const&)::{lambda(float)#1}, Y>(int, Z)",
            "void g<4, X::h(at::Tensor const&)::{lambda(float)#1}, Y>",
        ),
        ("triton_poi_fused_add_0", "triton_poi_fused_add_0"),
        ("unbalanced)", "unbalanced)"),
    ],
)
def test_kernel_signature_name(name, expected):
    assert kernel_signature_name(name) == expected
