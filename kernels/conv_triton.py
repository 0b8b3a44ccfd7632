"""2-D convolution in Triton as an implicit GEMM over NHWC (channels-last) tensors: provider `triton` of
the `conv2d` op, in the three directions of a training step.

    fwd:        y[n,k,p,q]  = sum_{c,r,s}  x[n,c,p*sh-ph+r*dh, q*sw-pw+s*dw] * w[k,c,r,s]
                GEMM rows (n,p,q), columns k, reduction (r,s,c)
    bwd_data:   dx[n,c,h,w] = sum_{k,r,s}  dy[n,k,p,q] * w[k,c,r,s]   where h = p*sh-ph+r*dh, w likewise
                GEMM rows (n,h,w), columns c, reduction (r,s,k)
    bwd_weight: dw[k,c,r,s] = sum_{n,p,q}  dy[n,k,p,q] * x[n,c,p*sh-ph+r*dh, q*sw-pw+s*dw]
                GEMM rows k, columns (r,s,c), reduction (n,p,q), split over programs when it is long

No im2col buffer: each program gathers its operand tiles straight from the NHWC tensors (channels are
contiguous, so a tile row is a contiguous run of channels) and masks the padding. Stride, padding and
dilation are runtime values (the JIT still specializes the ones equal to 1). groups = 1 only; other
group counts raise Unsupported.

bwd_data with stride > 1: an input pixel h receives gradient only from the taps r with
(h + ph - r*dh) divisible by sh. Instead of masking the others (sh*sw times the work, most of it on
zeros), the input pixels are split into sh*sw phases (h mod sh, w mod sw); within one phase the valid taps
form an arithmetic progression known on the host, so each phase is a dense implicit GEMM of its own launch.
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from microbench.core import dtypes, targets
from microbench.core.shapes import ConvShape
from microbench.roofline.registry import Unsupported, provider
from microbench.roofline.sass import inspect_build

from . import triton_configs as cfgs
from .gemm_triton import device_family, input_precision, precision_key
from .triton_runtime import (
    aot_build,
    aot_compile,
    autotune,
    autotune_enabled,
    grouped_tile,
    interpreted,
    interpreter_refusal,
    planned,
    provider_enabled,
    provider_evidence,
    provider_timed,
    record_plan,
    report_launch,
)


@triton.jit
def _conv_fwd_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    N,
    C,
    H,
    W,
    K,
    P,
    Q,
    R,
    S,
    str_h,
    str_w,
    pad_h,
    pad_w,
    dil_h,
    dil_w,
    x_sn,
    x_sc,
    x_sh,
    x_sw,
    w_sk,
    w_sc,
    w_sr,
    w_ss,
    y_sn,
    y_sk,
    y_sh,
    y_sw,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    M = N * P * Q
    _, off_m, off_n = grouped_tile(tl.program_id(0), M, K, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = off_m + tl.arange(0, BLOCK_M)  # output pixels (n, p, q)
    offs_n = off_n + tl.arange(0, BLOCK_N)  # output channels k
    offs_c = tl.arange(0, BLOCK_K)
    n = offs_m // (P * Q)
    p = (offs_m // Q) % P
    q = offs_m % Q
    h0 = p * str_h - pad_h
    w0 = q * str_w - pad_w
    in_m = offs_m < M
    in_n = offs_n < K
    x_rows = x_ptr + n * x_sn
    w_cols = w_ptr + offs_n * w_sk
    c_blocks = (C + BLOCK_K - 1) // BLOCK_K
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    for it in range(0, R * S * c_blocks):
        rs = it // c_blocks
        c = (it % c_blocks) * BLOCK_K + offs_c
        r = rs // S
        s = rs % S
        h = h0 + r * dil_h
        w = w0 + s * dil_w
        row_ok = in_m & (h >= 0) & (h < H) & (w >= 0) & (w < W)  # padding reads as zero
        a = tl.load(
            x_rows[:, None] + h[:, None] * x_sh + w[:, None] * x_sw + c[None, :] * x_sc,
            mask=row_ok[:, None] & (c[None, :] < C),
            other=0.0,
        )
        b = tl.load(
            w_cols[None, :] + c[:, None] * w_sc + r * w_sr + s * w_ss, mask=(c[:, None] < C) & in_n[None, :], other=0.0
        )
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
    y = y_ptr + n[:, None] * y_sn + p[:, None] * y_sh + q[:, None] * y_sw + offs_n[None, :] * y_sk
    tl.store(y, acc.to(y_ptr.dtype.element_ty), mask=in_m[:, None] & in_n[None, :])


# fmt: off
# The arguments grouped as the launch passes them, each group's meaning beside it (one a line would part the
# comments from the arguments they explain).
@triton.jit
def _conv_bwd_data_kernel(
    dy_ptr, w_ptr, dx_ptr,
    N, C, H, W, K, P, Q,
    HI, WI, PHASE_H, PHASE_W, str_h, str_w,  # this phase's input pixels: h = PHASE_H + str_h * i, i < HI
    R0, S0, RSTEP, SSTEP, NR, NS,  # its taps: r = R0 + RSTEP * jr, jr < NR
    BASE_H, BASE_W, DSTEP_H, DSTEP_W,  # and their output pixels: p = i + BASE_H - DSTEP_H * jr
    dy_sn, dy_sk, dy_sh, dy_sw,
    w_sk, w_sc, w_sr, w_ss,
    dx_sn, dx_sc, dx_sh, dx_sw,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    # fmt: on
    M = N * HI * WI
    _, off_m, off_n = grouped_tile(tl.program_id(0), M, C, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = off_m + tl.arange(0, BLOCK_M)  # input pixels (n, i, j) of this phase
    offs_n = off_n + tl.arange(0, BLOCK_N)  # input channels c
    offs_k = tl.arange(0, BLOCK_K)
    n = offs_m // (HI * WI)
    i = (offs_m // WI) % HI
    j = offs_m % WI
    in_m = offs_m < M
    in_n = offs_n < C
    dy_rows = dy_ptr + n * dy_sn
    w_cols = w_ptr + offs_n * w_sc
    k_blocks = (K + BLOCK_K - 1) // BLOCK_K
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    for it in range(0, NR * NS * k_blocks):
        tap = it // k_blocks
        k = (it % k_blocks) * BLOCK_K + offs_k
        jr = tap // NS
        js = tap % NS
        p = i + BASE_H - DSTEP_H * jr
        q = j + BASE_W - DSTEP_W * js
        row_ok = in_m & (p >= 0) & (p < P) & (q >= 0) & (q < Q)
        a = tl.load(
            dy_rows[:, None] + p[:, None] * dy_sh + q[:, None] * dy_sw + k[None, :] * dy_sk,
            mask=row_ok[:, None] & (k[None, :] < K),
            other=0.0,
        )
        b = tl.load(
            w_cols[None, :] + k[:, None] * w_sk + (R0 + RSTEP * jr) * w_sr + (S0 + SSTEP * js) * w_ss,
            mask=(k[:, None] < K) & in_n[None, :],
            other=0.0,
        )
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
    h = PHASE_H + str_h * i
    w = PHASE_W + str_w * j
    dx = dx_ptr + n[:, None] * dx_sn + h[:, None] * dx_sh + w[:, None] * dx_sw + offs_n[None, :] * dx_sc
    tl.store(dx, acc.to(dx_ptr.dtype.element_ty), mask=in_m[:, None] & in_n[None, :])


@triton.jit
def _conv_bwd_weight_kernel(
    x_ptr,
    dy_ptr,
    dw_ptr,
    N,
    C,
    H,
    W,
    K,
    P,
    Q,
    R,
    S,
    str_h,
    str_w,
    pad_h,
    pad_w,
    dil_h,
    dil_w,
    RED_PER_SPLIT,  # reduction elements (n, p, q) per program along axis 1: a multiple of BLOCK_K
    x_sn,
    x_sc,
    x_sh,
    x_sw,
    dy_sn,
    dy_sk,
    dy_sh,
    dy_sw,
    dw_sz,  # between the partial sums of a split reduction
    dw_sk,
    dw_sc,
    dw_sr,
    dw_ss,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    c_blocks = (C + BLOCK_N - 1) // BLOCK_N
    # Columns are (r, s, channel block): a tile never straddles two taps, so (r, s) is one scalar per tile.
    _, off_m, off_n = grouped_tile(tl.program_id(0), K, R * S * c_blocks * BLOCK_N, BLOCK_M, BLOCK_N, GROUP_M)
    tap = off_n // BLOCK_N // c_blocks
    r = tap // S
    s = tap % S
    offs_m = off_m + tl.arange(0, BLOCK_M)  # output channels k
    offs_n = ((off_n // BLOCK_N) % c_blocks) * BLOCK_N + tl.arange(0, BLOCK_N)  # input channels c
    in_m = offs_m < K
    in_n = offs_n < C
    split = tl.program_id(1)
    red_lo = split * RED_PER_SPLIT
    red_hi = tl.minimum(red_lo + RED_PER_SPLIT, N * P * Q)
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    for red0 in range(red_lo, red_hi, BLOCK_K):
        red = red0 + tl.arange(0, BLOCK_K)  # output pixels (n, p, q)
        n = red // (P * Q)
        p = (red // Q) % P
        q = red % Q
        h = p * str_h - pad_h + r * dil_h
        w = q * str_w - pad_w + s * dil_w
        red_ok = red < red_hi
        a = tl.load(
            dy_ptr + offs_m[:, None] * dy_sk + (n * dy_sn + p * dy_sh + q * dy_sw)[None, :],
            mask=in_m[:, None] & red_ok[None, :],
            other=0.0,
        )
        x_ok = red_ok & (h >= 0) & (h < H) & (w >= 0) & (w < W)
        b = tl.load(
            x_ptr + (n * x_sn + h * x_sh + w * x_sw)[:, None] + offs_n[None, :] * x_sc,
            mask=x_ok[:, None] & in_n[None, :],
            other=0.0,
        )
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
    dw = dw_ptr + split * dw_sz + offs_m[:, None] * dw_sk + offs_n[None, :] * dw_sc + r * dw_sr + s * dw_ss
    tl.store(dw, acc.to(dw_ptr.dtype.element_ty), mask=in_m[:, None] & in_n[None, :])


KERNELS = {"fwd": _conv_fwd_kernel, "bwd_data": _conv_bwd_data_kernel, "bwd_weight": _conv_bwd_weight_kernel}
KERNEL_NAMES = {d: f"triton_conv_{d}" for d in KERNELS}
OPERAND_DTYPES = ("fp16", "bf16", "fp32")  # names of microbench.core.dtypes (no fp8 convolution here)


# --------------------------------------------------------------------------------------------------
# The wrapper: checks, allocates, launches.


def _expected_shapes(s: ConvShape, direction: str):
    x, w, y = (s.n, s.c, s.h, s.w), (s.k, s.c // s.groups, s.r, s.s), (s.n, s.k, s.p, s.q)
    return {"fwd": (x, w, y), "bwd_data": (y, w, x), "bwd_weight": (x, y, w)}[direction]


def _check(a, b, s: ConvShape, direction: str, allow_tf32: bool):
    if direction not in KERNELS:
        raise ValueError(f"unknown conv direction {direction!r} (known: {', '.join(KERNELS)})")
    if s.groups != 1:
        raise Unsupported(f"groups = {s.groups}: only groups = 1 is implemented")
    ea, eb, _ = _expected_shapes(s, direction)
    if tuple(a.shape) != ea or tuple(b.shape) != eb:
        raise ValueError(
            f"conv {direction} of {s.label()}: operands {tuple(a.shape)}, {tuple(b.shape)}; expected {ea}, {eb}"
        )
    if a.dtype != b.dtype:
        raise Unsupported(f"mixed operand dtypes {a.dtype} and {b.dtype}")
    if dtypes.name_of(a.dtype) not in OPERAND_DTYPES:
        raise Unsupported(f"dtype {a.dtype} (fp16, bf16, fp32)")
    if a.device != b.device:
        raise ValueError(f"operands on {a.device} and {b.device}")
    if allow_tf32 and a.dtype != torch.float32:
        raise Unsupported(f"TF32 applies to fp32 operands, not {a.dtype}")
    if allow_tf32 and a.device.type == "cpu":
        raise Unsupported("TF32 is a GPU Tensor Core format; the interpreter computes fp32 dots in IEEE")
    for t in (a, b):
        if t.numel() >= 2**31:
            raise Unsupported(f"a tensor of {t.numel()} elements needs 64-bit offsets")


def conv2d(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    shape: ConvShape,
    direction: str,
    allow_tf32: bool = False,
    out: torch.Tensor | None = None,
    config: cfgs.TileConfig | None = None,
    autotune: bool = True,
    split_k: int | None = None,
) -> torch.Tensor:
    """One convolution direction on NHWC tensors given in logical NCHW / KCRS order (any strides work;
    channels-last is the fast layout). fwd (x, w) -> y; bwd_data (dy, w) -> dx; bwd_weight (x, dy) -> dw.
    The result is channels-last, in the operands' dtype.

    out: write the result here (e.g. pre-filled with NaN by a test). config: a fixed TileConfig (no
    autotuning); autotune: on a GPU, choose among the family's set (default) or use its default.
    split_k (bwd_weight): programs sharing one output tile's reduction (None: enough to fill the GPU).
    """
    s = shape
    _check(a, b, s, direction, allow_tf32)
    _, _, out_shape = _expected_shapes(s, direction)
    if out is None:
        # Allocated channels-last: empty(...).contiguous(channels_last) allocates NCHW and copies it inside
        # every timed call.
        out = torch.empty(out_shape, dtype=a.dtype, device=a.device, memory_format=torch.channels_last)
    elif tuple(out.shape) != out_shape or out.dtype != a.dtype or out.device != a.device:
        raise ValueError(f"out is {tuple(out.shape)} {out.dtype} on {out.device}; expected {out_shape} {a.dtype}")
    if out.numel() == 0:
        return out
    precision = input_precision(a.device, allow_tf32)
    dtype_name = dtypes.name_of(a.dtype)
    gemm_m, gemm_n, gemm_k = _gemm_dims(s, direction)
    if a.device.type == "cpu" and not planned():
        if why := interpreter_refusal(gemm_m * gemm_n * gemm_k):
            raise Unsupported(why)
        # Tiles as the kernel walks them: a reduction step covers one channel block of one tap (fwd,
        # bwd_data) and a bwd_weight column tile one channel block of one tap.
        tile_dims = {"fwd": (gemm_m, s.k, s.c), "bwd_data": (gemm_m, s.c, s.k), "bwd_weight": (s.k, s.c, gemm_k)}
        cfg = config or cfgs.interpreter_config(*tile_dims[direction])
        run = _Launcher(direction, cfg, precision, interpret=True, upcast=a.dtype == torch.bfloat16)
    else:
        family = planned()["family"] if planned() else device_family(a.device)
        key = precision_key(dtype_name, allow_tf32)
        if config is None and not (autotune and autotune_enabled()):
            config = cfgs.conv_default(family, key)
        run = _Launcher(direction, config, precision, interpret=False, upcast=False, family=family, key=key)
    if direction == "fwd":
        _fwd(run, a, b, out, s)
    elif direction == "bwd_data":
        _bwd_data(run, a, b, out, s)
    else:
        _bwd_weight(run, a, b, out, s, split_k)
    return out


def _gemm_dims(s: ConvShape, direction: str) -> tuple[int, int, int]:
    """(rows, columns, reduction) of the implicit GEMM; their product is the same in all directions."""
    if direction == "fwd":
        return s.n * s.p * s.q, s.k, s.c * s.r * s.s
    if direction == "bwd_data":
        return s.n * s.h * s.w, s.c, s.k * s.r * s.s
    return s.k, s.c * s.r * s.s, s.n * s.p * s.q


class _Launcher:
    """Launch one kernel with a fixed configuration, or through the family's autotuner."""

    def __init__(self, direction, cfg, precision, *, interpret, upcast, family="", key=""):
        self.direction, self.cfg, self.interpret, self.family, self.key = direction, cfg, interpret, family, key
        self.common = dict(INPUT_PRECISION=precision, UPCAST=upcast)

    def __call__(self, grid_fn, *args, **meta):
        kernel = KERNELS[self.direction]
        if planned():  # counting compiles (triton_runtime.planning): record, launch nothing
            configs = [self.cfg] if self.cfg is not None else cfgs.CONV_CONFIGS[self.family](self.key)
            record_plan(
                kernel,
                KERNEL_NAMES[self.direction],
                args,
                {**meta, **self.common},
                configs,
                prune=None if self.cfg is not None else _prune_for(self.direction),
            )
            return
        if self.cfg is not None:
            launcher = interpreted(kernel) if self.interpret else kernel
            grid = grid_fn(self.cfg.meta())
            opts = {} if self.interpret else self.cfg.options()
            compiled = launcher[grid](*args, **meta, **self.cfg.meta(persistent_param=False), **self.common, **opts)
            if not self.interpret:
                report_launch(KERNEL_NAMES[self.direction], compiled, self.cfg.label())
            return
        tuner = _tuner(self.direction, self.family, self.key)
        compiled = tuner[grid_fn](*args, **meta, **self.common)
        report_launch(KERNEL_NAMES[self.direction], compiled, cfgs.TileConfig.of(tuner.best_config).label())


def _fwd(run, x, w, y, s: ConvShape):
    m = s.n * s.p * s.q

    def grid(meta):
        return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(s.k, meta["BLOCK_N"]),)

    run(
        grid,
        x,
        w,
        y,
        s.n,
        s.c,
        s.h,
        s.w,
        s.k,
        s.p,
        s.q,
        s.r,
        s.s,
        *s.stride,
        *s.pad,
        *s.dilation,
        *x.stride(),
        *w.stride(),
        *y.stride(),
    )


def _taps(phase: int, stride: int, pad: int, dil: int, taps: int) -> tuple[int, int, int, int, int]:
    """For input pixels h = phase (mod stride): the valid taps r (those with h + pad - r*dil divisible
    by stride) as (first, step, count), and the output pixel of tap number t as p = i + base - dstep*t."""
    step = stride // math.gcd(stride, dil)
    first = next((r for r in range(min(step, taps)) if (phase + pad - r * dil) % stride == 0), None)
    if first is None:
        return 0, 1, 0, 0, 0  # no tap reaches these pixels: their gradient is zero
    count = len(range(first, taps, step))
    base = (phase + pad - first * dil) // stride  # exact division: floor and truncation agree
    return first, step, count, base, step * dil // stride


def _bwd_data(run, dy, w, dx, s: ConvShape):
    (sh, sw), (ph, pw), (dh, dw) = s.stride, s.pad, s.dilation
    for a_h in range(min(sh, s.h)):
        for a_w in range(min(sw, s.w)):
            hi, wi = triton.cdiv(s.h - a_h, sh), triton.cdiv(s.w - a_w, sw)
            r0, rstep, nr, base_h, dstep_h = _taps(a_h, sh, ph, dh, s.r)
            s0, sstep, ns, base_w, dstep_w = _taps(a_w, sw, pw, dw, s.s)
            m = s.n * hi * wi

            def grid(meta, m=m):
                return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(s.c, meta["BLOCK_N"]),)

            run(
                grid,
                dy,
                w,
                dx,
                s.n,
                s.c,
                s.h,
                s.w,
                s.k,
                s.p,
                s.q,
                hi,
                wi,
                a_h,
                a_w,
                sh,
                sw,
                r0,
                s0,
                rstep,
                sstep,
                nr,
                ns,
                base_h,
                base_w,
                dstep_h,
                dstep_w,
                *dy.stride(),
                *w.stride(),
                *dx.stride(),
            )


def _split_count(tiles: int, red: int, block_k: int, sms: int, split_k: int | None) -> int:
    steps = triton.cdiv(red, block_k)
    if split_k is None:
        # Enough programs for two waves on the GPU, but each keeps at least 8 reduction steps.
        split_k = max(1, min(triton.cdiv(2 * sms, max(tiles, 1)), steps // 8))
    return max(1, min(split_k, steps))


def _bwd_weight(run, x, dy, dw, s: ConvShape, split_k: int | None):
    red = s.n * s.p * s.q
    if planned():
        sms = planned()["sms"]
    else:
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.device.type == "cuda" else 1
    # The split count is fixed before the kernel's tile shape is known (it sizes the workspace), from
    # the family's default tile.
    ref = run.cfg or cfgs.conv_default(run.family, run.key)
    tiles = triton.cdiv(s.k, ref.block_m) * s.r * s.s * triton.cdiv(s.c, ref.block_n)
    split = _split_count(tiles, red, ref.block_k, sms, split_k)
    # Any split is correct (each program masks its own range); a multiple of 16 keeps the JIT's
    # divisibility hint on RED_PER_SPLIT.
    per_split = triton.cdiv(triton.cdiv(red, split), 16) * 16
    split = triton.cdiv(red, per_split)
    if split == 1:
        target, z_stride = dw, 0
    else:  # fp32 partial sums, added once at the end (deterministic, unlike atomics)
        target = torch.empty((split, s.k, s.r, s.s, s.c), dtype=torch.float32, device=dw.device).permute(0, 1, 4, 2, 3)
        z_stride = target.stride(0)

    def grid(meta):
        return (triton.cdiv(s.k, meta["BLOCK_M"]) * s.r * s.s * triton.cdiv(s.c, meta["BLOCK_N"]), split)

    run(
        grid,
        x,
        dy,
        target,
        s.n,
        s.c,
        s.h,
        s.w,
        s.k,
        s.p,
        s.q,
        s.r,
        s.s,
        *s.stride,
        *s.pad,
        *s.dilation,
        per_split,
        *x.stride(),
        *dy.stride(),
        z_stride,
        *target.stride()[-4:],
    )
    if split > 1:
        dw.copy_(target.sum(dim=0))


# Autotuning keys: everything that shapes the implicit GEMM.
_TUNE_KEYS = {
    "fwd": ["N", "C", "H", "W", "K", "P", "Q", "R", "S", "str_h", "str_w", "dil_h", "dil_w"],
    "bwd_data": ["N", "C", "H", "W", "K", "P", "Q", "HI", "WI", "NR", "NS"],
    "bwd_weight": ["N", "C", "H", "W", "K", "P", "Q", "R", "S", "str_h", "str_w", "RED_PER_SPLIT"],
}


def _tile_dims(direction: str, a: dict) -> tuple[int, int]:
    """Rows and columns one program's tile walks over: output pixels x channels (fwd: K, bwd_data: C), or
    output channels K x input channels C per tap (bwd_weight)."""
    if direction == "fwd":
        return a["N"] * a["P"] * a["Q"], a["K"]
    if direction == "bwd_data":
        return a["N"] * a["HI"] * a["WI"], a["C"]
    return a["K"], a["C"]


def _prune_for(direction: str):
    def prune(configs, named_args, **kwargs):
        """As the GEMM's: no tile more than twice the problem (64 at least) in either dimension."""
        m, n = _tile_dims(direction, named_args)
        keep = [
            c
            for c in configs
            if c.kwargs["BLOCK_M"] <= max(64, 2 * triton.next_power_of_2(m))
            and c.kwargs["BLOCK_N"] <= max(64, 2 * triton.next_power_of_2(n))
        ]
        return keep or configs[-1:]

    return prune


@functools.cache
def _tuner(direction: str, family: str, key: str):
    configs = [c.triton_config(persistent_param=False) for c in cfgs.CONV_CONFIGS[family](key)]
    return autotune(KERNELS[direction], configs, _TUNE_KEYS[direction], prune=_prune_for(direction))


# --------------------------------------------------------------------------------------------------
# Static builds for `python -m microbench.inspect`, and the provider.

# Representative problem for the ahead-of-time builds: ResNet-50's conv2_x 3x3 layer (n32 c64 56x56 k64,
# pad 1), channels-last, as the JIT specializes it (stride and dilation 1 become constants).
AOT_SHAPE = ConvShape(n=32, c=64, h=56, w=56, k=64, r=3, s=3, pad=(1, 1))
AOT_DTYPES = ("fp16", "bf16", "fp32", "tf32")


def _nhwc_strides(n, c, h, w) -> tuple[int, int, int, int]:
    """(n, c, h, w) strides of a channels-last tensor."""
    return (h * w * c, 1, w * c, c)


def _aot_args(direction: str, dtype: str, cfg: cfgs.TileConfig, target: str = "sm_90") -> dict:
    s = AOT_SHAPE
    ty = dtypes.get(dtype).triton
    xs, ws, ys = _nhwc_strides(s.n, s.c, s.h, s.w), _nhwc_strides(s.k, s.c, s.r, s.s), _nhwc_strides(s.n, s.k, s.p, s.q)
    precision = (
        targets.dot_input_precision(target, dtype == "tf32")
        if targets.is_amd(target)
        else "tf32"
        if dtype == "tf32"
        else "ieee"
    )
    meta = {**cfg.meta(persistent_param=False), "INPUT_PRECISION": precision, "UPCAST": False}
    dims = {"N": s.n, "C": s.c, "H": s.h, "W": s.w, "K": s.k, "P": s.p, "Q": s.q}
    conv = {"str_h": 1, "str_w": 1, "pad_h": 1, "pad_w": 1, "dil_h": 1, "dil_w": 1}
    if direction == "fwd":
        return {
            "x_ptr": f"*{ty}",
            "w_ptr": f"*{ty}",
            "y_ptr": f"*{ty}",
            **dims,
            "R": s.r,
            "S": s.s,
            **conv,
            **dict(zip(("x_sn", "x_sc", "x_sh", "x_sw"), xs)),
            **dict(zip(("w_sk", "w_sc", "w_sr", "w_ss"), ws)),
            **dict(zip(("y_sn", "y_sk", "y_sh", "y_sw"), ys)),
            **meta,
        }
    if direction == "bwd_data":  # stride 1: one phase, every tap
        return {
            "dy_ptr": f"*{ty}",
            "w_ptr": f"*{ty}",
            "dx_ptr": f"*{ty}",
            **dims,
            "HI": s.h,
            "WI": s.w,
            "PHASE_H": 0,
            "PHASE_W": 0,
            "str_h": 1,
            "str_w": 1,
            "R0": 0,
            "S0": 0,
            "RSTEP": 1,
            "SSTEP": 1,
            "NR": s.r,
            "NS": s.s,
            "BASE_H": 1,
            "BASE_W": 1,
            "DSTEP_H": 1,
            "DSTEP_W": 1,
            **dict(zip(("dy_sn", "dy_sk", "dy_sh", "dy_sw"), ys)),
            **dict(zip(("w_sk", "w_sc", "w_sr", "w_ss"), ws)),
            **dict(zip(("dx_sn", "dx_sc", "dx_sh", "dx_sw"), xs)),
            **meta,
        }
    return {
        "x_ptr": f"*{ty}",
        "dy_ptr": f"*{ty}",
        "dw_ptr": "*fp32",
        **dims,
        "R": s.r,
        "S": s.s,
        **conv,
        "RED_PER_SPLIT": 256 * 98,
        **dict(zip(("x_sn", "x_sc", "x_sh", "x_sw"), xs)),
        **dict(zip(("dy_sn", "dy_sk", "dy_sh", "dy_sw"), ys)),
        "dw_sz": s.k * s.c * s.r * s.s,
        **dict(zip(("dw_sk", "dw_sc", "dw_sr", "dw_ss"), ws)),
        **meta,
    }


# Targets `python -m microbench.inspect` builds this module for (Triton's HIP backend needs no ROCm).
AOT_TARGETS = ("sm_80", "sm_90", "gfx942", "gfx950")


@functools.cache
def _build(direction: str, dtype: str, cfg: cfgs.TileConfig, target: str):
    return aot_compile(KERNELS[direction], _aot_args(direction, dtype, cfg, target), target, cfg.options())


def aot_variants(target: str) -> list[tuple[str, str, cfgs.TileConfig, bool]]:
    """(direction, dtype, config, is_default): the default configuration of every direction and dtype; on AMD
    targets every autotune candidate too."""
    family = cfgs.arch_family(target)
    out = [(d, dt, cfgs.conv_default(family, dt), True) for d in KERNELS for dt in AOT_DTYPES]
    if family == "cdna":
        out += [
            (d, dt, c, False)
            for d in KERNELS
            for dt in AOT_DTYPES
            for c in cfgs.CONV_CONFIGS[family](dt)
            if c != cfgs.conv_default(family, dt)
        ]
    return out


def aot_builds(target: str):
    """The variants of `aot_variants`, compiled for `target`."""
    return [
        aot_build(KERNEL_NAMES[d], dt, cfg, target, _build(d, dt, cfg, target), default=default)
        for d, dt, cfg, default in aot_variants(target)
    ]


@functools.cache
def _static_record(direction: str, dtype: str, target: str):
    cfg = cfgs.conv_default(cfgs.arch_family(target), dtype)
    return inspect_build(
        aot_build(KERNEL_NAMES[direction], dtype, cfg, target, _build(direction, dtype, cfg, target), default=True)
    )


def static_records(direction: str, dtype: str) -> list:
    """The default configuration's SASS for this direction and dtype on sm_90 and sm_80."""
    return [_static_record(direction, dtype, t) for t in ("sm_90", "sm_80")] if dtype in AOT_DTYPES else []


@provider(
    "conv2d",
    "triton",
    library="Triton (ours): kernels/conv_triton.py, implicit GEMM over NHWC; interpreted on a CPU",
    enabled=provider_enabled,
    timed=provider_timed,
    evidence=provider_evidence(lambda case: static_records(case.direction, case.dtype)),
)
def conv2d_triton(
    a: torch.Tensor, b: torch.Tensor, *, shape: ConvShape, direction: str, allow_tf32: bool = False
) -> torch.Tensor:
    return conv2d(a, b, shape=shape, direction=direction, allow_tf32=allow_tf32)
