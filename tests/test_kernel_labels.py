"""Kernel names in a terminal column: short, and two kernels never shown alike (core/kernel_names.py)."""

from __future__ import annotations

from microbench.core.kernel_names import ELLIPSIS, distinct_labels, kernel_label

ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)"
)
GELU = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >"
    "(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}, "
    "std::array<char*, 2ul>)"
)
TENSILE = "Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT{}_MI16x16x1_SN_LDSB0_AFC1_AFEM1_ASEM1_CLR1_CADS0_DTVA0"


def test_a_label_drops_the_qualifiers_and_the_parameter_list():
    assert kernel_label(ADD) == "vectorized_elementwise_kernel<4, CUDAFunctor_add<BFloat16>, array<char*, 3ul> >"
    assert (
        kernel_label(
            "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>"
            "(cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8::Params)"
        )
        == "Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>"
    )
    assert (
        kernel_label("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, 1>(float*)")
        == "CatArrayBatchedCopy<float, 1>"
    )
    assert kernel_label("attn_fwd") == "attn_fwd"


def test_look_alikes_cut_at_the_end_are_told_apart():
    """Cut at 48 characters from the end the two functors showed as one row; after the qualifiers go they differ
    early enough for a plain cut."""
    labels = distinct_labels([ADD, GELU], 48)
    assert len(set(labels)) == 2 and all(len(x) <= 48 for x in labels)
    assert "CUDAFunctor_ad" in labels[0] and "GeluCUDA" in labels[1]


def test_names_parting_past_the_width_show_where_they_part():
    names = [TENSILE.format(mt) for mt in ("16x16x128", "32x64x128", "16x16x256", "128x144x64")]
    labels = distinct_labels(names, 48)
    assert len(set(labels)) == 4 and all(len(x) <= 48 for x in labels)
    assert all(x.startswith("Cijk_Alik_") and ELLIPSIS in x for x in labels)
    for mt, x in zip(("16x16x128", "32x64x128", "16x16x256", "128x144x64"), labels):
        assert f"MT{mt}" in x  # one window for the group: every row shows its macro tile


def test_short_and_repeated_names_are_left_alone():
    assert distinct_labels(["attn_fwd", "attn_fwd", "gemm"], 48) == ["attn_fwd", "attn_fwd", "gemm"]
    # equal once the namespaces go: the full names tell them apart
    a, b = "void ns_one::k<float>(float*)", "void ns_two::k<float>(float*)"
    labels = distinct_labels([a, b], 10)
    assert len(set(labels)) == 2 and all(len(x) <= 10 for x in labels)


def test_a_kernel_name_of_any_length_is_labelled():
    """The qualifier rule starts only at a word's start: a 200,000-character identifier (a generated kernel's name)
    is labelled at once; with a rule that scanned from every position inside it to its end, this took most of an
    hour (20,000 characters: 23 s)."""
    from microbench.core.kernel_names import kernel_label

    long = "k" + "x" * 200_000
    assert kernel_label(f"void at::native::(anonymous namespace)::{long}<float>(int)") == f"{long}<float>"


def test_a_copy_keeps_its_direction_and_memory_kinds():
    from microbench.core.kernel_names import distinct_labels, kernel_label

    assert kernel_label("Memcpy HtoD (Pageable -> Device)") == "Memcpy HtoD (Pageable -> Device)"
    assert distinct_labels(["Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pinned -> Device)"], 48) == [
        "Memcpy HtoD (Pageable -> Device)",
        "Memcpy HtoD (Pinned -> Device)",
    ]
