"""GEMM providers of our CUDA C++ kernels, compiled with NVRTC and Triton's ptxas and launched through
CuPy (`cupy_blas`, in gemm_vendor.py, stays cuBLAS through cupy.matmul):

- `cupy`: gemm_mma.cu, Tensor Cores through mma.sync.m16n8k16 + ldmatrix + a multi-stage cp.async
  pipeline (sm_80 and newer), fp16 / bf16 in, fp32 accumulate. The default.
- `cupy_wgmma`: gemm_wgmma.cu, Hopper's wgmma.mma_async.m64n128k16 (sm_90 only). UNVERIFIED ON HARDWARE
  (see the .cu); named in no bench.toml profile, so it runs only where a profile asks for it.

Layouts (`cupy`): each operand may be row- or column-major (a transposed view), batched or broadcast;
the kernel reads either directly. `cupy_wgmma` reads K-major operands only (A row-major, B column-
major, i.e. B given as a transposed view of an N x K tensor) and copies the others. Explicit copies,
inside the timed call, in both: an operand whose strides or alignment the kernel cannot read (no unit
stride, a leading dimension or batch stride that is not a multiple of 8 elements, a base not 16-byte
aligned) is first copied into an aligned buffer; and when N is not a multiple of 8 the kernel writes a
buffer of N rounded up to 8 columns, copied out to a contiguous result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np
import torch

from microbench.core import dtypes
from microbench.roofline.registry import Unsupported, provider
from microbench.roofline.sass import AotBuild, ptxas_arch

from . import cuda_kernels as ck
from .cuda_kernels import Tile

SOURCE = "gemm_mma.cu"
KERNEL = "cuda_gemm_mma"
WGMMA_SOURCE = "gemm_wgmma.cu"
WGMMA_KERNEL = "cuda_gemm_wgmma"
# Triton's matmul tutorial's GROUP_M: tile rows walked together for L2 reuse.
GROUP_M = 8
MAX_GRID_Z = 65535  # blockIdx.z carries the batch
INT32_MAX = 2**31 - 1


def gemm_tiles() -> tuple[Tile, ...]:
    """mma.sync tile configurations, largest first (the selection takes the first that fills the
    device). 128x256 with eight 64x64 warps and 128x128 with four follow CUTLASS's sm_80 fp16 defaults;
    64x64 keeps small problems from leaving most SMs idle. Four stages keep 3 k-tiles of loads in flight."""
    return (Tile(128, 256, 32, 64, 64, 4), Tile(128, 128, 32, 64, 64, 4), Tile(64, 64, 32, 32, 32, 4))


@dataclass(frozen=True)
class WgmmaTile:
    """gemm_wgmma.cu's configuration: BM = 64 per warpgroup, BN = 128 per wgmma, BK = 64."""

    bm: int
    bn: int
    stages: int
    bk: int = 64

    @property
    def threads(self) -> int:
        return 128 * (self.bm // 64)

    @property
    def smem_bytes(self) -> int:
        """wg::Config::SMEM_BYTES: the stages, plus 1024 bytes to align the base to the swizzle pattern."""
        return self.stages * (self.bm + self.bn) * self.bk * 2 + 1024

    @property
    def label(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk} wg{self.bm // 64} s{self.stages}"


def wgmma_tiles() -> tuple[WgmmaTile, ...]:
    """Two m64 warpgroups by two n128 wgmma blocks: 128 fp32 accumulators a thread, 192 KiB of stages."""
    return (WgmmaTile(128, 256, 4),)


LAYOUTS = ((True, False), (True, True), (False, False), (False, True))  # (A K-major, B K-major)


def _layout_label(a_kmajor: bool, b_kmajor: bool) -> str:
    # BLAS naming: N = as stored row-major, T = the operand is a transposed (column-major) view
    return ("N" if a_kmajor else "T") + ("T" if b_kmajor else "N")


def kernel_expr(dtype: str, tile: Tile, a_kmajor: bool, b_kmajor: bool) -> str:
    return f"gemm_mma<{ck.CPP_TYPES[dtype]}, {tile.template_args()}, {str(a_kmajor).lower()}, {str(b_kmajor).lower()}>"


def config_label(dtype: str, tile: Tile, a_kmajor: bool, b_kmajor: bool) -> str:
    return f"{dtype} {tile.label} {_layout_label(a_kmajor, b_kmajor)}"


def wgmma_expr(dtype: str, tile: WgmmaTile) -> str:
    return f"gemm_wgmma<{ck.CPP_TYPES[dtype]}, {tile.bm}, {tile.bn}, {tile.stages}>"


def wgmma_label(dtype: str, tile: WgmmaTile) -> str:
    return f"{dtype} {tile.label} NT (unverified on hardware)"


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


def _wgmma_configs():
    for dtype in ck.CPP_TYPES:
        for tile in wgmma_tiles():
            yield dtype, tile


@cache
def all_exprs() -> tuple[str, ...]:
    """Every mma.sync instantiation the provider can launch: one module per target holds them all."""
    return tuple(kernel_expr(*c) for c in _all_configs())


@cache
def wgmma_exprs() -> tuple[str, ...]:
    return tuple(wgmma_expr(*c) for c in _wgmma_configs())


def wgmma_target(target: str) -> bool:
    """wgmma exists only in the architecture-specific sm_90a."""
    return ptxas_arch(target) == "sm_90a"


def aot_builds(target: str) -> list[AotBuild]:
    """Every configuration compiled for `target` (sm_80, sm_90, ...), as the inspection's records; the
    wgmma kernels for sm_90 only."""
    mod = ck.build(SOURCE, all_exprs(), target)
    out = [ck.aot_build(mod, kernel_expr(*c), KERNEL, config_label(*c), c[0], c[1].smem_bytes) for c in _all_configs()]
    if wgmma_target(target):
        wmod = ck.build(WGMMA_SOURCE, wgmma_exprs(), target)
        out += [
            ck.aot_build(wmod, wgmma_expr(*c), WGMMA_KERNEL, wgmma_label(*c), c[0], c[1].smem_bytes, wants_wgmma=True)
            for c in _wgmma_configs()
        ]
    return out


def _evidence(case, device, call):
    """The SASS of the very kernel the call launches, for this device's architecture."""
    return ck.evidence_of_launch(device, call)


# ---------------------------------------------------------------------------------------------------
# The providers
# ---------------------------------------------------------------------------------------------------
OPERAND_DTYPES = ("fp16", "bf16")  # names of microbench.core.dtypes; fp32 accumulation


def _round8(x: int) -> int:
    return -(-x // 8) * 8


def _copy_row_major(t: torch.Tensor) -> torch.Tensor:
    """An explicit copy into a row-major buffer whose rows are padded to a multiple of 8 elements (a view
    of the logical shape; the padding is never read)."""
    buf = torch.empty(*t.shape[:-1], _round8(t.shape[-1]), dtype=t.dtype, device=t.device)
    view = buf[..., : t.shape[-1]]
    view.copy_(t)
    return view


def _batch_stride(t: torch.Tensor) -> int:
    return t.stride(0) if t.shape[0] != 1 else 0


def _operand(t: torch.Tensor, inner_is_k: bool) -> tuple[torch.Tensor, bool, int, int]:
    """(tensor, K-major?, leading dimension, batch stride) for a [batch, rows, cols] operand, read as it
    is stored where the kernel can (a unit stride, 16-byte aligned base, leading dimension and batch
    stride multiples of 8 elements), else copied. `inner_is_k`: cols is K (A), not N (B). Strides of
    size-1 dimensions mean nothing and are ignored."""
    rows, cols = t.shape[-2:]
    if t.data_ptr() % 16 == 0 and _batch_stride(t) % 8 == 0:
        if cols == 1 or t.stride(-1) == 1:  # rows of contiguous cols
            ld = t.stride(-2) if rows != 1 else _round8(cols)
            if ld % 8 == 0:
                return t, inner_is_k, ld, _batch_stride(t)
        if rows == 1 or t.stride(-2) == 1:  # a transposed view: columns of contiguous rows
            ld = t.stride(-1) if cols != 1 else _round8(rows)
            if ld % 8 == 0:
                return t, not inner_is_k, ld, _batch_stride(t)
    t = _copy_row_major(t)
    return t, inner_is_k, t.stride(-2), _batch_stride(t)


def _k_major(t: torch.Tensor, inner_is_k: bool) -> tuple[torch.Tensor, int, int]:
    """The operand K-major (what gemm_wgmma.cu reads): as stored if it is, else an explicit copy of
    [batch, D, K] with K contiguous, returned as the transposed view the operand's shape asks for."""
    t2, kmajor, ld, bs = _operand(t, inner_is_k)
    if kmajor:
        return t2, ld, bs
    dk = _copy_row_major(t if inner_is_k else t.transpose(-1, -2))  # [batch, D, K], K contiguous
    return (dk if inner_is_k else dk.transpose(-1, -2)), dk.stride(-2), _batch_stride(dk)


@dataclass
class GemmPlan:
    """What a GEMM kernel is given (the kernels' contract, gemm_mma.cu / gemm_wgmma.cu): operand element
    (d, k) at a[z * sa + d * lda + k] when K-major, a[z * sa + k * lda + d] when not (d = m for A, n for
    B); C as [batch, m, ldc] row-major with ldc a multiple of 8 >= n."""

    a: torch.Tensor  # [batch or 1, m, k] view: the kernel receives its data pointer
    b: torch.Tensor  # [batch or 1, k, n] view
    a_kmajor: bool
    b_kmajor: bool
    lda: int
    ldb: int
    sa: int  # batch strides (0: broadcast)
    sb: int
    m: int
    n: int
    k: int
    batch: int
    ldc: int
    out_shape: tuple

    @property
    def empty(self) -> bool:
        """m, n or k is 0: nothing to launch (the result is zeros of out_shape)."""
        return 0 in (self.m, self.n, self.k)


def _check(a: torch.Tensor, b: torch.Tensor) -> None:
    if a.dtype != b.dtype:
        raise Unsupported(f"mixed operand dtypes {a.dtype} and {b.dtype}")
    if dtypes.name_of(a.dtype) not in OPERAND_DTYPES:
        raise Unsupported(f"{a.dtype}: the kernel takes fp16 / bf16 operands (fp32 accumulation)")
    if a.device.type != "cuda" or b.device != a.device:
        raise Unsupported("needs both operands on the same CUDA device")


def plan(a: torch.Tensor, b: torch.Tensor, *, k_major_only: bool = False) -> GemmPlan:
    """Shapes, layouts and the explicit copies for a @ b (any device; no copy for an empty problem).
    `k_major_only`: the wgmma kernel, which reads K-major operands only."""
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
    if max(m, n, k) > INT32_MAX or batch > MAX_GRID_Z:
        raise Unsupported(f"sizes beyond the kernel's 32-bit indices or grid: {tuple(a.shape)} @ {tuple(b.shape)}")
    out_shape = ((batch,) if max(a.dim(), b.dim()) == 3 else ()) + (m, n)
    a3 = a if a.dim() == 3 else a.unsqueeze(0)
    b3 = b if b.dim() == 3 else b.unsqueeze(0)
    if 0 in (m, n, k):
        return GemmPlan(a3, b3, True, False, 0, 0, 0, 0, m, n, k, batch, _round8(n), out_shape)
    if k_major_only:
        (a3, lda, sa), (b3, ldb, sb) = _k_major(a3, inner_is_k=True), _k_major(b3, inner_is_k=False)
        a_kmajor = b_kmajor = True
    else:
        a3, a_kmajor, lda, sa = _operand(a3, inner_is_k=True)
        b3, b_kmajor, ldb, sb = _operand(b3, inner_is_k=False)
    return GemmPlan(a3, b3, a_kmajor, b_kmajor, lda, ldb, sa, sb, m, n, k, batch, _round8(n), out_shape)


def finish(p: GemmPlan, c: torch.Tensor) -> torch.Tensor:
    """The result from the kernel's [batch, m, ldc] buffer."""
    if p.ldc != p.n:
        c = c[..., : p.n].contiguous()  # explicit copy out of the padded buffer (N not a multiple of 8)
    return c.view(p.out_shape)


def _run(
    p: GemmPlan,
    source: str,
    exprs: tuple[str, ...],
    expr: str,
    kernel_name: str,
    label: str,
    dtype: str,
    tile,
    wants_wgmma: bool = False,
) -> torch.Tensor:
    c = torch.empty((p.batch, p.m, p.ldc), dtype=p.a.dtype, device=p.a.device)
    kernel = ck.load(source, exprs, expr, p.a.device.index, ck.target_of(p.a), tile.smem_bytes)
    ck.report(ck.Launch(source, exprs, expr, kernel_name, label, dtype, tile.smem_bytes, wants_wgmma))
    grid = (math.ceil(p.m / tile.bm) * math.ceil(p.n / tile.bn), 1, p.batch)
    i32, i64 = np.int32, np.int64
    args = (
        p.a,
        p.b,
        c,
        i32(p.m),
        i32(p.n),
        i32(p.k),
        i64(p.lda),
        i64(p.ldb),
        i32(p.ldc),
        i64(p.sa),
        i64(p.sb),
        i32(GROUP_M),
    )
    ck.launch(kernel, grid, (tile.threads, 1, 1), tile.smem_bytes, args, p.a)
    return finish(p, c)


@provider(
    "gemm",
    "cupy",
    library="CUDA C++ mma.sync m16n8k16 + ldmatrix + cp.async (NVRTC, CuPy RawModule)",
    enabled=ck.cupy_kernel_reason,
    evidence=_evidence,
)
def gemm_cupy(a: torch.Tensor, b: torch.Tensor, *, allow_tf32: bool = False) -> torch.Tensor:
    _check(a, b)
    p = plan(a, b)
    if p.empty:
        return torch.zeros(p.out_shape, dtype=a.dtype, device=a.device)
    dtype = dtypes.name_of(a.dtype)
    dev = a.device.index
    tile = select_tile(p.m, p.n, p.batch, ck.sm_count(dev), ck.smem_limit(dev))
    return _run(
        p,
        SOURCE,
        all_exprs(),
        kernel_expr(dtype, tile, p.a_kmajor, p.b_kmajor),
        KERNEL,
        config_label(dtype, tile, p.a_kmajor, p.b_kmajor),
        dtype,
        tile,
    )


def _wgmma_reason(device) -> str | None:
    why = ck.cupy_kernel_reason(device)
    if why:
        return why
    if ck.sm_number(device.arch) != 90:
        return f"unavailable: wgmma exists only on sm_90 (Hopper), not {device.arch}"
    return None


@provider(
    "gemm",
    "cupy_wgmma",
    library="CUDA C++ wgmma.mma_async m64n128k16, sm_90a (UNVERIFIED on hardware)",
    enabled=_wgmma_reason,
    evidence=_evidence,
)
def gemm_cupy_wgmma(a: torch.Tensor, b: torch.Tensor, *, allow_tf32: bool = False) -> torch.Tensor:
    _check(a, b)
    if ck.target_of(a) != "sm_90":
        raise Unsupported("wgmma exists only on sm_90 (Hopper)")
    p = plan(a, b, k_major_only=True)
    if p.empty:
        return torch.zeros(p.out_shape, dtype=a.dtype, device=a.device)
    dtype = dtypes.name_of(a.dtype)
    tile = wgmma_tiles()[0]
    if tile.smem_bytes > ck.smem_limit(a.device.index):
        raise Unsupported(f"{tile.smem_bytes} bytes of shared memory do not fit this device")
    return _run(
        p,
        WGMMA_SOURCE,
        wgmma_exprs(),
        wgmma_expr(dtype, tile),
        WGMMA_KERNEL,
        wgmma_label(dtype, tile),
        dtype,
        tile,
        wants_wgmma=True,
    )
