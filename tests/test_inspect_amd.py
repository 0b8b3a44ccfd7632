"""AMD matrix cores proven ahead of time: Triton's HIP backend compiles for gfx942 (MI300X / MI325X) and gfx950
(MI355X) on this CPU machine with no ROCm, and the AMDGCN assembly says which matrix instructions a kernel issues,
its registers, scratch and LDS, and whether a dtype runs on its own matrix instructions or falls back (an fp8
flavour the chip upcasts to f16, fp32 without xf32).

The compile tests are marked `inspect` (the GPU image's Triton 3.6 runs them in .ci/run's first environment) and
build a representative subset: a plain tl.dot per (operand type, target) for the instruction table, and our
GEMM and convolution defaults; `python -m microbench.inspect --target gfx942 --target gfx950` builds every
candidate (docs/amd.md has the figures and the compile times).
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from microbench.core import targets
from microbench.roofline import amdgcn
from microbench.roofline.sass import AotBuild, StaticRecord, inspect_build

# The table: tl.dot of 128x128 tiles, 4 warps, Triton's default instruction size (32x32), and tl.dot's
# default input precision (fp32 rows: what a kernel that does not say gets).
INSTRUCTION_TABLE = {
    ("bf16", "gfx942"): "v_mfma_f32_32x32x8_bf16",
    ("bf16", "gfx950"): "v_mfma_f32_32x32x16_bf16",
    ("fp16", "gfx942"): "v_mfma_f32_32x32x8_f16",
    ("fp16", "gfx950"): "v_mfma_f32_32x32x16_f16",
    ("fp32", "gfx942"): "v_mfma_f32_32x32x4_xf32",
    ("fp32", "gfx950"): "v_mfma_f32_32x32x2_f32",
    ("fp8e4b8", "gfx942"): "v_mfma_f32_32x32x16_fp8_fp8",
    ("fp8e4b8", "gfx950"): "v_mfma_f32_32x32x16_f16",
    ("fp8e4nv", "gfx942"): "v_mfma_f32_32x32x8_f16",
    ("fp8e4nv", "gfx950"): "v_mfma_f32_32x32x64_f8f6f4",
}
# Our dtype name for each operand type, and whether the chip runs it natively (else: the fallback's words).
OPERAND_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "fp8e4b8": "fp8_e4m3", "fp8e4nv": "fp8_e4m3"}
FALLBACK_WORDS = {
    ("fp32", "gfx942"): "reduced precision",
    ("fp8e4b8", "gfx950"): "upcast to f16",
    ("fp8e4nv", "gfx942"): "upcast to f16",
}


def _amd_or_skip(target: str):
    """Compile a trivial tl.dot for `target`, or skip when this Triton has no HIP backend / no such target."""
    try:
        return _compile_dot("fp16", target)
    except Exception as e:  # noqa: BLE001 - a Triton without its AMD backend, or too old for this chip
        pytest.skip(f"Triton cannot compile for {target} here: {type(e).__name__}: {str(e).splitlines()[-1][:200]}")


_CACHE: dict = {}


def _compile_dot(operand: str, target: str, precision: str | None = None):
    key = (operand, target, precision)
    if key not in _CACHE:
        import triton
        import triton.language as tl

        from microbench.kernels.triton_configs import COMPILE_OPTIONS
        from microbench.kernels.triton_runtime import aot_compile

        if "kernel" not in _CACHE:

            @triton.jit
            def dot_kernel(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr, PRECISION: tl.constexpr):
                o = tl.arange(0, BLOCK)
                a = tl.load(a_ptr + o[:, None] * BLOCK + o[None, :])
                b = tl.load(b_ptr + o[:, None] * BLOCK + o[None, :])
                if PRECISION == "default":
                    c = tl.dot(a, b)
                else:
                    c = tl.dot(a, b, input_precision=PRECISION)
                tl.store(c_ptr + o[:, None] * BLOCK + o[None, :], c)

            _CACHE["kernel"] = dot_kernel
        args = {
            "a_ptr": f"*{operand}",
            "b_ptr": f"*{operand}",
            "c_ptr": "*fp32",
            "BLOCK": 128,
            "PRECISION": precision or "default",
        }
        try:
            _CACHE[key] = aot_compile(_CACHE["kernel"], args, target, {"num_warps": 4, **COMPILE_OPTIONS})
        except Exception as e:  # noqa: BLE001 - only Triton 3.6's known transient failure, below
            if not any(m in str(e) for m in ("instruction not supported on this GPU", "ld.lld", "LLD failed to link")):
                raise
            _CACHE[key] = _compile_in_a_fresh_process(operand, target, precision, args)
    return _CACHE[key]


def _compile_in_a_fresh_process(operand: str, target: str, precision: str | None, args: dict):
    """Triton 3.6 keeps state across compiles in one process: an fp8e4b8 tl.dot compiled for gfx950 makes a later
    OCP-fp8 (fp8e4nv) one for gfx942 emit gfx950's v_cvt_scalef32_pk_f16_fp8, which gfx942's assembler refuses
    (reproduced: that order fails, every other order passes; a retry in the same process fails again). A fresh
    process compiles it, Triton's on-disk cache keeps the result, and the compile here then loads it."""
    import subprocess
    import sys

    from microbench.kernels.triton_configs import COMPILE_OPTIONS
    from microbench.kernels.triton_runtime import aot_compile

    code = f"from tests.test_inspect_amd import _compile_dot; _compile_dot({operand!r}, {target!r}, {precision!r})"
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        timeout=600,
    )
    return aot_compile(_CACHE["kernel"], args, target, {"num_warps": 4, **COMPILE_OPTIONS})


def _record(compiled, dtype: str, target: str) -> StaticRecord:
    return inspect_build(
        AotBuild(
            kernel="dot",
            config=f"{dtype} test",
            target=target,
            cubin=b"",
            amdgcn=compiled.asm["amdgcn"],
            dtype=dtype,
            num_warps=4,
            dynamic_shared_bytes=compiled.metadata.shared,
        )
    )


@pytest.mark.inspect
@pytest.mark.slow
@pytest.mark.parametrize("operand,target", sorted(INSTRUCTION_TABLE))
def test_instruction_table(operand, target):
    """Each row of the issue's table, from real assembly, with its verdict and the reason of a fallback."""
    _amd_or_skip(target)
    rec = _record(_compile_dot(operand, target), OPERAND_DTYPE[operand], target)
    assert rec.matrix_instruction_kinds == [INSTRUCTION_TABLE[operand, target]], rec.evidence()
    words = FALLBACK_WORDS.get((operand, target))
    if words:
        assert rec.matrix_cores == "fallback" and words in rec.fallback, rec.evidence()
    else:
        assert rec.matrix_cores == "yes" and rec.fallback is None, rec.evidence()
    assert rec.matrix_instructions == sum(k["count"] for k in rec.matrix_kinds) > 0


@pytest.mark.inspect
def test_fp32_asked_as_ieee_on_gfx942_is_fp32_matrix_math():
    """Our fp32 cases say input_precision="ieee": on gfx942 that lowers to v_mfma_f32_*_f32 (IEEE fp32 on the
    matrix cores at the fp32 matrix rate), not xf32; "tf32" lowers to xf32 there; gfx950 has no xf32 at all."""
    _amd_or_skip("gfx942")
    ieee = _record(_compile_dot("fp32", "gfx942", "ieee"), "fp32", "gfx942")
    assert ieee.matrix_instruction_kinds == ["v_mfma_f32_32x32x2_f32"] and ieee.matrix_cores == "yes", ieee.evidence()
    xf32 = _record(_compile_dot("fp32", "gfx942", "tf32"), "tf32", "gfx942")
    assert xf32.matrix_instruction_kinds == ["v_mfma_f32_32x32x4_xf32"] and xf32.matrix_cores == "yes"
    assert targets.dot_input_precision("gfx950", True) == "ieee"  # what our kernels ask for there


@pytest.fixture(scope="module")
def ours():
    """Our GEMM (every dtype) and convolution forward (fp16, fp32, tf32) defaults, and the GEMM's fp8 default
    given the other flavour, for both AMD targets: 24 compiles, seconds each."""
    from microbench.kernels import conv_triton, gemm_triton
    from microbench.kernels import triton_configs as cfgs
    from microbench.kernels.triton_runtime import aot_build

    out = []
    for target in targets.AMD_TARGETS:
        _amd_or_skip(target)
        for dt in gemm_triton.AOT_DTYPES[target]:
            cfg = cfgs.gemm_default("cdna", dt)
            out.append(
                inspect_build(
                    aot_build(
                        "triton_gemm",
                        dt,
                        cfg,
                        target,
                        gemm_triton._build("triton_gemm", dt, cfg, target),
                        default=True,
                        note=gemm_triton._fp8_note(dt, target),
                        variant=gemm_triton._flavour(dt, target),
                    )
                )
            )
        for dt in ("fp16", "fp32", "tf32"):
            cfg = cfgs.conv_default("cdna", dt)
            out.append(
                inspect_build(
                    aot_build(
                        "triton_conv_fwd", dt, cfg, target, conv_triton._build("fwd", dt, cfg, target), default=True
                    )
                )
            )
        out += [inspect_build(b) for b in gemm_triton.fallback_builds(target)]
    return out


def _one(recs, **want):
    got = [r for r in recs if all(getattr(r, k) == v for k, v in want.items())]
    assert got, f"no record with {want}"
    return got


@pytest.mark.inspect
@pytest.mark.slow
def test_our_kernels_on_amd(ours):
    """Our defaults run natively on both chips (fp8 in each chip's own flavour), do not spill, and fit the LDS;
    the one fallback left is tf32 on gfx950 (no xf32 there: IEEE fp32 matrix instructions)."""
    for r in ours:
        if r.default:
            assert not r.spills, r.evidence()
            assert r.occupancy and r.occupancy >= 1, r.evidence()
            assert r.matrix_instructions > 0 and r.matrix_per_k_step, r.evidence()
    for target in targets.AMD_TARGETS:
        for r in _one(ours, target=target, dtype="fp32"):
            assert {k["operand"] for k in r.matrix_kinds} == {"f32"} and r.matrix_cores == "yes", r.evidence()
        fp8 = _one(ours, target=target, dtype="fp8_e4m3", default=True)[0]
        assert fp8.matrix_cores == "yes" and fp8.note == f"operands {targets.fp8_e4m3_flavour(target)}", fp8.evidence()
        wrong = _one(ours, target=target, dtype="fp8_e4m3", default=False)[0]
        assert wrong.matrix_cores == "fallback" and "upcast to f16" in wrong.fallback, wrong.evidence()
        for r in _one(ours, target=target, dtype="tf32"):
            if target == "gfx942":
                assert r.matrix_cores == "yes" and {k["operand"] for k in r.matrix_kinds} == {"xf32"}, r.evidence()
            else:
                assert r.matrix_cores == "fallback" and "no xf32" in r.fallback, r.evidence()
    assert targets.fp8_e4m3_flavour("gfx942") == "fp8e4b8" and targets.fp8_e4m3_flavour("gfx950") == "fp8e4nv"
    # The rule CPU rows cite (no compile) says what the assembly says.
    for r in ours:
        if r.default:
            assert (targets.predicted_fallback(r.target, r.dtype) is None) == (r.fallback is None), r.evidence()


@pytest.mark.inspect
def test_amd_records_have_the_nvidia_schema_and_more(ours):
    nvidia_keys = set(StaticRecord.__dataclass_fields__) | {"spills"}
    d = ours[0].as_dict()
    assert nvidia_keys <= set(d)
    for key in (
        "target",
        "dtype",
        "matrix_instructions",
        "matrix_instruction_kinds",
        "fallback",
        "vgprs",
        "agprs",
        "sgprs",
        "lds_bytes",
        "waves_per_simd",
        "matrix_cores",
    ):
        assert key in d
    json.dumps(d)


# ---- the parser and the verdicts on listings written here (no compile) -------------------------------------
_LISTING = """\
_gemm_kernel:
\ts_load_dwordx2 s[0:1], s[4:5], 0x0
.LBB0_2:
\tv_mfma_f32_16x16x16_bf16 v[0:3], v[4:5], v[6:7], v[0:3]
\tv_mfma_f32_16x16x16_bf16 v[0:3], v[4:5], v[6:7], v[0:3]
\ts_cbranch_scc1 .LBB0_2
\tv_mfma_f32_16x16x16_bf16 v[0:3], v[4:5], v[6:7], v[0:3]
\tscratch_store_dword off, v3, off offset:200 ; 4-byte Folded Spill
; TotalNumSgprs: 44
; NumVgprs: 204
; NumAgprs: 8
; TotalNumVgprs: 212
; ScratchSize: 16
; LDSByteSize: 0 bytes/workgroup (compile time only)
; Occupancy: 2
"""


def test_parser_reads_kinds_registers_loop_and_spills():
    b = AotBuild(
        kernel="k",
        config="bf16 x",
        target="gfx942",
        cubin=b"",
        amdgcn=_LISTING,
        dtype="bf16",
        num_warps=4,
        dynamic_shared_bytes=32768,
    )
    r = inspect_build(b)
    assert r.matrix_kinds == [
        {"name": "v_mfma_f32_16x16x16_bf16", "operand": "bf16", "shape": "16x16x16", "precision": "bf16", "count": 3}
    ]
    assert r.matrix_per_k_step == 2  # the loop body, not the peeled copy after it
    assert (r.vgprs, r.agprs, r.sgprs, r.registers) == (204, 8, 44, 212)
    assert r.spills and r.stack_bytes == 16 and r.spill_stores == 1
    assert r.waves_per_simd == 2 and r.lds_bytes == 32768  # 512 // 216; 64 KB / 32 KB = 2 groups of 4 waves
    assert r.occupancy == 2 and r.matrix_cores == "yes"
    assert "fallback" not in r.evidence() and "v_mfma_f32_16x16x16_bf16 x3" in r.evidence()


def test_shapes_and_operands_of_instruction_names():
    assert amdgcn.mfma_kind("v_mfma_f32_32x32x64_f8f6f4")["precision"] == "fp8"
    assert amdgcn.mfma_kind("v_mfma_scale_f32_32x32x64_f8f6f4")["shape"] == "32x32x64"
    assert amdgcn.mfma_kind("v_mfma_f32_32x32x4_xf32")["precision"] == "tf32"
    assert amdgcn.mfma_kind("v_mfma_f32_16x16x32_bf8_bf8")["operand"] == "bf8_bf8"


def test_waves_per_simd_follow_the_unified_register_file():
    assert [targets.amd_waves_per_simd("gfx942", v) for v in (64, 65, 128, 256, 257, 512)] == [8, 7, 4, 2, 1, 1]
    assert targets.amd_lds_waves_per_simd("gfx942", 131072, 8) == 0  # 128 KB of LDS: no gfx942 CU holds it
    assert targets.amd_lds_waves_per_simd("gfx950", 131072, 8) == 2
    assert targets.nvidia_warps_per_sm("sm_90", 168, 8, 0) == 8  # 168 x 32 = 5376 per warp: 12 warps, 1 block


def test_a_target_triton_cannot_compile_is_reported_per_module(tmp_path, monkeypatch, capsys):
    from microbench import kernels
    from microbench.inspect import cli as cli

    listing = _LISTING.replace("ScratchSize: 16", "ScratchSize: 0").replace(
        "\tscratch_store_dword off, v3, off offset:200 ; 4-byte Folded Spill\n", ""
    )
    good, bad = types.ModuleType("fake_amd_good"), types.ModuleType("fake_amd_broken")
    good.AOT_TARGETS = bad.AOT_TARGETS = ("gfx942", "gfx950")
    good.aot_builds = lambda t: [
        AotBuild(kernel="k", config="bf16 x", target=t, cubin=b"", amdgcn=listing, dtype="bf16", num_warps=4)
    ]

    def broken(t):
        if t == "gfx950":
            raise KeyError("gfx950")  # what an older Triton says of a chip it does not know
        return good.aot_builds(t)

    bad.aot_builds = broken
    for m in (bad, good):
        monkeypatch.setitem(sys.modules, m.__name__, m)
    monkeypatch.setattr(kernels, "STATIC_MODULES", (bad.__name__, good.__name__))
    out = tmp_path / "inspect.json"
    assert cli.main(["--json", str(out), "--target", "gfx942", "--target", "gfx950"]) == 1
    err = capsys.readouterr().err
    assert "fake_amd_broken for gfx950 FAILED: KeyError" in err and "Traceback" not in err
    rows = json.loads(out.read_text())
    assert [(r["kernel"], r["target"]) for r in rows if "kernel" in r] == [
        ("k", "gfx942"),
        ("k", "gfx942"),
        ("k", "gfx950"),
    ]
    assert [(r["module"], r["target"]) for r in rows if "error" in r] == [("fake_amd_broken", "gfx950")]


def test_compare_puts_sm90_beside_gfx942(tmp_path, capsys, monkeypatch):
    """At 80 columns piped the table keeps its key columns readable (they folded to 3 characters a line) and says
    where the dropped ones are: the --json file the command wrote."""
    from microbench.compare import cli as compare

    monkeypatch.setenv("COLUMNS", "80")

    nv = {
        "kernel": "triton_gemm",
        "config": "bf16 BM128 BN128 BK64 G8 w8 s3",
        "target": "sm_90",
        "dtype": "bf16",
        "default": True,
        "registers": 168,
        "spills": False,
        "stack_bytes": 0,
        "shared_bytes": 0,
        "dynamic_shared_bytes": 98304,
        "matrix_per_k_step": 4,
        "matrix_instructions": 16,
        "occupancy": 8,
        "occupancy_unit": "warps/SM",
        "matrix_cores": "yes",
        "fallback": None,
    }
    amd = {
        "kernel": "triton_gemm",
        "config": "bf16 BM128 BN128 BK64 G8 w4 s2",
        "target": "gfx942",
        "dtype": "bf16",
        "default": True,
        "registers": 204,
        "vgprs": 204,
        "agprs": 0,
        "sgprs": 44,
        "spills": False,
        "stack_bytes": 0,
        "lds_bytes": 32768,
        "matrix_per_k_step": 64,
        "matrix_instructions": 192,
        "occupancy": 2,
        "occupancy_unit": "waves/SIMD",
        "matrix_cores": "yes",
        "fallback": None,
    }
    a, b = tmp_path / "nv.json", tmp_path / "amd.json"
    a.write_text(json.dumps([nv]))
    b.write_text(json.dumps([amd, {"module": "microbench.kernels.gemm_cupy", "target": "gfx942", "error": "x"}]))
    out = tmp_path / "cmp.json"
    assert compare.main([str(a), str(b), "--json", str(out)]) == 0
    cmp = json.loads(out.read_text())
    assert cmp["targets"] == ["sm_90", "gfx942"]
    row = next(r for r in cmp["rows"] if r["pair"] == "default")
    assert row["cells"]["sm_90"]["matrix_per_k_step"] == 4 and row["cells"]["gfx942"]["registers"] == "v204 a0 s44"
    text = capsys.readouterr().out
    assert "32768" in text and "98304" in text and "2 w/SIMD" in text and "8 w/SM" in text
    assert "v204 a0 s44" in text and max(len(line) for line in text.splitlines()) <= 80
    assert "are in the --json file" in " ".join(text.split()) and "cmp.json" in text  # a long path may fold
    assert compare.main([str(a), "--target", "gfx950"]) == 2


def test_a_gpu_row_that_ran_a_fallback_is_flagged():
    """On an AMD GPU the evidence hook reads the kernel that ran: a fallback comes back as such, and the runner
    flags the row with it; on a CPU the static evidence names the AMD chips that would fall back."""
    from microbench.kernels.triton_runtime import amdgcn_evidence, static_evidence

    listing = _LISTING.replace("v_mfma_f32_16x16x16_bf16", "v_mfma_f32_16x16x4_f32")
    ev = amdgcn_evidence(listing, "triton_gemm", "BM128", "gfx950", "tf32")
    assert ev.tensor_cores == "yes" and "no xf32" in ev.fallback and "gfx950" in ev.fallback
    assert amdgcn_evidence(listing, "triton_gemm", "BM128", "gfx942", "fp32").fallback is None
    cpu = static_evidence([], "tf32")
    assert cpu.tensor_cores == "unknown"
    rec = inspect_build(AotBuild(kernel="k", config="tf32 x", target="gfx942", cubin=b"", amdgcn=listing, dtype="fp32"))
    assert "on AMD, a fallback path: gfx950" in static_evidence([rec], "tf32").evidence
    assert "fallback path" not in static_evidence([rec], "bf16").evidence


def test_amd_build_list_is_every_candidate_once():
    """What `inspect --target gfx942` builds, listed without compiling: every default and autotune candidate of
    every dtype, each (kernel, config) once, and the wrong-flavour fp8 build labelled apart."""
    from microbench.kernels import conv_triton, gemm_triton
    from microbench.kernels import triton_configs as cfgs

    for target in targets.AMD_TARGETS:
        gemm = [
            (n, f"{dt} {gemm_triton._flavour(dt, target)} {c.label()}")
            for n, dt, c, _ in gemm_triton.aot_variants(target)
        ]
        assert len(set(gemm)) == len(gemm)
        for dt in gemm_triton.AOT_DTYPES[target]:
            want = {c.label() for c in cfgs.GEMM_CONFIGS["cdna"](dt)} | {cfgs.gemm_default("cdna", dt).label()}
            assert {c.label() for n, d, c, _ in gemm_triton.aot_variants(target) if d == dt} == want
        conv = [(d, dt, c) for d, dt, c, _ in conv_triton.aot_variants(target)]
        assert len(set(conv)) == len(conv) and {dt for _, dt, _ in conv} == set(conv_triton.AOT_DTYPES)
    assert gemm_triton._flavour("fp8_e4m3", "gfx942") == "fp8e4b8" and gemm_triton._flavour("fp8_e4m3", "sm_90") == ""


def test_a_transient_amd_link_failure_is_retried_once(monkeypatch):
    """Triton 3.6 once failed to link an OCP fp8 tl.dot for gfx942 ("instruction not supported on this GPU")
    and succeeded on the next try: aot_compile retries that failure once, and only that one."""
    import triton

    from microbench.kernels import gemm_triton
    from microbench.kernels import triton_configs as cfgs
    from microbench.kernels.triton_runtime import aot_compile

    calls = []

    def flaky(src, target=None, options=None):
        calls.append(target.arch)
        if len(calls) == 1:
            raise RuntimeError("<instantiation>:1:1: error: instruction not supported on this GPU")
        return "compiled"

    monkeypatch.setattr(triton, "compile", flaky)
    cfg = cfgs.gemm_default("cdna", "fp8_e4m3")
    args = gemm_triton._aot_args("fp8_e4m3", cfg, False, "gfx942", "fp8e4nv")
    assert aot_compile(gemm_triton._gemm_kernel, args, "gfx942", cfg.options()) == "compiled" and len(calls) == 2
    monkeypatch.setattr(triton, "compile", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("other")))
    with pytest.raises(RuntimeError, match="other"):
        aot_compile(gemm_triton._gemm_kernel, args, "gfx942", cfg.options())


def test_fp8_cases_take_the_flavour_of_the_chip():
    """fp8_e4m3 operands: OCP e4m3 (float8_e4m3fn) off AMD; the e4m3 fnuz storage is a dtype of its own that our
    Triton GEMM takes as fp8_e4m3 (same tiles, bf16 output), and gfx942's native flavour."""
    import torch

    from microbench.core import dtypes
    from microbench.kernels import gemm_triton

    fnuz = getattr(torch, "float8_e4m3fnuz", None)
    if fnuz is None:
        pytest.skip("this torch has no float8_e4m3fnuz")
    assert dtypes.storage_dtype("fp8_e4m3", "cpu") == torch.float8_e4m3fn
    assert dtypes.storage_dtype("bf16", "cpu") == torch.bfloat16
    assert dtypes.name_of(fnuz) == "fp8_e4m3_fnuz" and dtypes.get("fp8_e4m3_fnuz").triton == targets.fp8_e4m3_flavour(
        "gfx942"
    )
    assert gemm_triton.precision_key("fp8_e4m3_fnuz", False) == "fp8_e4m3"
    assert gemm_triton._out_dtype(fnuz, None) == torch.bfloat16
    assert "fp8_e4m3_fnuz" not in dtypes.CASE_DTYPES  # bench.toml still says fp8_e4m3
