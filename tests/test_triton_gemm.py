"""Triton GEMM (kernels/gemm_triton.py).

On a CPU the kernels run under Triton's interpreter, launched by the wrapper for CPU tensors without
TRITON_INTERPRET in the environment: sizes 1, 7, 33, 127 and non-multiples of every tile, transposed
operands, batches, the persistent and the tensor-descriptor (TMA) kernels. Every check draws its own
random operands (a seed from its test id), poisons the output with NaN before the call, and compares with
float64 within the dtype's tolerance from bench.toml. The `gpu` tests at the end run the same checks at
real sizes where PyTorch sees a GPU; nothing here has run them.
"""

from __future__ import annotations

import os
import zlib

import pytest
import torch

from microbench.core.cases import make_inputs, reference, rel_err
from microbench.core.config import load_config
from microbench.core.device import cpu_device
from microbench.core.shapes import Case, GemmShape
from microbench.kernels import gemm_triton as gt
from microbench.kernels import triton_configs as cfgs
from microbench.kernels import triton_runtime
from microbench.roofline import registry
from microbench.roofline.registry import Unsupported

pytestmark = pytest.mark.interpreter  # selected by .ci/run's simulation of the GPU image (-m "interpreter or inspect")

TOL = load_config().tolerance
HAS_GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA or ROCm GPU")


def _seed(request) -> int:
    return zlib.crc32(request.node.nodeid.encode())


def _check(case: Case, seed: int, device: str = "cpu", out_dtype=None, tol=None, **kw):
    a, b = make_inputs(case, device, seed=seed)
    ref = reference(case, a, b)
    s = case.shape
    shape = (s.batch, s.m, s.n) if s.batch != 1 else (s.m, s.n)
    dtype = out_dtype or (torch.bfloat16 if case.dtype == "fp8_e4m3" else a.dtype)
    out = torch.full(shape, float("nan"), dtype=dtype, device=device)  # every element must be written
    got = gt.gemm(a, b, allow_tf32=case.dtype == "tf32", out_dtype=out_dtype, out=out, **kw)
    assert got is out
    err = rel_err(got, ref)
    tol = TOL[case.dtype] if tol is None else tol
    assert err <= tol, f"{case.label()} seed {seed}: relative error {err:.3g} > {tol:g}"
    return err


SHAPES = [
    GemmShape(1, 1, 1),
    GemmShape(7, 7, 7),
    GemmShape(127, 33, 7),
    GemmShape(33, 127, 65),
    GemmShape(1, 127, 33),
    GemmShape(127, 1, 130),
    GemmShape(33, 7, 127, trans_a=True),
    GemmShape(7, 33, 127, trans_b=True),
    GemmShape(65, 33, 47, trans_a=True, trans_b=True),
    GemmShape(33, 17, 19, batch=3),
    GemmShape(17, 33, 7, batch=2, trans_a=True, trans_b=True),
]


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.label().replace(" ", "_"))
def test_interpreted_matches_float64(shape, dtype, request):
    _check(Case("gemm", shape, dtype), _seed(request))


# Tiles that divide none of the sizes below; group sizes that do not divide the tile rows.
CONFIGS = [
    cfgs.TileConfig(32, 16, 16, 4, 1, group_m=3),
    cfgs.TileConfig(16, 32, 32, 4, 1, group_m=2, persistent=True),
]


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.label().replace(" ", "_"))
@pytest.mark.parametrize(
    "shape",
    [GemmShape(100, 75, 41), GemmShape(37, 49, 53, batch=2, trans_b=True)],
    ids=lambda s: s.label().replace(" ", "_"),
)
def test_tile_edges_and_persistent_loop(shape, cfg, dtype, request):
    _check(Case("gemm", shape, dtype), _seed(request), config=cfg)


# TMA needs 16-byte aligned strides: K and N multiples of 8 (fp16/bf16), M and N of tiles they are not.
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize(
    "shape",
    [GemmShape(40, 24, 56), GemmShape(24, 40, 72, batch=2, trans_a=True), GemmShape(56, 16, 40, trans_b=True)],
    ids=lambda s: s.label().replace(" ", "_"),
)
def test_tensor_descriptor_kernel(shape, persistent, dtype, request):
    cfg = cfgs.TileConfig(32, 16, 32, 4, 1, group_m=2, persistent=persistent)
    _check(Case("gemm", shape, dtype), _seed(request), config=cfg, tma=True)


def test_tensor_descriptor_refuses_unaligned_operands():
    a, b = make_inputs(Case("gemm", GemmShape(8, 8, 7), "fp16"))
    with pytest.raises(Unsupported, match="aligned"):
        gt.gemm(a, b, tma=True)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_fp32_output(dtype, request):
    # fp16/bf16 operands are exact in fp32: only the fp32 accumulation order remains.
    _check(Case("gemm", GemmShape(45, 38, 97), dtype), _seed(request), out_dtype=torch.float32, tol=TOL["fp32"])


@pytest.mark.skipif(gt.FP8 is None, reason="this torch has no float8_e4m3fn")
def test_fp8_interpreted(request):
    _check(Case("gemm", GemmShape(33, 40, 48), "fp8_e4m3"), _seed(request))


def test_bf16_interpreted_without_upcast_is_wrong():
    """Why UPCAST exists: the interpreter multiplies bf16 bit patterns as integers."""
    case = Case("gemm", GemmShape(16, 16, 16), "bf16")
    a, b = make_inputs(case, seed=3)
    c = torch.empty(16, 16, dtype=torch.bfloat16)
    cfg = cfgs.TileConfig(16, 16, 16, 4, 1)
    gt._launch(a.unsqueeze(0), b.unsqueeze(0), c.unsqueeze(0), cfg, "ieee", interpret=True, tma=False, upcast=False)
    assert not rel_err(c, reference(case, a, b)) <= 1.0


def test_no_environment_needed_and_compiled_kernel_untouched():
    # The provider interprets CPU tensors by itself; the compiled kernel objects stay compiled ones and
    # the interpreter's helper names do not leak into the module.
    from triton.runtime.jit import JITFunction

    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        pytest.skip("TRITON_INTERPRET is set in this environment")
    case = Case("gemm", GemmShape(9, 10, 11), "fp16")
    a, b = make_inputs(case, seed=5)
    assert rel_err(gt.gemm(a, b), reference(case, a, b)) <= TOL["fp16"]
    assert isinstance(gt._gemm_kernel, JITFunction) and isinstance(gt._gemm_tile, JITFunction)
    assert "interpreter_builder" not in vars(gt)


def test_refusals():
    x16 = torch.randn(4, 4, dtype=torch.float16)
    x32 = torch.randn(4, 4)
    with pytest.raises(Unsupported, match="mixed"):
        gt.gemm(x16, x32)
    with pytest.raises(Unsupported, match="TF32"):
        gt.gemm(x32, x32, allow_tf32=True)  # the interpreter has no TF32 rounding
    with pytest.raises(Unsupported, match="rank"):
        gt.gemm(x16, x16.unsqueeze(0))
    with pytest.raises(ValueError, match="do not multiply"):
        gt.gemm(torch.randn(4, 5), torch.randn(4, 5))
    big = torch.empty(2048, 2048, dtype=torch.bfloat16)
    with pytest.raises(Unsupported, match="too large for the Triton interpreter"):
        gt.gemm(big, big)
    with pytest.raises(ValueError, match="out is"):
        gt.gemm(x16, x16, out=torch.empty(4, 5, dtype=torch.float16))


def test_registered_provider_on_cpu():
    p = registry.get("gemm", "triton")
    assert p is not None and not p.baseline
    dev = cpu_device()
    assert p.unavailable_reason(dev) is None
    assert p.timed(dev) == triton_runtime.INTERPRETED_REASON


def test_empty_and_k0():
    a = torch.randn(5, 0, dtype=torch.float16)
    b = torch.randn(0, 3, dtype=torch.float16)
    out = torch.full((5, 3), float("nan"), dtype=torch.float16)
    assert torch.equal(gt.gemm(a, b, out=out), torch.zeros(5, 3, dtype=torch.float16))
    assert gt.gemm(torch.randn(0, 4), torch.randn(4, 3)).shape == (0, 3)


# --------------------------------------------------------------------------------------------------
# GPU: the same checks at real sizes (autotuned, the default configuration, and TMA on Hopper).

GPU_SHAPES = [
    GemmShape(4096, 4096, 4096),
    GemmShape(4096, 4096, 4096, trans_b=True),
    GemmShape(1760, 16, 1760),  # DeepBench training
    GemmShape(2560, 7000, 2560, trans_a=True),
    GemmShape(4096, 128, 4096),
    GemmShape(512, 512, 64, batch=96),
    GemmShape(127, 33, 7),
    GemmShape(4097, 1023, 1031),  # odd edges at size
]


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32", "tf32"])
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: s.label().replace(" ", "_"))
@pytest.mark.parametrize("autotune", [True, False], ids=["autotuned", "default"])
@pytest.mark.gpu
@needs_gpu
def test_gpu_matches_float64(shape, dtype, autotune, request):
    _check(Case("gemm", shape, dtype), _seed(request), device="cuda", autotune=autotune)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("tma", [False, True], ids=["pointers", "tma"])
@pytest.mark.gpu
@needs_gpu
def test_gpu_hopper_paths(dtype, tma, request):
    if torch.version.hip or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs an NVIDIA Hopper GPU")
    _check(Case("gemm", GemmShape(2048, 1536, 1000), dtype), _seed(request), device="cuda", tma=tma)


@pytest.mark.gpu
@needs_gpu
def test_gpu_fp8(request):
    if torch.version.hip or torch.cuda.get_device_capability() < (8, 9) or gt.FP8 is None:
        pytest.skip("needs an NVIDIA GPU with fp8 (sm_89+)")
    _check(Case("gemm", GemmShape(4096, 4096, 4096), "fp8_e4m3"), _seed(request), device="cuda")


@pytest.mark.gpu
@needs_gpu
def test_gpu_evidence_reads_the_kernel_that_ran():
    from microbench.core.device import gpu_device
    from microbench.roofline.registry import bind

    dev = gpu_device()
    p = registry.get("gemm", "triton")
    assert p.timed(dev) is None and p.unavailable_reason(dev) is None
    for dtype, expect in (("bf16", "yes"), ("fp32", "no")):
        case = Case("gemm", GemmShape(1024, 1024, 1024), dtype)
        ev = p.evidence(case, dev, bind(p, case, *make_inputs(case, "cuda", seed=1)))
        assert ev.tensor_cores == expect, ev.evidence
        assert "kernel that ran" in ev.evidence


def test_runner_rows_on_cpu_are_interpreted_with_static_evidence():
    """Through the runner, as `python -m microbench.roofline` runs it: correct, untimed, with evidence."""
    from microbench.roofline.ceilings import build_ceilings
    from microbench.roofline.runner import CaseRunner

    cfg = load_config()
    dev = cpu_device()
    runner = CaseRunner(dev, cfg, build_ceilings(dev, cfg, measure_now=False))
    providers = [registry.get("gemm", "torch"), registry.get("gemm", "triton")]
    rows = {r.provider: r for r in runner.run(Case("gemm", GemmShape(33, 7, 127, trans_a=True), "bf16"), providers)}
    t = rows["triton"]
    assert t.status == "ok" and t.rel_err <= TOL["bf16"]
    assert t.time_ms is None and t.tflops is None and t.reason == triton_runtime.INTERPRETED_REASON
    assert t.tensor_cores == "yes" and t.tensor_core_evidence.startswith("static"), t.tensor_core_evidence
    assert rows["torch"].time_ms is not None
