"""The datasheet table is matched on the device name by the documented token rule (bench.toml,
[devices]); real device-name strings as torch and the profiler report them."""

from __future__ import annotations

import pytest

from microbench.core.config import load_config
from microbench.core.datasheet import match_datasheet


@pytest.fixture(scope="module")
def devices():
    return load_config().devices


@pytest.mark.parametrize(
    "name,key",
    [
        ("Tesla V100-SXM2-32GB", "v100_sxm2"),  # torch / the V100 trace's deviceProperties
        ("Tesla V100-SXM2-16GB", "v100_sxm2"),
        ("Tesla T4", "t4"),
        ("NVIDIA A10", "a10"),
        ("NVIDIA A100-SXM4-80GB", "a100_sxm4_80gb"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA H100 80GB HBM3", "h100_sxm5"),
        ("NVIDIA H100 PCIe", "h100_pcie"),
        ("NVIDIA H200", "h200_sxm"),
        ("NVIDIA B200", "b200"),
        ("AMD Instinct MI250X", "mi250x"),
        ("AMD Instinct MI300X", "mi300x"),
        ("AMD Instinct MI300X VF", "mi300x_vf"),  # the MI300X bert trace's deviceProperties (Azure SR-IOV)
        ("NVIDIA A100-PG509-200", "a100_pg509_200"),  # the shared A100 traces' 40 GB board
        ("AMD Instinct MI325X", "mi325x"),
        ("AMD Instinct MI355X", "mi355x"),
        # vendor variants: the 2021-schema ResNet-50 sample's device (tests/data/traces), names as torch,
        # nvidia-smi and ROCm report them
        ("Tesla V100-DGXS-32GB", "v100_dgxs"),  # v100_resnet50_tbplugin_2021schema.json.gz's deviceProperties
        ("Tesla V100-SXM3-32GB", "v100_sxm3"),
        ("Tesla V100-PCIE-16GB", "v100_pcie"),
        ("NVIDIA H800", "h800"),
        ("NVIDIA H100 NVL", "h100_nvl"),
        ("NVIDIA H200 NVL", "h200_nvl"),
        ("NVIDIA GeForce RTX 2080 Ti", "rtx_2080_ti"),
        ("GeForce RTX 2080 Ti", "rtx_2080_ti"),
        ("NVIDIA RTX A6000", "rtx_a6000"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx_6000_ada"),
        ("AMD Instinct MI210", "mi210"),
        ("AMD Instinct MI250", "mi250"),
        ("AMD Instinct MI300A", "mi300a"),
        ("AMD Instinct MI350X", "mi350x"),
    ],
)
def test_known_names_match_one_entry(devices, name, key):
    entry, note = match_datasheet(name, devices)
    assert entry is not None and entry.key == key, note
    assert "matched" in note


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA A100-SXM4-40GB",  # other memory bandwidth than the 80GB entry
        "NVIDIA A100 80GB PCIe",
        "NVIDIA H20",  # NVIDIA publishes no datasheet for it: no entry
        "NVIDIA H800 PCIe",
        "Tesla V100S-PCIE-32GB",  # V100S is another part
        "NVIDIA GH200 480GB",  # token GH200, not H200
        "NVIDIA A10G",
        "NVIDIA L40",
        "NVIDIA GeForce RTX 4090",
        "",
    ],
)
def test_unknown_names_fall_back_with_a_note(devices, name):
    entry, note = match_datasheet(name, devices)
    assert entry is None
    assert note.startswith("unknown device") and "measured ceilings only" in note


def test_mi250x_mi250_name_is_ambiguous(devices):
    # ROCm reports this one name for both chips; their peaks differ (383 vs 362.1 TFLOP/s fp16).
    entry, note = match_datasheet("AMD Instinct MI250X/MI250", devices)
    assert entry is None
    assert note.startswith("ambiguous device") and "mi250x" in note and "mi250" in note


def test_table_covers_the_issue_list(devices):
    keys = {d.key for d in devices}
    assert {
        "v100_sxm2",
        "t4",
        "a10",
        "a100_sxm4_80gb",
        "l4",
        "l40s",
        "h100_sxm5",
        "h100_pcie",
        "h200_sxm",
        "b200",
        "mi250x",
        "mi300x",
        "mi300x_vf",
        "mi325x",
        "mi355x",
    } <= keys
    tiers = load_config().cpu_tiers
    assert tiers and tiers[-1].requires == ()  # the CPU estimate always has a last-resort tier


def test_amd_peaks_follow_cus_clock_and_flops_per_clock(devices):
    """The AMD entries' dense peaks agree with CUs x peak clock x FLOPs per CU per clock (AMD's own derivation)
    to the datasheets' rounding; the VF entry is the whole MI300X."""
    by_key = {d.key: d for d in devices}
    for key, cus, ghz, per_clock in (
        ("mi300x", 304, 2.1, {"fp64": 128, "fp32": 256, "bf16": 2048, "fp8": 4096}),
        ("mi325x", 304, 2.1, {"fp64": 128, "fp32": 256, "bf16": 2048, "fp8": 4096}),
        ("mi355x", 256, 2.4, {"fp64": 128, "fp32": 256, "bf16": 4096, "fp8": 8192}),
        ("mi350x", 256, 2.2, {"fp64": 128, "fp32": 256, "bf16": 4096, "fp8": 8192}),
        ("mi300a", 228, 2.1, {"fp64": 128, "fp32": 256, "bf16": 2048, "fp8": 4096}),
        ("mi210", 104, 1.7, {"fp64": 128, "fp32": 128, "bf16": 1024}),
    ):
        for prec, flops in per_clock.items():
            assert by_key[key].peaks_tflops[prec] == pytest.approx(cus * ghz * flops / 1000, rel=2e-3), (key, prec)
    assert by_key["mi300x_vf"].peaks_tflops == by_key["mi300x"].peaks_tflops
    assert "tf32" not in by_key["mi355x"].peaks_tflops  # CDNA 4 has no XF32


def _tier_of(flags: set[str]):
    return next(t for t in load_config().cpu_tiers if set(t.requires) <= flags)


def test_cpu_tiers_use_intels_bf16_amx_figure_and_have_avx512_fp16():
    """Intel's AMX figure for bf16 (and AMX-FP16) is 1024 FLOP per cycle per core (2048 is INT8's); Sapphire
    Rapids' flags (amx_bf16 and avx512_fp16, no amx_fp16: the fingerprint of docs/amd.md's Xeon) run fp16 on
    AVX512-FP16 at 128 FLOP per cycle (32 lanes x 2 FMA ports x 2)."""
    spr = {"avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8"}
    assert _tier_of(spr).flops_per_cycle == {"fp32": 64, "bf16": 1024, "fp16": 128}
    assert _tier_of(spr | {"amx_fp16"}).flops_per_cycle == {"fp32": 64, "bf16": 1024, "fp16": 1024}
    assert _tier_of(spr - {"avx512_fp16"}).flops_per_cycle["fp16"] == 64  # fp16 converts to fp32
    # this 2-core AMD EPYC (avx512_bf16, no avx512_fp16): bf16 dot products, fp16 at the fp32 rate
    assert _tier_of({"avx2", "fma", "avx512f", "avx512_bf16"}).flops_per_cycle == {"fp32": 64, "bf16": 128, "fp16": 64}
