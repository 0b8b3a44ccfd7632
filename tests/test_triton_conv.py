"""Triton convolution (kernels/conv_triton.py): implicit GEMM over NHWC tensors, forward, backward-data
and backward-weight.

On a CPU under Triton's interpreter: stride 2, 1x1, 3x3, 7x7 with padding 3, dilation, odd spatial sizes,
stride-2 backward-data (the phase decomposition, including phases no tap reaches), split reductions of
backward-weight. Each check draws its own operands (seed from its test id), poisons the output with NaN,
and compares with float64 within the dtype's tolerance from bench.toml. groups != 1 must answer
Unsupported. The `gpu` tests run ResNet-50 layers at batch 32 where PyTorch sees a GPU; nothing here has
run them.
"""

from __future__ import annotations

import zlib

import pytest
import torch

from microbench.core.cases import make_inputs, reference, rel_err
from microbench.core.config import load_config
from microbench.core.ops.conv2d import tensor_shapes as conv_tensor_shapes
from microbench.core.shapes import CONV_DIRECTIONS, Case, ConvShape
from microbench.kernels import conv_triton as ct
from microbench.kernels import triton_configs as cfgs
from microbench.roofline import registry
from microbench.roofline.registry import Unsupported

pytestmark = [
    pytest.mark.interpreter,
    pytest.mark.slow,
]  # .ci/run's image simulation selects interpreter; minutes in all

TOL = load_config().tolerance
HAS_GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA or ROCm GPU")


def _seed(request) -> int:
    return zlib.crc32(request.node.nodeid.encode())


def _check(case: Case, seed: int, device: str = "cpu", **kw):
    a, b = make_inputs(case, device, seed=seed)
    ref = reference(case, a, b)
    x, w, y = conv_tensor_shapes(case.shape)
    out_shape = {"fwd": y, "bwd_data": x, "bwd_weight": w}[case.direction]
    out = torch.full(out_shape, float("nan"), dtype=a.dtype, device=device).contiguous(
        memory_format=torch.channels_last
    )
    got = ct.conv2d(a, b, shape=case.shape, direction=case.direction, allow_tf32=case.dtype == "tf32", out=out, **kw)
    assert got is out
    err = rel_err(got, ref)
    assert err <= TOL[case.dtype], f"{case.label()} seed {seed}: relative error {err:.3g} > {TOL[case.dtype]:g}"


SHAPES = [
    ConvShape(2, 5, 9, 11, 7, 3, 3, pad=(1, 1)),  # 3x3, odd sizes and channel counts
    ConvShape(2, 6, 9, 9, 5, 3, 3, stride=(2, 2), pad=(1, 1)),  # stride 2
    ConvShape(1, 3, 13, 15, 4, 7, 7, stride=(2, 2), pad=(3, 3)),  # ResNet's stem: 7x7, stride 2, pad 3
    ConvShape(2, 8, 7, 7, 6, 1, 1),  # 1x1
    ConvShape(2, 8, 8, 9, 6, 1, 1, stride=(2, 2)),  # 1x1 stride 2: half the input pixels get no gradient
    ConvShape(1, 4, 11, 10, 3, 3, 3, stride=(2, 3), pad=(2, 1), dilation=(2, 1)),
    ConvShape(1, 4, 12, 12, 3, 3, 2, stride=(3, 2), pad=(0, 1), dilation=(2, 3)),  # phases without taps
    ConvShape(3, 17, 5, 6, 19, 2, 3, pad=(1, 2)),  # even filter, pad larger than needed
]


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("direction", CONV_DIRECTIONS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.label().replace(" ", "_"))
def test_interpreted_matches_float64(shape, direction, dtype, request):
    _check(Case(f"conv2d_{direction}", shape, dtype), _seed(request))


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("direction", CONV_DIRECTIONS)
def test_tiles_smaller_than_the_problem(direction, dtype, request):
    # Several tiles along every GEMM dimension, channel blocks that do not divide the channels.
    shape = ConvShape(2, 20, 9, 10, 24, 3, 3, stride=(2, 2), pad=(1, 1))
    _check(
        Case(f"conv2d_{direction}", shape, dtype), _seed(request), config=cfgs.TileConfig(16, 16, 16, 4, 1, group_m=3)
    )


@pytest.mark.parametrize("split_k", [2, 3, 50])
def test_bwd_weight_split_reduction(split_k, request, monkeypatch):
    shape = ConvShape(3, 6, 11, 9, 5, 3, 3, stride=(2, 1), pad=(1, 1))
    splits = []
    real = ct._split_count
    monkeypatch.setattr(ct, "_split_count", lambda *a, **k: splits.append(real(*a, **k)) or splits[-1])
    _check(Case("conv2d_bwd_weight", shape, "fp16"), _seed(request), split_k=split_k)
    assert splits and splits[0] > 1  # the partial-sum path ran


def test_split_count():
    assert ct._split_count(tiles=1, red=100_000, block_k=64, sms=132, split_k=None) > 1
    assert ct._split_count(tiles=1000, red=100_000, block_k=64, sms=132, split_k=None) == 1
    assert ct._split_count(tiles=1, red=64, block_k=64, sms=132, split_k=8) == 1  # never more splits than steps


def test_tap_phases_cover_every_tap_once():
    # Every (input pixel, tap) pair with an integral output pixel belongs to exactly one phase's progression.
    for stride, pad, dil, taps in [(2, 1, 1, 3), (2, 3, 1, 7), (3, 0, 2, 3), (2, 2, 2, 3), (1, 1, 1, 3)]:
        for h in range(12):
            r0, step, count, base, dstep = ct._taps(h % stride, stride, pad, dil, taps)
            expected = [r for r in range(taps) if (h + pad - r * dil) % stride == 0]
            assert list(range(r0, r0 + step * count, step)) == expected
            for t, r in enumerate(expected):
                assert h // stride + base - dstep * t == (h + pad - r * dil) // stride


def test_output_is_channels_last(request):
    case = Case("conv2d_fwd", ConvShape(1, 8, 6, 6, 8, 3, 3, pad=(1, 1)), "fp16")
    a, b = make_inputs(case, seed=_seed(request))
    y = ct.conv2d(a, b, shape=case.shape, direction="fwd")
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert rel_err(y, reference(case, a, b)) <= TOL["fp16"]


def test_refusals():
    grouped = ConvShape(1, 4, 6, 6, 4, 3, 3, pad=(1, 1), groups=2)
    a, b = make_inputs(Case("conv2d_fwd", grouped, "fp16"))
    with pytest.raises(Unsupported, match="groups = 2"):
        ct.conv2d(a, b, shape=grouped, direction="fwd")
    s = ConvShape(1, 4, 6, 6, 4, 3, 3)
    a, b = make_inputs(Case("conv2d_fwd", s, "fp32"))
    with pytest.raises(Unsupported, match="TF32"):
        ct.conv2d(a, b, shape=s, direction="fwd", allow_tf32=True)
    with pytest.raises(ValueError, match="expected"):
        ct.conv2d(b, a, shape=s, direction="fwd")
    big = ConvShape(8, 64, 56, 56, 64, 3, 3, pad=(1, 1))
    a, b = make_inputs(Case("conv2d_fwd", big, "bf16"))
    with pytest.raises(Unsupported, match="too large for the Triton interpreter"):
        ct.conv2d(a, b, shape=big, direction="fwd")


def test_registered_provider_answers_groups_unsupported():
    from microbench.roofline.registry import bind

    p = registry.get("conv2d", "triton")
    case = Case("conv2d_bwd_data", ConvShape(1, 4, 6, 6, 4, 3, 3, groups=4), "fp16")
    with pytest.raises(Unsupported):
        bind(p, case, *make_inputs(case))()


# --------------------------------------------------------------------------------------------------
# GPU: ResNet-50 layers at batch 32 (stem, 1x1, 3x3, stride 2), autotuned and default configurations.

GPU_SHAPES = [
    ConvShape(32, 3, 224, 224, 64, 7, 7, stride=(2, 2), pad=(3, 3)),
    ConvShape(32, 64, 56, 56, 64, 3, 3, pad=(1, 1)),
    ConvShape(32, 64, 56, 56, 256, 1, 1),
    ConvShape(32, 128, 56, 56, 128, 3, 3, stride=(2, 2), pad=(1, 1)),
    ConvShape(32, 512, 7, 7, 512, 3, 3, pad=(1, 1)),
    ConvShape(32, 2048, 7, 7, 512, 1, 1),
]


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32", "tf32"])
@pytest.mark.parametrize("direction", CONV_DIRECTIONS)
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: s.label().replace(" ", "_"))
@pytest.mark.parametrize("autotune", [True, False], ids=["autotuned", "default"])
@pytest.mark.gpu
@needs_gpu
def test_gpu_matches_float64(shape, direction, dtype, autotune, request):
    _check(Case(f"conv2d_{direction}", shape, dtype), _seed(request), device="cuda", autotune=autotune)
