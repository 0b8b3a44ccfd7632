"""CUDA C++ kernels (gemm_mma.cu, conv_implicit.cu) without a GPU: NVRTC compiles them, Triton's ptxas
assembles them for sm_80 and sm_90, and their SASS must hold Tensor Core instructions and no local
memory; a compile error must come back with NVRTC's log; the `cupy` providers must say why they cannot
run here. The GPU tests at the end (correctness against float64 and against cuBLAS / cuDNN) run only
where PyTorch sees a CUDA device; nothing here has run them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest
import torch

from microbench.core.cases import make_inputs, reference, rel_err
from microbench.core.ops.conv2d import tensor_shapes as conv_tensor_shapes
from microbench.core.shapes import Case, ConvShape, GemmShape
from microbench.kernels import conv_cupy, gemm_cupy, nvrtc
from microbench.kernels import cuda_kernels as ck
from microbench.roofline import registry, sass
from microbench.roofline.registry import Unsupported

pytestmark = [
    pytest.mark.inspect,
    pytest.mark.slow,
]  # .ci/run's image simulation selects inspect; the builds take minutes

MODULES = (gemm_cupy, conv_cupy)
HAS_GPU = torch.cuda.is_available()


def _toolchain_or_skip():
    try:
        nvrtc.version()
        sass.toolchain()
    except (nvrtc.NvrtcError, sass.ToolchainError) as e:
        pytest.skip(f"no NVRTC or no Triton ptxas here: {e}")


@pytest.fixture(scope="session")
def static_records() -> dict:
    """(module, target) -> StaticRecords; all four builds run in parallel (two CPU cores here)."""
    _toolchain_or_skip()
    ck.build_many([(m.SOURCE, m.all_exprs(), t) for m in MODULES for t in sass.TARGETS])
    return {(m.__name__, t): [sass.inspect_build(b) for b in m.aot_builds(t)] for m in MODULES for t in sass.TARGETS}


def _expected_hmma_per_k_tile(tile) -> int:
    # each warp issues (WM / 16) x (WN / 8) mma.m16n8k16 per 16 of k: one HMMA.16816 each
    return (tile.wm // 16) * (tile.wn // 8) * (tile.bk // 16)


# ---------------------------------------------------------------------------------------------------
# NVRTC
# ---------------------------------------------------------------------------------------------------
def test_compile_error_carries_nvrtc_log():
    _toolchain_or_skip()
    broken = "__global__ void k(float* out) {\n  out[0] = not_declared_anywhere;\n}\n"
    with pytest.raises(nvrtc.NvrtcError) as info:
        nvrtc.compile_ptx(broken, name="broken.cu")
    err = info.value
    assert "not_declared_anywhere" in err.log and "is undefined" in err.log
    assert "broken.cu(2)" in err.log  # NVRTC's file(line) of the error
    assert err.log.strip() in str(err)  # the message a user sees carries the log
    assert err.result == "NVRTC_ERROR_COMPILATION"


def test_static_assert_in_the_real_header_reaches_the_log():
    """A configuration the building blocks reject (a warp tile that is not whole m16 blocks) fails in
    NVRTC with the header's own static_assert message."""
    _toolchain_or_skip()
    src, headers = nvrtc.kernel_source(gemm_cupy.SOURCE)
    bad = "gemm_mma<mma::BF16, 96, 64, 32, 24, 32, 3, true, false>"
    with pytest.raises(nvrtc.NvrtcError) as info:
        nvrtc.compile_ptx(src, name=gemm_cupy.SOURCE, arch="compute_80", name_expressions=(bad,), headers=headers)
    assert "whole m16 / n16 / k16 blocks" in info.value.log


def test_ptx_targets_the_requested_architecture():
    _toolchain_or_skip()
    src, headers = nvrtc.kernel_source(conv_cupy.SOURCE)
    expr = conv_cupy.all_exprs()[-1]
    for target, ptx_target in (("sm_80", ".target sm_80"), ("sm_90", ".target sm_90a")):
        prog = nvrtc.compile_ptx(
            src, name=conv_cupy.SOURCE, arch=ck.virtual_arch(target), name_expressions=(expr,), headers=headers
        )
        assert ptx_target in prog.ptx
        assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in prog.ptx
        assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in prog.ptx
        assert "cp.async.cg.shared.global" in prog.ptx and "cp.async.wait_group" in prog.ptx
        assert prog.lowered[expr] in prog.ptx  # the mangled name CuPy's get_function will ask for


# ---------------------------------------------------------------------------------------------------
# Static inspection: SASS of every configuration for sm_80 and sm_90
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", sass.TARGETS)
@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_every_kernel_uses_tensor_cores_without_spills(static_records, module, target):
    recs = [r for r in static_records[(module.__name__, target)] if not r.wants_wgmma]
    configs = list(module._all_configs())
    assert len(recs) == len(configs) == len(set(module.all_exprs()))
    for rec, cfg in zip(recs, configs):
        tile = cfg[1]
        where = f"{rec.kernel} [{rec.config}] {target}"
        per_k_tile = _expected_hmma_per_k_tile(tile)
        assert rec.hmma >= per_k_tile and rec.hmma % per_k_tile == 0, where
        assert rec.hgmma == 0 and rec.ffma == 0, where  # mma.sync only; no fp32 CUDA-core math
        assert not rec.spills and rec.local_bytes == 0 and rec.stack_bytes == 0, where
        assert 0 < rec.registers <= 255, where
        assert rec.dynamic_shared_bytes == tile.smem_bytes, where
        assert rec.dtype == cfg[0]


@pytest.mark.parametrize("target", sass.TARGETS)
def test_wgmma_variant_is_hgmma_on_sm90_only(static_records, target):
    recs = [r for r in static_records[("microbench.kernels.gemm_cupy", target)] if r.wants_wgmma]
    if target != "sm_90":
        assert recs == []  # wgmma is sm_90a-only: nothing to build for other targets
        return
    configs = list(gemm_cupy._wgmma_configs())
    assert [r.config for r in recs] == [gemm_cupy.wgmma_label(*c) for c in configs] and recs
    for rec, (dtype, tile) in zip(recs, configs):
        where = f"{rec.kernel} [{rec.config}]"
        per_k_tile = (tile.bn // 128) * (tile.bk // 16)  # one m64n128k16 per n128 block per k16
        assert rec.hgmma >= per_k_tile and rec.hgmma % per_k_tile == 0, where
        assert rec.hmma == 0 and rec.ffma == 0, where
        assert not rec.spills, where
        assert rec.dynamic_shared_bytes == tile.smem_bytes <= 227 * 1024, where  # H100/H200 opt-in limit
    mod = ck.build(gemm_cupy.WGMMA_SOURCE, gemm_cupy.wgmma_exprs(), target)
    assert "wgmma.fence.sync.aligned" in mod.ptx and "fence.proxy.async.shared::cta" in mod.ptx
    assert "serialized" not in mod.ptxas_log  # ptxas did not fall back to serialising the wgmma


@pytest.mark.parametrize("target", sass.TARGETS)
@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_sass_holds_the_pipeline_instructions(static_records, module, target):
    """The building blocks reached the machine code: LDGSTS (cp.async), LDSM (ldmatrix), the
    cp.async group wait, and HMMA.16816 with an F32 accumulator."""
    mod = ck.build(module.SOURCE, module.all_exprs(), target)
    listing = sass.disassemble(mod.cubin)
    for expr in module.all_exprs():
        fn = sass.function_section(listing, mod.symbols[expr])
        ops = sass.opcode_counts(fn)
        assert ops["LDGSTS"] > 0 and ops["LDSM"] > 0 and ops["LDGDEPBAR"] > 0, expr
        assert "HMMA.16816.F32" in fn, expr
        assert ("HMMA.16816.F32.BF16" in fn) == ("BF16" in expr), expr


def test_function_sections_split_a_multi_kernel_cubin(static_records):
    mod = ck.build(conv_cupy.SOURCE, conv_cupy.all_exprs(), "sm_80")
    listing = sass.disassemble(mod.cubin)
    sections = [sass.function_section(listing, s) for s in mod.symbols.values()]
    total = sum(sass.opcode_counts(s)["HMMA"] for s in sections)
    assert total == sass.opcode_counts(listing)["HMMA"]  # every HMMA belongs to exactly one kernel
    with pytest.raises(sass.ToolchainError, match="no function"):
        sass.function_section(listing, "_Z_no_such_kernel")


def test_inspect_cli_lists_every_cuda_kernel(static_records, tmp_path, monkeypatch, capsys):
    from microbench import kernels
    from microbench.inspect import cli as inspect

    monkeypatch.setattr(kernels, "STATIC_MODULES", tuple(m.__name__ for m in MODULES))
    out = tmp_path / "static.json"
    assert inspect.main(["--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    listed = {(r["kernel"], r["config"], r["target"]) for r in rows}
    expected = {(r.kernel, r.config, r.target) for recs in static_records.values() for r in recs}
    assert listed == expected and len(rows) == len(expected)
    assert all((r["hgmma"] if r["wants_wgmma"] else r["hmma"]) > 0 and not r["spills"] for r in rows)
    assert "cuda_gemm_mma" in capsys.readouterr().out


def test_evidence_hook_names_the_launched_kernel(static_records):
    """The providers' evidence is the SASS record of the kernel their call launched, for the device's
    architecture (here a stand-in for an H100: the call records a launch as the wrapper does)."""

    @dataclass
    class FakeGpu:
        kind: str = "cuda"
        arch: str = "sm_90"

        def synchronize(self):
            pass

    tile = gemm_cupy.gemm_tiles()[0]
    expr = gemm_cupy.kernel_expr("bf16", tile, True, True)

    def call():
        ck.report(
            ck.Launch(
                gemm_cupy.SOURCE,
                gemm_cupy.all_exprs(),
                expr,
                gemm_cupy.KERNEL,
                gemm_cupy.config_label("bf16", tile, True, True),
                "bf16",
                tile.smem_bytes,
            )
        )

    case = Case("gemm", GemmShape(4096, 4096, 4096, trans_b=True), "bf16")
    ev = registry.get("gemm", "cupy").evidence(case, FakeGpu(), call)
    assert ev.tensor_cores == "yes"
    assert ev.evidence.startswith("SASS sm_90 cuda_gemm_mma [bf16 128x256x32 w64x64 s4 NT]: HMMA 64")
    # a call that launched nothing (an empty problem) proves nothing
    assert registry.get("gemm", "cupy").evidence(case, FakeGpu(), lambda: None).tensor_cores == "unknown"
    assert (
        registry.get("conv2d", "cupy").evidence(case, FakeGpu(kind="cpu", arch="x86_64"), call).tensor_cores
        == "unknown"
    )


# ---------------------------------------------------------------------------------------------------
# The providers where they cannot run
# ---------------------------------------------------------------------------------------------------
def test_providers_are_registered_and_say_why_they_cannot_run():
    from microbench.core.device import cpu_device

    dev = cpu_device()
    for op, name in (("gemm", "cupy"), ("conv2d", "cupy"), ("gemm", "cupy_wgmma")):
        p = registry.get(op, name)
        assert p is not None and not p.baseline
        why = p.unavailable_reason(dev)
        try:
            import cupy  # noqa: F401

            assert why == "unavailable: no GPU"
        except Exception:  # noqa: BLE001 - CuPy missing or unusable: the reason says so
            assert why.startswith("unavailable: cupy not importable")
    assert registry.get("gemm", "cupy_blas").library.startswith("cupy.matmul")  # cuBLAS through CuPy stays
    assert "UNVERIFIED" in registry.get("gemm", "cupy_wgmma").library


def test_wgmma_provider_wants_hopper():
    """Past CuPy and the GPU check, the wgmma provider still refuses anything but sm_90."""

    @dataclass
    class FakeDevice:
        arch: str
        kind: str = "cuda"
        is_gpu: bool = True

    from microbench.kernels import gemm_vendor

    real = gemm_vendor.cupy_reason
    gemm_vendor.cupy_reason = lambda device: None  # pretend CuPy sees a GPU
    try:
        p = registry.get("gemm", "cupy_wgmma")
        assert (
            p.unavailable_reason(FakeDevice("sm_80")) == "unavailable: wgmma exists only on sm_90 (Hopper), not sm_80"
        )
        assert p.unavailable_reason(FakeDevice("sm_100")).endswith("not sm_100")
        assert p.unavailable_reason(FakeDevice("sm_90")) is None
        assert registry.get("gemm", "cupy").unavailable_reason(FakeDevice("sm_75")).startswith("unavailable: sm_75")
        assert registry.get("gemm", "cupy").unavailable_reason(FakeDevice("sm_100")) is None
    finally:
        gemm_vendor.cupy_reason = real


def test_runner_rows_read_unavailable_without_a_gpu():
    """The roofline's rows for the `cupy` providers on this machine: skipped, with the reason."""
    from microbench.core.config import load_config
    from microbench.core.device import cpu_device
    from microbench.roofline.ceilings import build_ceilings
    from microbench.roofline.runner import CaseRunner

    cfg = load_config()
    dev = cpu_device()
    runner = CaseRunner(dev, cfg, build_ceilings(dev, cfg, measure_now=False))
    cases = [c for c in cfg.case_set("quick").cases]
    assert {c.family for c in cases} == {"gemm", "conv2d"}
    for case in cases:
        p = registry.get(case.family, "cupy")
        (row,) = runner.run(case, [p])
        assert row.provider == "cupy" and row.status == "skipped"
        assert row.reason == p.unavailable_reason(dev) and row.reason.startswith("unavailable:")


def test_wrappers_refuse_what_they_do_not_implement():
    a = torch.randn(8, 8)
    with pytest.raises(Unsupported, match="fp16 / bf16"):
        gemm_cupy.gemm_cupy(a, a)
    with pytest.raises(Unsupported, match="CUDA device"):
        gemm_cupy.gemm_cupy(a.bfloat16(), a.bfloat16())
    with pytest.raises(Unsupported, match="mixed"):
        gemm_cupy.gemm_cupy(a.half(), a.bfloat16())
    s = ConvShape(1, 8, 5, 5, 8, 3, 3, pad=(1, 1))
    x, w = (torch.randn(t).bfloat16() for t in conv_tensor_shapes(s)[:2])
    for direction in ("bwd_data", "bwd_weight"):
        with pytest.raises(Unsupported, match="only the forward"):
            conv_cupy.conv2d_cupy(x, w, shape=s, direction=direction)
    g = ConvShape(1, 8, 5, 5, 8, 3, 3, groups=2)
    with pytest.raises(Unsupported, match="groups"):
        conv_cupy.conv2d_cupy(x, w[:, :4], shape=g, direction="fwd")
    with pytest.raises(Unsupported, match="fp16 / bf16"):
        conv_cupy.conv2d_cupy(x.float(), w.float(), shape=s, direction="fwd")


def test_tile_selection_fills_the_device():
    sms, smem = 132, 227 * 1024
    assert gemm_cupy.select_tile(4096, 4096, 1, sms, smem).bn == 256  # 512 CTAs of 128x256
    assert gemm_cupy.select_tile(1024, 1024, 1, sms, smem).bm == 64  # 32 / 64 CTAs would idle SMs
    assert gemm_cupy.select_tile(512, 512, 96, sms, smem).bn == 256  # the batch fills the device
    assert gemm_cupy.select_tile(4096, 4096, 1, sms, 64 * 1024).bn == 128  # 96 KiB does not fit
    assert conv_cupy.select_tile(32 * 56 * 56, 64, sms, smem).bn == 64  # never wider than K = 64
    with pytest.raises(ValueError):
        gemm_cupy.select_tile(64, 64, 1, sms, 1024)


# ---------------------------------------------------------------------------------------------------
# On a GPU (not run here: no GPU on this machine)
# ---------------------------------------------------------------------------------------------------
def _tol(dtype: str) -> float:
    from microbench.core.config import load_config

    return load_config().tolerance[dtype]


GEMM_SHAPES = [
    GemmShape(1, 1, 1),
    GemmShape(7, 5, 3),
    GemmShape(127, 33, 7),
    GemmShape(129, 257, 65),
    GemmShape(64, 64, 64, trans_a=True),
    GemmShape(200, 72, 136, trans_b=True),
    GemmShape(96, 40, 80, trans_a=True, trans_b=True),
    GemmShape(127, 33, 7, trans_a=True, trans_b=True),
    GemmShape(65, 47, 31, batch=3),
    GemmShape(512, 512, 64, batch=96),
    GemmShape(8, 4096, 4096),
    GemmShape(1000, 1000, 1000),
    GemmShape(4096, 4096, 4096),
    GemmShape(4096, 4096, 4096, trans_b=True),
]


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a GPU: PyTorch sees no CUDA device here")
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("shape", GEMM_SHAPES, ids=lambda s: s.label())
def test_gpu_gemm_matches_float64_and_cublas(shape, dtype):
    case = Case("gemm", shape, dtype)
    a, b = make_inputs(case, "cuda", seed=3)
    out = gemm_cupy.gemm_cupy(a, b)
    ref = reference(case, a, b)
    assert out.dtype == a.dtype and out.shape == ref.shape and out.is_contiguous()
    assert rel_err(out, ref) <= _tol(dtype)
    cublas = torch.matmul(a, b)
    # ours and cuBLAS are each within rounding of the exact result, so of each other
    assert rel_err(out, cublas.double()) <= 2 * _tol(dtype)


IS_SM90 = HAS_GPU and torch.cuda.get_device_capability() == (9, 0)


@pytest.mark.gpu
@pytest.mark.skipif(not IS_SM90, reason="needs an sm_90 (Hopper) GPU: wgmma")
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("shape", GEMM_SHAPES, ids=lambda s: s.label())
def test_gpu_wgmma_gemm_matches_float64_and_cublas(shape, dtype):
    """The unverified wgmma variant, on a Hopper GPU: the same bar as the mma.sync kernel."""
    case = Case("gemm", shape, dtype)
    a, b = make_inputs(case, "cuda", seed=4)
    out = gemm_cupy.gemm_cupy_wgmma(a, b)
    ref = reference(case, a, b)
    assert out.shape == ref.shape and rel_err(out, ref) <= _tol(dtype)
    assert rel_err(out, torch.matmul(a, b).double()) <= 2 * _tol(dtype)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a GPU: PyTorch sees no CUDA device here")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gpu_gemm_reads_views_and_broadcasts(dtype):
    g = torch.Generator(device="cuda").manual_seed(0)
    big = torch.randn(3, 130, 200, device="cuda", dtype=dtype, generator=g)
    a = big[:, 1:98, 3:67]  # misaligned base and odd offsets: copied
    b = torch.randn(64, 51, device="cuda", dtype=dtype, generator=g)  # 2-D B broadcast over the batch
    ref = torch.matmul(a.double(), b.double())
    out = gemm_cupy.gemm_cupy(a, b)
    assert out.shape == (3, 97, 51) and rel_err(out, ref) <= _tol("bf16" if dtype == torch.bfloat16 else "fp16")
    z = gemm_cupy.gemm_cupy(a[:, :, :0], b[:0])
    assert z.shape == (3, 97, 51) and (z == 0).all()


CONV_SHAPES = [
    ConvShape(2, 64, 14, 14, 64, 3, 3, pad=(1, 1)),
    ConvShape(2, 3, 17, 19, 10, 7, 7, stride=(2, 2), pad=(3, 3)),  # C = 3 padded to 8, K = 10 copied out
    ConvShape(1, 16, 9, 10, 24, 3, 3, stride=(2, 2), pad=(1, 1), dilation=(1, 2)),
    ConvShape(4, 256, 14, 14, 512, 1, 1, stride=(2, 2)),
    ConvShape(3, 40, 7, 7, 72, 3, 3, pad=(1, 1)),
    ConvShape(32, 64, 56, 56, 64, 3, 3, pad=(1, 1)),  # ResNet-50 conv2_x, batch 32
    ConvShape(32, 64, 56, 56, 256, 1, 1),
]


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a GPU: PyTorch sees no CUDA device here")
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("shape", CONV_SHAPES, ids=lambda s: s.label())
def test_gpu_conv_matches_float64_and_cudnn(shape, dtype):
    case = Case("conv2d_fwd", shape, dtype)
    x, w = make_inputs(case, "cuda", seed=5)
    y = conv_cupy.conv2d_cupy(x, w, shape=shape, direction="fwd")
    ref = reference(case, x, w)
    assert y.shape == ref.shape and y.dtype == x.dtype
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert rel_err(y, ref) <= _tol(dtype)
    cudnn = torch.nn.functional.conv2d(x, w, stride=shape.stride, padding=shape.pad, dilation=shape.dilation)
    assert rel_err(y, cudnn.double()) <= 2 * _tol(dtype)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a GPU: PyTorch sees no CUDA device here")
def test_gpu_rows_are_correct_with_sass_evidence():
    from microbench.core.config import load_config
    from microbench.core.device import detect
    from microbench.roofline.ceilings import build_ceilings
    from microbench.roofline.runner import CaseRunner

    cfg = load_config()
    dev = detect("cuda")
    if (ck.sm_number(dev.arch) or 0) < ck.MIN_SM:
        pytest.skip(f"{dev.arch} is older than sm_80")
    runner = CaseRunner(dev, cfg, build_ceilings(dev, cfg, measure_now=False))
    for case in (
        Case("gemm", GemmShape(1024, 1024, 1024), "bf16"),
        Case("conv2d_fwd", ConvShape(8, 64, 56, 56, 64, 3, 3, pad=(1, 1)), "fp16"),
    ):
        (row,) = runner.run(case, [registry.get(case.family, "cupy")])
        assert row.status == "ok", row.reason
        assert row.tensor_cores == "yes" and row.tensor_core_evidence.startswith(f"SASS {dev.arch}")
        assert math.isfinite(row.tflops)
