"""Every [[kernel]] rule of microbench/data/kernel_rules.toml against real kernel names (tests/data/
kernel_names.toml says where each was seen): each name gets its class and Tensor Core verdict, and each
rule is the first match of at least one real name, so no rule stands untested."""
from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from microbench.timeline.classify import _load, classify_kernel, kernel_signature_name

NAMES = tomllib.loads((Path(__file__).parent / "data" / "kernel_names.toml").read_text())["name"]


@pytest.mark.parametrize("entry", NAMES, ids=lambda e: kernel_signature_name(e["name"])[:60])
def test_real_name_gets_its_class_and_verdict(entry):
    c = classify_kernel(entry["name"])
    assert (c.cls, c.tensor_cores) == (entry["class"], entry["tensor_cores"]), c.rule
    # the evidence layer: a name rule, or the name's structure (an inference, labelled so)
    assert c.basis == entry.get("basis", "unknown" if c.tensor_cores == "unknown" else "name rule"), c.rule


# Rules that came without a real kernel name (those added with the Nsight readers; named by the start of their pattern): a real name
# for each is wanted, and a new rule is not to join this list.
NO_REAL_NAME_YET = ("fmha_cutlass[FB]_f32", "^cupy_(sum|prod|")


def test_every_kernel_rule_is_the_first_match_of_a_real_name():
    hit = {classify_kernel(e["name"]).rule.split(" ")[0] for e in NAMES}
    rules = [r for r in _load()[1]["kernel"] if not r.pattern.pattern.startswith(NO_REAL_NAME_YET)]
    assert len(rules) == len(_load()[1]["kernel"]) - len(NO_REAL_NAME_YET)
    untested = [f"{r.rule_id} /{r.pattern.pattern}/" for r in rules if r.rule_id not in hit]
    assert not untested, f"rules with no real name in tests/data/kernel_names.toml: {untested}"


def test_strict_fp32_nvjet_is_not_tensor_core_work_by_name():
    """The issue's case: cuBLAS's nvjet on fp32 without tf32 in the name is not counted as Tensor Core
    work; with tf32 (or on 16-bit types) it is."""
    from microbench.harness.evidence import from_kernel_names

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
    hits = [(r.rule_id, r.pattern.pattern[:40], n[:60]) for r in tc_rules for n in NOT_MATRIX
            if r.pattern.search(kernel_signature_name(n))]
    assert hits == []


def test_communication_kernels_are_comm():
    from microbench.timeline.classify import is_comm

    comm = [e["name"] for e in NAMES if e["class"] == "comm"]
    assert len(comm) >= 10 and all(is_comm(n) for n in comm)
    assert not any(is_comm(n) for n in NOT_MATRIX if n not in comm)


def test_every_structure_rule_settles_a_real_name():
    """Each [[structure]] rule (the name's instruction family or element type: an inferred verdict) is what
    settles at least one real name of kernel_names.toml, and its verdict says it is inferred."""
    got = [classify_kernel(e["name"]) for e in NAMES]
    hit = {c.rule.split(" + ")[1].split(" ")[0] for c in got if c.basis == "structure (inferred)"}
    assert hit == {r.rule_id for r in _load()[1]["structure"]}
    assert all(c.note.startswith("inferred") for c in got if c.basis == "structure (inferred)")


def test_structure_never_calls_element_wise_routing_copy_or_cast_work_tensor_core():
    """Issue 29's target: no element-wise, routing, copy or cast kernel called Tensor Core work, whatever the
    structure rules would read in its name (fp8 in a quantize kernel, `bf16` in a cast)."""
    casts = ["void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda, "
             "c10::Float8_e4m3fn>", "fp8_quantize_kernel", "_combined_routing_memset"]
    for n in NOT_MATRIX + casts:
        assert classify_kernel(n).tensor_cores == "no", (n, classify_kernel(n).rule)
