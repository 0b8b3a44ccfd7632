"""Provider `cupy` for conv2d: our CUDA C++ implicit-GEMM convolution over NHWC on Tensor Cores
(conv_implicit.cu, on the GEMM's mma.sync / ldmatrix / cp.async building blocks), forward only, fp16 /
bf16 in, fp32 accumulate, compiled with NVRTC and Triton's ptxas and launched through CuPy.

Inputs are channels-last (NHWC) tensors in logical NCHW order, the weights channels-last too (KRSC);
the output is channels-last. Backward directions, groups != 1 and fp32 raise Unsupported. Explicit
copies, inside the timed call: an operand that is not channels-last contiguous or not 16-byte aligned
is made so, and a channel count that is not a multiple of 8 is zero-padded to one (in x and w alike;
the padded channels add exact zeros, e.g. ResNet's first layer, C = 3 -> 8); and when K is not a
multiple of 8 the kernel writes a buffer of K rounded up to 8 channels, copied out into y.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np
import torch

from microbench.core import dtypes
from microbench.roofline.registry import Unsupported, provider
from microbench.roofline.sass import AotBuild

from . import cuda_kernels as ck
from .cuda_kernels import Tile

SOURCE = "conv_implicit.cu"
KERNEL = "cuda_conv2d_fwd_implicit"
GROUP_M = 8
INT32_MAX = 2**31 - 1


def conv_tiles() -> tuple[Tile, ...]:
    """Tile configurations, largest first: the GEMM's M is the output pixels (large), its N the output
    channels (64..2048 in ResNet-50), so the narrower 128x64 tile serves the many 64-channel layers."""
    return (Tile(128, 128, 32, 64, 64, 4), Tile(128, 64, 32, 64, 32, 4), Tile(64, 64, 32, 32, 32, 4))


def kernel_expr(dtype: str, tile: Tile) -> str:
    return f"conv2d_fwd_nhwc<{ck.CPP_TYPES[dtype]}, {tile.template_args()}>"


def config_label(dtype: str, tile: Tile) -> str:
    return f"{dtype} {tile.label} NHWC fwd"


def select_tile(m: int, k: int, sms: int, smem_max: int) -> Tile:
    # Tiles wider than the output channels (rounded up to 64) would compute mostly padding.
    tiles = [t for t in conv_tiles() if t.bn <= max(64, -(-k // 64) * 64)]
    return ck.pick(tiles, lambda t: math.ceil(m / t.bm) * math.ceil(k / t.bn), sms, smem_max)


def _all_configs():
    for dtype in ck.CPP_TYPES:
        for tile in conv_tiles():
            yield dtype, tile


@cache
def all_exprs() -> tuple[str, ...]:
    return tuple(kernel_expr(*c) for c in _all_configs())


def aot_builds(target: str) -> list[AotBuild]:
    """Every configuration compiled for `target` (sm_80, sm_90, ...), as the inspection's records."""
    mod = ck.build(SOURCE, all_exprs(), target)
    return [ck.aot_build(mod, kernel_expr(*c), KERNEL, config_label(*c), c[0], c[1].smem_bytes) for c in _all_configs()]


OPERAND_DTYPES = ("fp16", "bf16")  # names of microbench.core.dtypes; fp32 accumulation


def _evidence(case, device, call):
    """The SASS of the very kernel the call launches, for this device's architecture."""
    return ck.evidence_of_launch(device, call)


def _nhwc(t: torch.Tensor, channels: int) -> torch.Tensor:
    """t (logical N C H W, any layout) as a contiguous, 16-byte aligned N H W C' tensor with C' =
    `channels` >= C (zero-padded): the view itself when it already is one, else an explicit copy."""
    v = t.permute(0, 2, 3, 1)
    if channels == t.shape[1] and v.is_contiguous() and v.data_ptr() % 16 == 0:
        return v
    out = torch.zeros(*v.shape[:3], channels, dtype=t.dtype, device=t.device)
    out[..., : t.shape[1]] = v
    return out


@dataclass
class ConvPlan:
    """What the kernel is given (conv_implicit.cu's contract): x as contiguous N H W C8, w as contiguous
    K R S C8 (C8 = C rounded up to 8, zero-padded), y written as [N * P * Q, ldy] row-major, ldy a
    multiple of 8 >= K; geometry = (n, h, w, c8, k, r, s, p, q, stride_h, stride_w, pad_h, pad_w,
    dilation_h, dilation_w)."""

    x: torch.Tensor
    w: torch.Tensor
    geometry: tuple
    m: int  # GEMM rows: output pixels
    k: int  # GEMM columns: output channels
    ldy: int
    out_shape: tuple  # (n, k, p, q), channels-last

    @property
    def empty(self) -> bool:
        """No output, or nothing to sum (C = 0): the result is zeros of out_shape."""
        return 0 in (self.m, self.k, self.geometry[3])


def _check(a: torch.Tensor, b: torch.Tensor, shape, direction: str) -> None:
    if direction != "fwd":
        raise Unsupported(f"conv2d {direction}: only the forward convolution is implemented")
    if shape.groups != 1:
        raise Unsupported(f"groups = {shape.groups}: only dense convolutions (groups = 1)")
    if a.dtype != b.dtype:
        raise Unsupported(f"mixed operand dtypes {a.dtype} and {b.dtype}")
    if dtypes.name_of(a.dtype) not in OPERAND_DTYPES:
        raise Unsupported(f"{a.dtype}: the kernel takes fp16 / bf16 operands (fp32 accumulation)")
    if a.device.type != "cuda" or b.device != a.device:
        raise Unsupported("needs both operands on the same CUDA device")


def plan(a: torch.Tensor, b: torch.Tensor, shape) -> ConvPlan:
    """Layouts and the explicit copies for the forward convolution of a (N C H W) with b (K C R S)."""
    n, c, h, w = a.shape
    k, c_w, r, s = b.shape
    if c_w != c:
        raise ValueError(f"input has {c} channels, the weights {c_w}")
    p, q = shape.p, shape.q
    m = n * p * q
    c8 = -(-c // 8) * 8
    if max(m, k, r * s * c8) > INT32_MAX:
        raise Unsupported("sizes beyond the kernel's 32-bit GEMM indices")
    geometry = (n, h, w, c8, k, r, s, p, q, *shape.stride, *shape.pad, *shape.dilation)
    empty = 0 in (m, k, c)
    return ConvPlan(
        a if empty else _nhwc(a, c8), b if empty else _nhwc(b, c8), geometry, m, k, -(-k // 8) * 8, (n, k, p, q)
    )


def output(p: ConvPlan, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, the buffer the kernel writes as N P Q ldy): the same memory when ldy == K."""
    y = torch.empty(p.out_shape, dtype=like.dtype, device=like.device, memory_format=torch.channels_last)
    if p.ldy == p.k:
        return y, y.permute(0, 2, 3, 1)
    n, _, pp, q = p.out_shape
    return y, torch.empty((n, pp, q, p.ldy), dtype=like.dtype, device=like.device)


def finish(p: ConvPlan, y: torch.Tensor, y_nhwc: torch.Tensor) -> torch.Tensor:
    if p.ldy != p.k:
        y.copy_(y_nhwc[..., : p.k].permute(0, 3, 1, 2))  # explicit copy out of the padded buffer
    return y


@provider(
    "conv2d",
    "cupy",
    library="CUDA C++ implicit GEMM, NHWC, mma.sync m16n8k16 (NVRTC, CuPy RawModule)",
    enabled=ck.cupy_kernel_reason,
    evidence=_evidence,
)
def conv2d_cupy(a: torch.Tensor, b: torch.Tensor, *, shape, direction: str, allow_tf32: bool = False) -> torch.Tensor:
    _check(a, b, shape, direction)
    p = plan(a, b, shape)
    y, y_nhwc = output(p, a)
    if p.empty:
        return y.zero_()
    dev = a.device.index
    dtype = dtypes.name_of(a.dtype)
    tile = select_tile(p.m, p.k, ck.sm_count(dev), ck.smem_limit(dev))
    expr = kernel_expr(dtype, tile)
    kernel = ck.load(SOURCE, all_exprs(), expr, dev, ck.target_of(a), tile.smem_bytes)
    ck.report(ck.Launch(SOURCE, all_exprs(), expr, KERNEL, config_label(dtype, tile), dtype, tile.smem_bytes))
    grid = (math.ceil(p.m / tile.bm) * math.ceil(p.k / tile.bn), 1, 1)
    i32 = np.int32
    args = (p.x, p.w, y_nhwc, *(i32(v) for v in p.geometry), i32(p.ldy), i32(GROUP_M))
    ck.launch(kernel, grid, (tile.threads, 1, 1), tile.smem_bytes, args, a)
    return finish(p, y, y_nhwc)
