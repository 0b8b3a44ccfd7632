"""The Tensor Core path of our Triton kernels, proven without a GPU: each configuration compiled ahead of
time for sm_80 and sm_90 (Triton's own compiler and ptxas), its SASS read with cuobjdump.

fp16 / bf16 GEMM and convolution: HMMA on sm_80, HGMMA on sm_90 for the configurations meant for wgmma;
fp8 GEMM: QGMMA on sm_90; fp32 with TF32 forbidden: no Tensor Core instruction at all (FFMA only);
TF32 allowed: Tensor Cores; no spills in any default configuration. The same records are the static
evidence of `triton` rows run on a CPU. Compilation is cached by Triton (~/.triton/cache): cold, this
module compiles ~40 configurations (about a minute on 2 cores); warm, it takes seconds.
"""

from __future__ import annotations

import json

import pytest

from microbench.core.cases import make_inputs
from microbench.core.device import cpu_device
from microbench.core.shapes import Case, ConvShape, GemmShape
from microbench.inspect import cli as inspect_cli
from microbench.kernels import conv_triton, gemm_triton
from microbench.roofline import registry, sass
from microbench.roofline.registry import bind

pytestmark = [
    pytest.mark.inspect,
    pytest.mark.slow,
]  # .ci/run's image simulation selects inspect; the builds take minutes

MODULES = (gemm_triton, conv_triton)


@pytest.fixture(scope="module")
def records() -> list[sass.StaticRecord]:
    try:
        sass.toolchain()
    except sass.ToolchainError as e:
        pytest.skip(f"no ptxas / cuobjdump in Triton's package: {e}")
    return [sass.inspect_build(b) for m in MODULES for t in sass.TARGETS for b in m.aot_builds(t)]


def _pick(records, **want):
    out = [r for r in records if all(getattr(r, k) == v for k, v in want.items())]
    assert out, f"no record with {want}"
    return out


KERNELS = ("triton_gemm", "triton_conv_fwd", "triton_conv_bwd_data", "triton_conv_bwd_weight")


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_hmma_on_sm80(records, kernel, dtype):
    for r in _pick(records, kernel=kernel, dtype=dtype, target="sm_80"):
        assert r.hmma > 0 and r.hgmma == 0, r.evidence()


@pytest.mark.parametrize("kernel", KERNELS + ("triton_gemm_tma",))
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_hgmma_on_sm90_for_wgmma_configs(records, kernel, dtype):
    recs = _pick(records, kernel=kernel, dtype=dtype, target="sm_90", wants_wgmma=True)
    for r in recs:
        assert r.hgmma > 0 and r.hmma == 0, r.evidence()


def test_fp8_gemm_uses_qgmma_on_sm90(records):
    for r in _pick(records, kernel="triton_gemm", dtype="fp8_e4m3", target="sm_90"):
        assert r.qgmma > 0, r.evidence()


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("target", sass.TARGETS)
def test_fp32_with_tf32_forbidden_has_no_tensor_instructions(records, kernel, target):
    for r in _pick(records, kernel=kernel, dtype="fp32", target=target):
        assert r.tensor_core_instructions == 0 and r.ffma > 0, r.evidence()


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("target", sass.TARGETS)
def test_tf32_allowed_uses_tensor_cores(records, kernel, target):
    for r in _pick(records, kernel=kernel, dtype="tf32", target=target):
        assert (r.hmma if target == "sm_80" else r.hgmma) > 0, r.evidence()


def test_default_configurations_do_not_spill(records):
    defaults = [r for r in records if r.default]
    assert len(defaults) >= 2 * 3 * 4  # every conv direction and dtype on both targets, plus the GEMMs
    spilled = [r.evidence() for r in defaults if r.spills]
    assert not spilled, spilled


def test_every_module_builds_for_both_targets(records):
    for kernel in KERNELS:
        assert {r.target for r in records if r.kernel == kernel} == set(sass.TARGETS)
    assert any(r.kernel == "triton_gemm" and "persistent" in r.config for r in records)


def test_cli_json_lists_one_record_per_kernel_config_target(tmp_path, records, monkeypatch):
    from microbench import kernels

    # Only this module's builds: other kernel modules have their own tests (and toolchains).
    monkeypatch.setattr(kernels, "STATIC_MODULES", ("microbench.kernels.gemm_triton",))
    out = tmp_path / "inspect.json"
    # NVIDIA targets: the AMD ones have their own tests (tests/test_inspect_amd.py), and their full set is minutes cold.
    assert (
        inspect_cli.main(["--json", str(out), "--kernel", "triton_gemm", "--target", "sm_80", "--target", "sm_90"]) == 0
    )
    rows = json.loads(out.read_text())
    keys = {(r["kernel"], r["config"], r["target"]) for r in rows}
    assert len(keys) == len(rows) and rows
    want = {
        "kernel",
        "config",
        "target",
        "hmma",
        "hgmma",
        "qgmma",
        "imma",
        "ffma",
        "registers",
        "shared_bytes",
        "spills",
        "stack_bytes",
        "local_bytes",
    }
    assert want <= set(rows[0])
    assert {r["kernel"] for r in rows} == {"triton_gemm", "triton_gemm_tma"}


def test_cpu_rows_carry_static_evidence(records):
    dev = cpu_device()
    for op, (case, expect, opcodes) in {
        "gemm": (Case("gemm", GemmShape(9, 8, 7), "bf16"), "yes", ("HGMMA", "HMMA")),
        "conv2d": (
            Case("conv2d_bwd_weight", ConvShape(1, 4, 5, 5, 3, 3, 3, pad=(1, 1)), "fp16"),
            "yes",
            ("HGMMA", "HMMA"),
        ),
    }.items():
        p = registry.get(op, "triton")
        ev = p.evidence(case, dev, bind(p, case, *make_inputs(case)))
        assert ev.tensor_cores == expect, ev.evidence
        assert ev.evidence.startswith("static") and all(o in ev.evidence for o in opcodes), ev.evidence
    p = registry.get("gemm", "triton")
    case = Case("gemm", GemmShape(9, 8, 7), "fp32")
    ev = p.evidence(case, dev, bind(p, case, *make_inputs(case)))
    assert ev.tensor_cores == "no" and "FFMA" in ev.evidence, ev.evidence


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_cdna_default_configurations_compile_to_mfma(dtype):
    """The AMD family's configurations are real ones: compiled ahead of time for MI300 (gfx942), the
    default GEMM and convolution tiles issue matrix-core instructions (v_mfma)."""
    from microbench.kernels import triton_configs as cfgs
    from microbench.kernels.triton_runtime import mfma_count

    try:
        gemm = gemm_triton._build("triton_gemm", dtype, cfgs.gemm_default("cdna", dtype), "gfx942")
    except Exception as e:  # noqa: BLE001 - a Triton build without its AMD backend
        pytest.skip(f"Triton cannot compile for gfx942 here: {type(e).__name__}: {e}")
    assert mfma_count(gemm.asm["amdgcn"]) > 0
    for direction in conv_triton.KERNELS:
        conv = conv_triton._build(direction, dtype, cfgs.conv_default("cdna", dtype), "gfx942")
        assert mfma_count(conv.asm["amdgcn"]) > 0, direction
