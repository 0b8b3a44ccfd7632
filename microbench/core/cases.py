"""Inputs, float64 references and the correctness check: written once, imported by the runner, the
benchmark tests and the kernel tests alike."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from microbench.core.shapes import Case, ConvShape, GemmShape

TORCH_DTYPES = {
    "fp32": torch.float32,
    "tf32": torch.float32,  # fp32 storage; TF32 Tensor Core math allowed
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp8_e4m3": getattr(torch, "float8_e4m3fn", None),
}


def torch_dtype(dtype: str) -> torch.dtype:
    t = TORCH_DTYPES.get(dtype)
    if t is None:
        raise ValueError(f"dtype {dtype!r} is not available in torch {torch.__version__}")
    return t


def _random(shape, dtype: str, device, gen: torch.Generator) -> torch.Tensor:
    # Standard normal values, never zeros or constants: a kernel timed on zeros can run faster than on
    # real data (measured: 894 vs 769-798 TFLOP/s bf16 on an H200) and an all-zero output would pass.
    t = torch.randn(shape, generator=gen, dtype=torch.float32, device="cpu")
    if dtype == "fp8_e4m3":
        t = t * 0.5  # keep within e4m3's range with room for the K-sum in the reference
    return t.to(device=device, dtype=torch_dtype(dtype))


def make_inputs(case: Case, device: str = "cpu", seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh random operands with the layouts the case describes.

    GEMM: logical A [B?, M, K] and B [B?, K, N]; a transposed operand is stored column-major (a transposed
    view of a contiguous tensor). conv2d: NHWC (channels_last) tensors in logical NCHW order.
    """
    gen = torch.Generator().manual_seed(seed)
    s = case.shape
    if isinstance(s, GemmShape):
        lead = (s.batch,) if s.batch != 1 else ()
        a = _random(lead + ((s.k, s.m) if s.trans_a else (s.m, s.k)), case.dtype, device, gen)
        b = _random(lead + ((s.n, s.k) if s.trans_b else (s.k, s.n)), case.dtype, device, gen)
        return (a.transpose(-1, -2) if s.trans_a else a), (b.transpose(-1, -2) if s.trans_b else b)
    assert isinstance(s, ConvShape)
    x_shape, w_shape, y_shape = conv_tensor_shapes(s)
    first, second = {"conv2d_fwd": (x_shape, w_shape), "conv2d_bwd_data": (y_shape, w_shape),
                     "conv2d_bwd_weight": (x_shape, y_shape)}[case.op]
    cl = torch.channels_last
    return (_random(first, case.dtype, device, gen).contiguous(memory_format=cl),
            _random(second, case.dtype, device, gen).contiguous(memory_format=cl))


def conv_tensor_shapes(s: ConvShape) -> tuple[tuple, tuple, tuple]:
    """(input, weight, output) shapes in logical NCHW / KCRS order."""
    return (s.n, s.c, s.h, s.w), (s.k, s.c // s.groups, s.r, s.s), (s.n, s.k, s.p, s.q)


def conv_reference(direction: str, a: torch.Tensor, b: torch.Tensor, s: ConvShape) -> torch.Tensor:
    """The convolution in whatever dtype a and b have (the float64 reference, and the vendor provider)."""
    kw = dict(stride=s.stride, padding=s.pad, dilation=s.dilation, groups=s.groups)
    x_shape, w_shape, _ = conv_tensor_shapes(s)
    if direction == "fwd":
        return F.conv2d(a, b, **kw)
    if direction == "bwd_data":
        return torch.nn.grad.conv2d_input(x_shape, b, a, **kw)
    if direction == "bwd_weight":
        return torch.nn.grad.conv2d_weight(a, w_shape, b, **kw)
    raise ValueError(f"unknown conv direction {direction!r}")


def reference(case: Case, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """float64 result from the same (already rounded) operands."""
    a64, b64 = a.to(torch.float64), b.to(torch.float64)
    if case.family == "gemm":
        return torch.matmul(a64, b64)
    return conv_reference(case.direction, a64, b64, case.shape)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref||_F / ||ref||_F; infinite for a wrong shape or a non-finite output."""
    if tuple(out.shape) != tuple(ref.shape):
        return float("inf")
    o = out.to(device=ref.device, dtype=torch.float64)
    if not torch.isfinite(o).all():
        return float("inf")
    denom = torch.linalg.vector_norm(ref)
    if denom == 0:
        return float(torch.linalg.vector_norm(o))
    return float(torch.linalg.vector_norm(o - ref) / denom)
