"""Provider `cupy` for gemm: our CUDA C++ Tensor Core GEMM (gemm_mma.cu: mma.sync.m16n8k16 + ldmatrix +
multi-stage cp.async, fp16 / bf16 in, fp32 accumulate), compiled with NVRTC and Triton's ptxas and
launched through CuPy. `cupy_blas` (gemm_vendor.py) stays cuBLAS through cupy.matmul.

Layouts: each operand may be row- or column-major (a transposed view), batched or broadcast; the kernel
reads either directly. Explicit copies, inside the timed call: an operand whose strides or alignment
the kernel cannot read (no unit stride, a leading dimension or batch stride that is not a multiple of
8 elements, a base not 16-byte aligned) is first copied into an aligned row-major buffer; and when N is
not a multiple of 8 the kernel writes a buffer of N rounded up to 8 columns, copied out to a contiguous
result.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from microbench.registry import Unsupported, provider
from microbench.sass import AotBuild

from . import cuda_kernels as ck
from .cuda_kernels import Tile

SOURCE = "gemm_mma.cu"
KERNEL = "cuda_gemm_mma"
# Triton's matmul tutorial's GROUP_M: tile rows walked together for L2 reuse.
GROUP_M = 8
MAX_GRID_Z = 65535  # blockIdx.z carries the batch
INT32_MAX = 2**31 - 1


def gemm_tiles() -> tuple[Tile, ...]:
    """Tile configurations, largest first (the selection takes the first that fills the device). 128x256
    with eight 64x64 warps and 128x128 with four follow CUTLASS's sm_80 fp16 defaults; 64x64 keeps
    small problems from leaving most SMs idle. Four stages keep 3 k-tiles of loads in flight."""
    return (Tile(128, 256, 32, 64, 64, 4), Tile(128, 128, 32, 64, 64, 4), Tile(64, 64, 32, 32, 32, 4))


LAYOUTS = ((True, False), (True, True), (False, False), (False, True))  # (A K-major, B K-major)


def _layout_label(a_kmajor: bool, b_kmajor: bool) -> str:
    # BLAS naming: N = as stored row-major, T = the operand is a transposed (column-major) view
    return ("N" if a_kmajor else "T") + ("T" if b_kmajor else "N")


def kernel_expr(dtype: str, tile: Tile, a_kmajor: bool, b_kmajor: bool) -> str:
    return (f"gemm_mma<{ck.CPP_TYPES[dtype]}, {tile.template_args()}, {str(a_kmajor).lower()}, "
            f"{str(b_kmajor).lower()}>")


def config_label(dtype: str, tile: Tile, a_kmajor: bool, b_kmajor: bool) -> str:
    return f"{dtype} {tile.label} {_layout_label(a_kmajor, b_kmajor)}"


def select_tile(m: int, n: int, batch: int, sms: int, smem_max: int) -> Tile:
    return ck.pick(gemm_tiles(), lambda t: math.ceil(m / t.bm) * math.ceil(n / t.bn) * batch, sms, smem_max)


# ---------------------------------------------------------------------------------------------------
# Static inspection and evidence
# ---------------------------------------------------------------------------------------------------
def _all_configs():
    for dtype in ck.CPP_TYPES:
        for tile in gemm_tiles():
            for a_k, b_k in LAYOUTS:
                yield dtype, tile, a_k, b_k


def all_exprs() -> tuple[str, ...]:
    """Every instantiation the provider can launch: one module per target holds them all."""
    return tuple(kernel_expr(*c) for c in _all_configs())


def aot_builds(target: str) -> list[AotBuild]:
    """Every configuration compiled for `target` (sm_80, sm_90, ...), as the inspection's records."""
    mod = ck.build(SOURCE, all_exprs(), target)
    return [ck.aot_build(mod, kernel_expr(*c), KERNEL, config_label(*c), c[0], c[1].smem_bytes)
            for c in _all_configs()]


def _evidence(case, device, call):
    """The SASS of the very kernel the call launches, for this device's architecture."""
    return ck.evidence_of_launch(_launches, device, call)


# ---------------------------------------------------------------------------------------------------
# The provider
# ---------------------------------------------------------------------------------------------------
_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16"}
_launches = ck.LaunchLog()


def _round8(x: int) -> int:
    return -(-x // 8) * 8


def _copy_row_major(t: torch.Tensor) -> torch.Tensor:
    """An explicit copy into a row-major buffer whose rows are padded to a multiple of 8 elements (a view
    of the logical shape; the padding is never read)."""
    buf = torch.empty(*t.shape[:-1], _round8(t.shape[-1]), dtype=t.dtype, device=t.device)
    view = buf[..., : t.shape[-1]]
    view.copy_(t)
    return view


def _operand(t: torch.Tensor, inner_is_k: bool) -> tuple[torch.Tensor, bool, int, int]:
    """(tensor, K-major?, leading dimension, batch stride) for a [batch, rows, cols] operand, read as it
    is stored where the kernel can (a unit stride, 16-byte aligned base, leading dimension and batch
    stride multiples of 8 elements), else copied. `inner_is_k`: cols is K (A), not N (B). Strides of
    size-1 dimensions mean nothing and are ignored."""
    rows, cols = t.shape[-2:]
    batch_stride = t.stride(0) if t.shape[0] != 1 else 0
    if t.data_ptr() % 16 == 0 and batch_stride % 8 == 0:
        if cols == 1 or t.stride(-1) == 1:  # rows of contiguous cols
            ld = t.stride(-2) if rows != 1 else _round8(cols)
            if ld % 8 == 0:
                return t, inner_is_k, ld, batch_stride
        if rows == 1 or t.stride(-2) == 1:  # a transposed view: columns of contiguous rows
            ld = t.stride(-1) if cols != 1 else _round8(rows)
            if ld % 8 == 0:
                return t, not inner_is_k, ld, batch_stride
    t = _copy_row_major(t)
    return t, inner_is_k, t.stride(-2), t.stride(0) if t.shape[0] != 1 else 0


@provider("gemm", "cupy", library="CUDA C++ mma.sync m16n8k16 + ldmatrix + cp.async (NVRTC, CuPy RawModule)",
          enabled=ck.cupy_kernel_reason, evidence=_evidence)
def gemm_cupy(a: torch.Tensor, b: torch.Tensor, *, allow_tf32: bool = False) -> torch.Tensor:
    if a.dtype != b.dtype:
        raise Unsupported(f"mixed operand dtypes {a.dtype} and {b.dtype}")
    if a.dtype not in _DTYPES:
        raise Unsupported(f"{a.dtype}: the kernel takes fp16 / bf16 operands (fp32 accumulation)")
    if a.device.type != "cuda" or b.device != a.device:
        raise Unsupported("needs both operands on the same CUDA device")
    if a.dim() not in (2, 3) or b.dim() not in (2, 3):
        raise Unsupported(f"operands of {a.dim()} and {b.dim()} dimensions (2 or 3 supported)")
    m, k = a.shape[-2:]
    k2, n = b.shape[-2:]
    if k != k2:
        raise ValueError(f"inner dimensions differ: {tuple(a.shape)} @ {tuple(b.shape)}")
    batch_a = a.shape[0] if a.dim() == 3 else 1
    batch_b = b.shape[0] if b.dim() == 3 else 1
    if batch_a != batch_b and 1 not in (batch_a, batch_b):
        raise ValueError(f"batch dimensions differ: {tuple(a.shape)} @ {tuple(b.shape)}")
    batch = max(batch_a, batch_b)
    out_shape = ((batch,) if max(a.dim(), b.dim()) == 3 else ()) + (m, n)
    if max(m, n, k) > INT32_MAX or batch > MAX_GRID_Z:
        raise Unsupported(f"sizes beyond the kernel's 32-bit indices or grid: {tuple(a.shape)} @ {tuple(b.shape)}")
    if m == 0 or n == 0 or k == 0:
        return torch.zeros(out_shape, dtype=a.dtype, device=a.device)

    a3 = a if a.dim() == 3 else a.unsqueeze(0)
    b3 = b if b.dim() == 3 else b.unsqueeze(0)
    a3, a_kmajor, lda, sa = _operand(a3, inner_is_k=True)
    b3, b_kmajor, ldb, sb = _operand(b3, inner_is_k=False)
    ldc = _round8(n)  # the kernel stores pairs up to a multiple of 8 columns (store_tile)
    c = torch.empty((batch, m, ldc), dtype=a.dtype, device=a.device)

    dev = a.device.index
    dtype = _DTYPES[a.dtype]
    tile = select_tile(m, n, batch, ck.sm_count(dev), ck.smem_limit(dev))
    target = ck.target_of(a)
    expr = kernel_expr(dtype, tile, a_kmajor, b_kmajor)
    kernel = ck.load(SOURCE, all_exprs(), expr, dev, target, tile.smem_bytes)
    _launches.record(SOURCE, all_exprs(), expr, KERNEL, config_label(dtype, tile, a_kmajor, b_kmajor), dtype, tile.smem_bytes)
    grid = (math.ceil(m / tile.bm) * math.ceil(n / tile.bn), 1, batch)
    i32, i64 = np.int32, np.int64
    args = (ck.as_cupy(a3), ck.as_cupy(b3), ck.as_cupy(c), i32(m), i32(n), i32(k), i64(lda), i64(ldb), i32(ldc),
            i64(sa), i64(sb), i32(GROUP_M))
    ck.launch(kernel, grid, (tile.threads, 1, 1), tile.smem_bytes, args, a)
    if ldc != n:
        c = c[..., :n].contiguous()  # explicit copy out of the padded buffer (N not a multiple of 8)
    return c.view(out_shape)
