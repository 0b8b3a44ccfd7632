"""The datasheet table is matched on the device name by the documented token rule (bench.toml,
[devices]); real device-name strings as torch and the profiler report them."""

from __future__ import annotations

import pytest

from microbench.core.config import load_config
from microbench.core.datasheet import facts_from_properties, match_datasheet


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
        # names seen on public captures that matched nothing before (A100 forms, GeForce, A40), and
        # the rest of the data-center and workstation parts since Volta, as nvidia-smi / torch print them
        ("NVIDIA A100-SXM4-40GB", "a100_sxm4_40gb"),
        ("NVIDIA A100 80GB PCIe", "a100_pcie_80gb"),
        ("NVIDIA A100-PCIE-40GB", "a100_pcie_40gb"),
        ("NVIDIA GeForce RTX 3090", "rtx_3090"),
        ("NVIDIA GeForce RTX 3090 Ti", "rtx_3090_ti"),
        ("NVIDIA A40", "a40"),
        ("NVIDIA A30", "a30"),
        ("NVIDIA A2", "a2"),
        ("NVIDIA A16", "a16"),
        ("Tesla V100S-PCIE-32GB", "v100s_pcie"),
        ("NVIDIA L40", "l40"),
        ("NVIDIA H20", "h20"),
        ("NVIDIA B300", "b300"),
        ("NVIDIA GB200", "gb200"),
        ("NVIDIA GeForce RTX 4090", "rtx_4090"),
        ("NVIDIA GeForce RTX 4080", "rtx_4080"),
        ("NVIDIA GeForce RTX 5090", "rtx_5090"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "rtx_pro_6000_blackwell"),
        ("NVIDIA TITAN RTX", "titan_rtx"),
        ("Quadro RTX 8000", "quadro_rtx_8000"),
        ("NVIDIA RTX A5000", "rtx_a5000"),
        ("AMD Instinct MI100", "mi100"),
        ("AMD Radeon PRO W7900", "radeon_pro_w7900"),
    ],
)
def test_known_names_match_one_entry(devices, name, key):
    entry, note = match_datasheet(name, devices)
    assert entry is not None and entry.key == key, note
    assert "matched" in note


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA H800 PCIe",  # no entry: by its name alone, nothing (its properties: test below)
        "NVIDIA GH200 480GB",  # token GH200, not H200; two entries (96 / 144 GB) differ in memory only
        "NVIDIA A10G",  # AWS's part: NVIDIA publishes no datasheet for it
        "NVIDIA GeForce RTX 4070",
        "NVIDIA GeForce RTX 4090 D",  # the China part, 114 SMs: not the RTX 4090
        "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",  # 300 W, slower: excluded
        "",
    ],
)
def test_unknown_names_fall_back_with_a_note(devices, name):
    entry, note = match_datasheet(name, devices)
    assert entry is None or entry.level == "chip", note
    if entry is None:
        assert note.startswith(("unknown device", "ambiguous device")) and "measured ceilings only" in note


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


# --- chips by their properties. deviceProperties as the public captures record them (Kineto's keys).
GIB = 2**30


def _props(name, cc=None, sms=None, mem_bytes=None, arch=None):
    p = {"name": name}
    if cc:
        p["computeMajor"], p["computeMinor"] = (int(x) for x in cc.split("."))
    if sms:
        p["numSms"] = sms
    if mem_bytes:
        p["totalGlobalMem"] = mem_bytes
    if arch:
        p["gcnArchName"] = arch
    return p


def _resolve(devices, props):
    return match_datasheet(props["name"], devices, facts_from_properties(props))


def test_a_nameless_mi300x_is_known_by_its_properties(devices):
    # tests/data/traces/mi300_vllm_decode_graph_execution.json.gz's deviceProperties: empty name, 9.4, 304 CUs
    entry, note = _resolve(devices, _props("", "9.4", 304, 206141652992))
    assert entry is not None and entry.key == "mi300x" and entry.level == "sku", note
    assert "by properties alone" in note


def test_a100_forms_by_name_and_properties(devices):
    entry, _ = _resolve(devices, _props("NVIDIA A100 80GB PCIe", "8.0", 108, 85_100_000_000))
    assert entry.key == "a100_pcie_80gb" and entry.memory_tbs == 1.935
    # a name no entry spells (no SXM4 token): the model token and the properties give GA100's compute peaks,
    # and the bandwidth (1.935 or 2.039 TB/s) is said unknown rather than picked
    entry, note = _resolve(devices, _props("NVIDIA A100-SXM-80GB", "8.0", 108, 85_100_000_000))
    assert entry.level == "chip" and entry.peaks_tflops["tf32"] == 156.0 and entry.memory_tbs is None
    assert "compute peaks of GA100" in note and "memory bandwidth of this SKU unknown" in note
    # the A100-PG509-200 of the shared traces stays its SKU (108 SMs, 42.3 GB)
    entry, _ = _resolve(devices, _props("NVIDIA A100-PG509-200", "8.0", 108, 42297524224))
    assert entry.key == "a100_pg509_200" and entry.level == "sku"


def test_a_mig_slice_gets_no_whole_chip_peaks(devices):
    entry, note = _resolve(devices, _props("NVIDIA A100-SXM4-40GB", "8.0", 14, 5 * GIB))
    assert entry is None and "MIG" in note and "a100_sxm4_40gb" in note


def test_a_new_name_with_known_properties_gets_the_chip_not_the_sku(devices):
    # H800 PCIe: no entry; cc 9.0, 114 SMs, 80 GB is the H100 PCIe's chip: its compute, no bandwidth claim
    entry, note = _resolve(devices, _props("NVIDIA H800 PCIe", "9.0", 114, 85_000_000_000))
    assert entry.level == "chip" and entry.peaks_tflops["bf16"] == 756.0 and entry.memory_tbs is None
    assert "no entry names 'NVIDIA H800 PCIe'" in note


def test_memory_settles_the_gh200(devices):
    entry, _ = _resolve(devices, _props("NVIDIA GH200 480GB", "9.0", 132, int(94.5 * GIB)))
    assert entry.key == "gh200_96gb" and entry.memory_tbs == 4.0
    entry, _ = _resolve(devices, _props("NVIDIA GH200 480GB", "9.0", 132, int(142.0 * GIB)))
    assert entry.key == "gh200_144gb" and entry.memory_tbs == 4.9


def test_rocm_shared_name_is_settled_by_the_cu_count(devices):
    name = "AMD Instinct MI250X/MI250"
    assert (
        _resolve(devices, _props(name, sms=110, mem_bytes=64 * GIB, arch="gfx90a:sramecc+:xnack-"))[0].key == "mi250x"
    )
    assert _resolve(devices, _props(name, sms=104, mem_bytes=64 * GIB, arch="gfx90a:sramecc+:xnack-"))[0].key == "mi250"


def test_properties_that_do_not_part_two_chips_give_no_peaks(devices):
    # MI350X and MI355X: gfx950, 256 CUs, 288 GB, other clocks: a generic name cannot tell them apart
    entry, note = _resolve(devices, _props("AMD Radeon Graphics", sms=256, mem_bytes=int(287.6 * GIB), arch="gfx950"))
    assert entry is None and "mi350x" in note and "mi355x" in note and "measured ceilings only" in note


def test_an_unknown_device_names_its_architecture(devices):
    entry, note = _resolve(devices, _props("NVIDIA GeForce RTX 4070", "8.9", 46, int(11.7 * GIB)))
    assert entry is None and "Ada Lovelace" in note and "46 SMs" in note


def test_every_entry_is_found_by_its_own_name_and_cites_a_source(devices):
    for d in devices:
        # every entry states its architecture, except the MI300X VF, found by its name only (see bench.toml)
        assert d.source and d.chip and (d.cc or d.arch or d.key == "mi300x_vf"), d.key
        entry, note = match_datasheet(d.name, devices)
        # GH200's two entries differ in memory only: by name alone, the chip
        assert entry is not None and (entry.key == d.key or (entry.level == "chip" and d.key.startswith("gh200"))), note


def test_the_issue_list_is_covered(devices):
    keys = {d.key for d in devices}
    assert {
        "v100_sxm2", "v100_pcie", "v100s_pcie", "v100_sxm3", "v100_dgxs", "t4", "a2", "a10", "a16", "a30", "a40",
        "a100_sxm4_40gb", "a100_sxm4_80gb", "a100_pcie_40gb", "a100_pcie_80gb", "l4", "l40", "l40s",
        "h100_sxm5", "h100_pcie", "h100_nvl", "h800", "h20", "h200_sxm", "h200_nvl", "b200", "b300", "gb200",
        "rtx_2080_ti", "titan_rtx", "quadro_rtx_6000", "rtx_3090", "rtx_a6000", "rtx_4090", "rtx_6000_ada",
        "rtx_5090", "rtx_pro_6000_blackwell",
        "mi100", "mi210", "mi250", "mi250x", "mi300a", "mi300x", "mi325x", "mi350x", "mi355x", "radeon_pro_w7900",
    } <= keys  # fmt: skip


def test_a_memory_size_no_datasheet_lists_does_not_refuse_a_named_part(devices):
    # PyTorch's own profile-analysis test (test/inductor/test_analysis.py, example_profile): "NVIDIA H100", 132 SMs,
    # 101,997,215,744 bytes (95 GiB, a size the H100 datasheet does not list): still the H100 SXM
    entry, note = _resolve(devices, _props("NVIDIA H100", "9.0", 132, 101997215744))
    assert entry is not None and entry.key == "h100_sxm5", note


def test_a_generically_named_mi250_die_gets_cdna2_peaks_and_its_dtype_findings_run(cfg):
    """HTA's MI250 toy training trace (tests/data/traces, MIT): "AMD Radeon Graphics", 9.0, 104 CUs, 64 GB. The MI210
    and one MI250 die share those properties and their peaks: the chip's peaks, and AMP is checked."""
    from microbench.findings.analysis import TraceAnalysis

    from .conftest import TRACES

    ta = TraceAnalysis.open(TRACES / "mi250_minitoy_train_ROCm6_2_kineto.json.gz", cfg)
    doc = ta.document()
    ds = doc["devices"][0]["datasheet"]
    assert ds["level"] == "chip" and ds["peaks_tflops"]["fp16"] == 181.0 and ds["memory_tbs"] == 1.6, ds
    assert "mi210" in ds["note"] and "mi250" in ds["note"]
    assert "amp" not in {n["id"] for n in doc["findings_not_checked"]}
