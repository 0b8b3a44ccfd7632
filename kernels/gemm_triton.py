"""GEMM in Triton: C[b] = A[b] @ B[b], provider `triton` of the `gemm` op.

A and B in fp16 or bf16 (fp32 accumulation; C in the input dtype or fp32), fp32 with TF32 allowed or
forbidden (`input_precision` always explicit: "tf32" or "ieee"), fp8 e4m3 where the GPU has it (sm_89+;
C in bf16 or fp32). Any M, N, K (edges masked), row- or column-major operands (any strides), an optional
batch. Tiles are visited in groups of GROUP_M rows for L2 reuse; a persistent variant loops over tiles
with one program per SM; on Hopper, a second kernel reads operands through tensor descriptors (TMA).

On a GPU the configuration is autotuned among `kernels.triton_configs`' set for the device's family; on a
CPU the same kernel runs under Triton's interpreter (correctness only).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from microbench.core import dtypes, targets
from microbench.roofline.registry import Unsupported, provider
from microbench.roofline.sass import inspect_build

from . import triton_configs as cfgs
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

FP8 = getattr(torch, "float8_e4m3fn", None)
# Both e4m3 flavours: OCP (NVIDIA, gfx950) and fnuz (gfx942's matrix cores; microbench.core.dtypes.storage_dtype)
FP8S = tuple(t for t in (FP8, getattr(torch, "float8_e4m3fnuz", None)) if t is not None)
OPERAND_DTYPES = ("fp16", "bf16", "fp32", "fp8_e4m3", "fp8_e4m3_fnuz")  # names of microbench.core.dtypes


@triton.jit
def _gemm_tile(
    tile,
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_az,
    stride_am,
    stride_ak,
    stride_bz,
    stride_bk,
    stride_bn,
    stride_cz,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    bz, off_m, off_n = grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    bz64 = bz.to(tl.int64)  # batch offsets can pass 2^31 elements
    a_ptrs = a_ptr + bz64 * stride_az + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + bz64 * stride_bz + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    in_m = offs_m[:, None] < M
    in_n = offs_n[None, :] < N
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=in_m & (offs_k[None, :] < K - k0), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k0) & in_n, other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + bz64 * stride_cz + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=in_m & in_n)


@triton.jit
def _gemm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    BATCH,
    stride_az,
    stride_am,
    stride_ak,
    stride_bz,
    stride_bk,
    stride_bn,
    stride_cz,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    PERSISTENT: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,  # "ieee" or "tf32": what tl.dot may do with fp32 operands
    UPCAST: tl.constexpr,  # interpreter only: it multiplies bf16 bit patterns as integers, so go via fp32
):
    if PERSISTENT:  # a program per SM strides over all tiles
        num_tiles = BATCH * ((M + BLOCK_M - 1) // BLOCK_M) * ((N + BLOCK_N - 1) // BLOCK_N)
        for tile in range(tl.program_id(0), num_tiles, tl.num_programs(0)):
            _gemm_tile(
                tile,
                a_ptr,
                b_ptr,
                c_ptr,
                M,
                N,
                K,
                stride_az,
                stride_am,
                stride_ak,
                stride_bz,
                stride_bk,
                stride_bn,
                stride_cz,
                stride_cm,
                stride_cn,
                BLOCK_M,
                BLOCK_N,
                BLOCK_K,
                GROUP_M,
                INPUT_PRECISION,
                UPCAST,
            )
    else:  # a program per tile: no outer loop, whose loop-carried state costs registers (spills on sm_80)
        _gemm_tile(
            tl.program_id(0),
            a_ptr,
            b_ptr,
            c_ptr,
            M,
            N,
            K,
            stride_az,
            stride_am,
            stride_ak,
            stride_bz,
            stride_bk,
            stride_bn,
            stride_cz,
            stride_cm,
            stride_cn,
            BLOCK_M,
            BLOCK_N,
            BLOCK_K,
            GROUP_M,
            INPUT_PRECISION,
            UPCAST,
        )


@triton.jit
def _gemm_tma_tile(
    tile,
    a_desc,
    b_desc,
    c_desc,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    A_COL_MAJOR: tl.constexpr,
    B_COL_MAJOR: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    bz, off_m, off_n = grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if A_COL_MAJOR:
            a = a_desc.load([bz, k0, off_m]).reshape(BLOCK_K, BLOCK_M).T
        else:
            a = a_desc.load([bz, off_m, k0]).reshape(BLOCK_M, BLOCK_K)
        if B_COL_MAJOR:
            b = b_desc.load([bz, off_n, k0]).reshape(BLOCK_N, BLOCK_K).T
        else:
            b = b_desc.load([bz, k0, off_n]).reshape(BLOCK_K, BLOCK_N)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
    c_desc.store([bz, off_m, off_n], acc.to(c_desc.dtype).reshape(1, BLOCK_M, BLOCK_N))


@triton.jit
def _gemm_tma_kernel(
    a_desc,
    b_desc,
    c_desc,
    M,
    N,
    K,
    BATCH,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    PERSISTENT: tl.constexpr,
    A_COL_MAJOR: tl.constexpr,  # A and B: descriptors over the stored (transposed) matrix
    B_COL_MAJOR: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    # Descriptors are 3-D ([batch, rows, cols], block [1, ., .]) so that a tile never reads across a
    # batch boundary: the hardware zero-fills reads and clips writes beyond each matrix's edges.
    if PERSISTENT:
        num_tiles = BATCH * ((M + BLOCK_M - 1) // BLOCK_M) * ((N + BLOCK_N - 1) // BLOCK_N)
        for tile in range(tl.program_id(0), num_tiles, tl.num_programs(0)):
            _gemm_tma_tile(
                tile,
                a_desc,
                b_desc,
                c_desc,
                M,
                N,
                K,
                BLOCK_M,
                BLOCK_N,
                BLOCK_K,
                GROUP_M,
                A_COL_MAJOR,
                B_COL_MAJOR,
                INPUT_PRECISION,
                UPCAST,
            )
    else:
        _gemm_tma_tile(
            tl.program_id(0),
            a_desc,
            b_desc,
            c_desc,
            M,
            N,
            K,
            BLOCK_M,
            BLOCK_N,
            BLOCK_K,
            GROUP_M,
            A_COL_MAJOR,
            B_COL_MAJOR,
            INPUT_PRECISION,
            UPCAST,
        )


# --------------------------------------------------------------------------------------------------
# The wrapper: checks, allocates, launches.


def _tma_supported() -> bool:
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
    except ImportError:
        return False
    return hasattr(tl, "tensor_descriptor")


def _tma_ok(t: torch.Tensor) -> bool:
    """A TMA descriptor needs a 16-byte aligned base, a contiguous last dimension and 16-byte strides."""
    if t.stride(-1) != 1 or t.data_ptr() % 16:
        return False
    return all((s * t.element_size()) % 16 == 0 for s in t.stride()[:-1])


def _stored(t: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """The 3-D matrix as stored: itself when row-major, its transpose (contiguous rows) when column-major."""
    if t.stride(-1) == 1:
        return t, False
    return t.transpose(-1, -2), True


def _num_sms(device: torch.device) -> int:
    if planned():
        return planned()["sms"]
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 3  # interpreter: a few programs, so that the persistent loop runs more than once


def device_arch(device: torch.device) -> str:
    props = torch.cuda.get_device_properties(device)
    return getattr(props, "gcnArchName", "").split(":")[0] if torch.version.hip else f"sm_{props.major}{props.minor}"


def device_family(device: torch.device) -> str:
    return cfgs.arch_family(device_arch(device))


def input_precision(device: torch.device, allow_tf32: bool) -> str:
    """tl.dot's input_precision: "tf32" when allowed, except on an AMD GPU without xf32 (gfx950: IEEE fp32 on
    its matrix cores, a fallback the static inspection reports), where Triton would refuse it."""
    if device.type == "cuda" and torch.version.hip and not planned():
        arch = device_arch(device)
        if targets.known(arch):
            return targets.dot_input_precision(arch, allow_tf32)
    return "tf32" if allow_tf32 else "ieee"


def _out_dtype(a_dtype: torch.dtype, out_dtype: torch.dtype | None) -> torch.dtype:
    if out_dtype is None:
        return torch.bfloat16 if a_dtype in FP8S else a_dtype
    allowed = {a_dtype, torch.float32} if a_dtype not in FP8S else {torch.bfloat16, torch.float16, torch.float32}
    if out_dtype not in allowed:
        raise Unsupported(f"output dtype {out_dtype} for {a_dtype} inputs (allowed: {sorted(map(str, allowed))})")
    return out_dtype


def _check(a: torch.Tensor, b: torch.Tensor, allow_tf32: bool):
    if a.dim() != b.dim() or a.dim() not in (2, 3):
        raise Unsupported(
            f"operands of rank {a.dim()} and {b.dim()} (expected [M, K] @ [K, N] or batched [B, M, K] @ [B, K, N])"
        )
    if a.shape[-1] != b.shape[-2] or (a.dim() == 3 and a.shape[0] != b.shape[0]):
        raise ValueError(f"shapes {tuple(a.shape)} and {tuple(b.shape)} do not multiply")
    if a.dtype != b.dtype:
        raise Unsupported(f"mixed operand dtypes {a.dtype} and {b.dtype}")
    if dtypes.name_of(a.dtype) not in OPERAND_DTYPES:
        raise Unsupported(f"dtype {a.dtype}")
    if a.device != b.device:
        raise ValueError(f"operands on {a.device} and {b.device}")
    if allow_tf32 and a.dtype != torch.float32:
        raise Unsupported(f"TF32 applies to fp32 operands, not {a.dtype}")
    for t in (a, b):  # 32-bit offsets inside one matrix (the batch offset is 64-bit)
        if t.shape[-2] * t.shape[-1] >= 2**31:
            raise Unsupported(f"a {t.shape[-2]}x{t.shape[-1]} operand needs 64-bit offsets")
    if a.device.type == "cpu":
        if allow_tf32:
            raise Unsupported("TF32 is a GPU Tensor Core format; the interpreter computes fp32 dots in IEEE")
    elif a.device.type == "cuda" and a.dtype == FP8 and torch.version.hip is None:
        if torch.cuda.get_device_capability(a.device) < (8, 9):
            raise Unsupported("fp8 e4m3 Tensor Cores need sm_89 or newer")


def gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    allow_tf32: bool = False,
    out_dtype: torch.dtype | None = None,
    out: torch.Tensor | None = None,
    config: cfgs.TileConfig | None = None,
    autotune: bool = True,
    tma: bool | None = None,
) -> torch.Tensor:
    """C = A @ B ([M, K] @ [K, N] or [B, M, K] @ [B, K, N]), any strides.

    out: write C here (shape [B?, M, N], dtype out_dtype) instead of a new tensor: lets a caller
        pre-fill it (the tests poison it with NaN) and see every element overwritten.
    config: a fixed TileConfig (no autotuning). autotune: on a GPU, choose among the family's set
        (default) or use its default configuration. tma: on Hopper, use the tensor-descriptor kernel
        (None: when the operands allow it).
    """
    _check(a, b, allow_tf32)
    c_dtype = _out_dtype(a.dtype, out_dtype)
    batched = a.dim() == 3
    a3, b3 = (a, b) if batched else (a.unsqueeze(0), b.unsqueeze(0))
    nb, m, k = a3.shape
    n = b3.shape[-1]
    shape = (nb, m, n) if batched else (m, n)
    if out is None:
        out = torch.empty(shape, dtype=c_dtype, device=a.device)
    elif tuple(out.shape) != shape or out.dtype != c_dtype or out.device != a.device:
        raise ValueError(
            f"out is {tuple(out.shape)} {out.dtype} on {out.device}; expected {shape} {c_dtype} on {a.device}"
        )
    if m == 0 or n == 0 or nb == 0:
        return out
    c3 = out if batched else out.unsqueeze(0)
    dtype_name = dtypes.name_of(a.dtype)
    precision = input_precision(a.device, allow_tf32)

    tma_possible = _tma_supported() and all(_tma_ok(_stored(t)[0]) for t in (a3, b3, c3))
    if tma and not tma_possible:
        raise Unsupported("the tensor-descriptor (TMA) kernel needs 16-byte aligned operands with a unit stride")

    if a.device.type == "cpu" and not planned():
        if why := interpreter_refusal(nb * m * n * k):
            raise Unsupported(why)
        cfg = config or cfgs.interpreter_config(m, n, k)
        _launch(a3, b3, c3, cfg, precision, interpret=True, tma=bool(tma), upcast=a.dtype == torch.bfloat16)
        return out

    family = planned()["family"] if planned() else device_family(a.device)
    hopper = family == "sm_90" and torch.version.hip is None
    if tma and not hopper:
        raise Unsupported("the tensor-descriptor (TMA) kernel needs an NVIDIA Hopper GPU (sm_90)")
    # IEEE fp32 runs on the CUDA cores, where TMA's asynchronous copies buy nothing.
    key = precision_key(dtype_name, allow_tf32)
    use_tma = bool(tma) or (tma is None and hopper and tma_possible and key != "fp32")
    if config is None and not (autotune and autotune_enabled()):
        config = cfgs.gemm_default(family, key)
    _launch(a3, b3, c3, config, precision, interpret=False, tma=use_tma, upcast=False, family=family, key=key)
    return out


def precision_key(dtype_name: str, allow_tf32: bool) -> str:
    """The configuration key: fp32 storage with TF32 allowed uses the `tf32` (Tensor Core) tiles; both fp8 e4m3
    flavours the fp8 tiles."""
    if dtype_name == "fp8_e4m3_fnuz":
        return "fp8_e4m3"
    return "tf32" if allow_tf32 and dtype_name == "fp32" else dtype_name


def _launch(a3, b3, c3, cfg, precision, *, interpret: bool, tma: bool, upcast: bool, family: str = "", key: str = ""):
    nb, m, k = a3.shape
    n = b3.shape[-1]
    sms = _num_sms(a3.device)

    def grid(meta):
        tiles = nb * triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"])
        return (min(tiles, sms) if meta["PERSISTENT"] else tiles,)

    common = dict(INPUT_PRECISION=precision, UPCAST=upcast)
    if tma:
        from triton.tools.tensor_descriptor import TensorDescriptor

        sa, a_cm = _stored(a3)
        sb, b_cm = _stored(b3)
        # Block shapes are set per configuration (the autotuner's pre_hook does it for each candidate).
        descs = {
            "a_desc": TensorDescriptor.from_tensor(sa, [1, 16, 16]),
            "b_desc": TensorDescriptor.from_tensor(sb, [1, 16, 16]),
            "c_desc": TensorDescriptor.from_tensor(c3, [1, 16, 16]),
        }
        args = (descs["a_desc"], descs["b_desc"], descs["c_desc"], m, n, k, nb)
        common.update(A_COL_MAJOR=a_cm, B_COL_MAJOR=b_cm)
        kernel, name = _gemm_tma_kernel, "triton_gemm_tma"
    else:
        args = (a3, b3, c3, m, n, k, nb, *a3.stride(), *b3.stride(), *c3.stride())
        kernel, name = _gemm_kernel, "triton_gemm"

    if planned():  # counting compiles (triton_runtime.planning): record, launch nothing
        hook = _set_block_shapes if tma else None
        configs = (
            [cfg] if cfg is not None else (cfgs.gemm_tma_configs_sm90(key) if tma else cfgs.GEMM_CONFIGS[family](key))
        )
        record_plan(kernel, name, args, common, configs, prune=None if cfg is not None else _prune, pre_hook=hook)
        return
    if cfg is not None:
        if tma:
            _set_block_shapes({**common, **cfg.meta(), **descs})
        launcher = interpreted(kernel) if interpret else kernel
        compiled = launcher[grid](*args, **cfg.meta(), **common, **({} if interpret else cfg.options()))
        if not interpret:
            report_launch(name, compiled, cfg.label())
        return
    tuner = _tuner(name, family, key)
    compiled = tuner[grid](*args, **common)
    report_launch(name, compiled, cfgs.TileConfig.of(tuner.best_config).label())


def _set_block_shapes(nargs: dict) -> None:
    bm, bn, bk = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["BLOCK_K"]
    nargs["a_desc"].block_shape = [1, bk, bm] if nargs["A_COL_MAJOR"] else [1, bm, bk]
    nargs["b_desc"].block_shape = [1, bn, bk] if nargs["B_COL_MAJOR"] else [1, bk, bn]
    nargs["c_desc"].block_shape = [1, bm, bn]


def _prune(configs, named_args, **kwargs):
    """Drop candidates that cannot win, before they cost a compile: tiles far larger than the problem (they
    only add masked work), and a persistent tile when the problem has no more tiles than the GPU has SMs
    while the same tile without the persistent loop is a candidate (each program would run one tile: the
    same kernel plus a loop)."""
    m, n = named_args["M"], named_args["N"]
    keep = [
        c
        for c in configs
        if c.kwargs["BLOCK_M"] <= max(64, 2 * triton.next_power_of_2(m))
        and c.kwargs["BLOCK_N"] <= max(64, 2 * triton.next_power_of_2(n))
    ]
    sms = _sms_of(named_args)
    if sms:

        def tile(c):
            return c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"], c.num_warps, c.num_stages

        plain = {tile(c) for c in keep if not c.kwargs.get("PERSISTENT")}
        batch = named_args.get("BATCH", 1)
        keep = [
            c
            for c in keep
            if not (
                c.kwargs.get("PERSISTENT")
                and tile(c) in plain
                and batch * triton.cdiv(m, c.kwargs["BLOCK_M"]) * triton.cdiv(n, c.kwargs["BLOCK_N"]) <= sms
            )
        ]
    return keep or configs[-1:]


def _sms_of(named_args) -> int | None:
    """The SM count of the GPU the launch is for (None when the arguments do not say)."""
    for name in ("a_ptr", "a_desc"):
        t = named_args.get(name)
        t = getattr(t, "base", t)
        if isinstance(t, torch.Tensor) and (t.device.type == "cuda" or planned()):
            return _num_sms(t.device)
    return None


@functools.cache
def _tuner(name: str, family: str, key: str):
    if name == "triton_gemm_tma":
        configs = [c.triton_config(pre_hook=_set_block_shapes) for c in cfgs.gemm_tma_configs_sm90(key)]
        kernel, tune_key = _gemm_tma_kernel, ["M", "N", "K", "BATCH", "A_COL_MAJOR", "B_COL_MAJOR"]
    else:
        configs = [c.triton_config() for c in cfgs.GEMM_CONFIGS[family](key)]
        kernel, tune_key = _gemm_kernel, ["M", "N", "K", "BATCH", "stride_am", "stride_bk"]
    return autotune(kernel, configs, tune_key, prune=_prune)


# --------------------------------------------------------------------------------------------------
# Static builds for `python -m microbench.inspect`, and the provider.

# Representative problem for the ahead-of-time builds: a row-major 4096^3 GEMM, as the JIT specializes it
# (unit strides become constants, the others are known multiples of 16).
_AOT_M = _AOT_N = _AOT_K = 4096
AOT_DTYPES = {
    "sm_80": ("fp16", "bf16", "fp32", "tf32"),
    "sm_90": ("fp16", "bf16", "fp32", "tf32", "fp8_e4m3"),
    "gfx942": ("fp16", "bf16", "fp32", "tf32", "fp8_e4m3"),
    "gfx950": ("fp16", "bf16", "fp32", "tf32", "fp8_e4m3"),
}
# The fp8 e4m3 flavours: each AMD target gets its native one (microbench/data/targets.toml), and the inspection
# also builds the default tile with the other one, to show the fallback a wrong flavour takes there.
FP8_FLAVOURS = ("fp8e4nv", "fp8e4b8")


def _aot_args(dtype: str, cfg: cfgs.TileConfig, tma: bool, target: str = "sm_90", fp8: str | None = None) -> dict:
    in_ty = dtypes.get(dtype).triton
    if dtype == "fp8_e4m3":
        in_ty = fp8 or targets.fp8_e4m3_flavour(target)
    out_ty = "bf16" if dtype == "fp8_e4m3" else in_ty
    m, n, k = _AOT_M, _AOT_N, _AOT_K
    precision = (
        targets.dot_input_precision(target, dtype == "tf32")
        if targets.is_amd(target)
        else "tf32"
        if dtype == "tf32"
        else "ieee"
    )
    common = {"M": m, "N": n, "K": k, "BATCH": 1, **cfg.meta(), "INPUT_PRECISION": precision, "UPCAST": False}
    if tma:
        bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
        return {
            "a_desc": f"tensordesc<{in_ty}[1, {bm}, {bk}]>",
            "b_desc": f"tensordesc<{in_ty}[1, {bk}, {bn}]>",
            "c_desc": f"tensordesc<{out_ty}[1, {bm}, {bn}]>",
            "A_COL_MAJOR": False,
            "B_COL_MAJOR": False,
            **common,
        }
    return {
        "a_ptr": f"*{in_ty}",
        "b_ptr": f"*{in_ty}",
        "c_ptr": f"*{out_ty}",
        "stride_az": m * k,
        "stride_am": k,
        "stride_ak": 1,
        "stride_bz": k * n,
        "stride_bk": n,
        "stride_bn": 1,
        "stride_cz": m * n,
        "stride_cm": n,
        "stride_cn": 1,
        **common,
    }


def aot_variants(target: str) -> list[tuple[str, str, cfgs.TileConfig, bool]]:
    """(kernel name, dtype, config, is_default) built for `target`: the default configuration of every
    dtype, the persistent variant, and on sm_90 the TMA kernel; on AMD targets every autotune candidate too."""
    family = cfgs.arch_family(target)
    out = []
    for dt in AOT_DTYPES[target]:
        out.append(("triton_gemm", dt, cfgs.gemm_default(family, dt), True))
    if family == "cdna":
        return out + [
            ("triton_gemm", dt, c, False)
            for dt in AOT_DTYPES[target]
            for c in cfgs.GEMM_CONFIGS[family](dt)
            if c != cfgs.gemm_default(family, dt)
        ]
    for dt in ("fp16", "bf16"):
        p = next(c for c in cfgs.GEMM_CONFIGS[family](dt) if c.persistent)
        out.append(("triton_gemm", dt, p, False))
        if target == "sm_90" and _tma_supported():
            out.append(("triton_gemm_tma", dt, cfgs.gemm_default(family, dt), True))
    return out


# Targets `python -m microbench.inspect` builds this module for (Triton's HIP backend needs no ROCm).
AOT_TARGETS = ("sm_80", "sm_90", "gfx942", "gfx950")


@functools.cache
def _build(name: str, dtype: str, cfg: cfgs.TileConfig, target: str, fp8: str | None = None):
    kernel = _gemm_tma_kernel if name == "triton_gemm_tma" else _gemm_kernel
    return aot_compile(kernel, _aot_args(dtype, cfg, name == "triton_gemm_tma", target, fp8), target, cfg.options())


def _fp8_note(dtype: str, target: str, fp8: str | None = None) -> str:
    if dtype != "fp8_e4m3" or not targets.is_amd(target):
        return ""
    flavour = fp8 or targets.fp8_e4m3_flavour(target)
    native = targets.fp8_e4m3_flavour(target)
    return f"operands {flavour}" + ("" if flavour == native else f" (not {target}'s native {native})")


def fallback_builds(target: str) -> list:
    """AMD: the default fp8 tile given the fp8 e4m3 flavour `target` does not take natively (what an OCP
    fp8 kernel written for NVIDIA gets on gfx942): its record shows the fallback."""
    if not targets.is_amd(target):
        return []
    cfg = cfgs.gemm_default("cdna", "fp8_e4m3")
    return [
        aot_build(
            "triton_gemm",
            "fp8_e4m3",
            cfg,
            target,
            _build("triton_gemm", "fp8_e4m3", cfg, target, other),
            note=_fp8_note("fp8_e4m3", target, other),
            variant=other,
        )
        for other in FP8_FLAVOURS
        if other != targets.fp8_e4m3_flavour(target)
    ]


def _flavour(dtype: str, target: str) -> str:
    """The fp8 flavour in an AMD build's configuration label ("" otherwise)."""
    return targets.fp8_e4m3_flavour(target) if dtype == "fp8_e4m3" and targets.is_amd(target) else ""


def aot_builds(target: str):
    return [
        aot_build(
            name,
            dt,
            cfg,
            target,
            _build(name, dt, cfg, target),
            default=default,
            note=_fp8_note(dt, target),
            variant=_flavour(dt, target),
        )
        for name, dt, cfg, default in aot_variants(target)
    ] + fallback_builds(target)


@functools.cache
def _static_record(dtype: str, target: str):
    cfg = cfgs.gemm_default(cfgs.arch_family(target), dtype)
    return inspect_build(
        aot_build(
            "triton_gemm",
            dtype,
            cfg,
            target,
            _build("triton_gemm", dtype, cfg, target),
            default=True,
            note=_fp8_note(dtype, target),
            variant=_flavour(dtype, target),
        )
    )


def static_records(dtype: str) -> list:
    """The default configuration's SASS for this dtype on sm_90 and sm_80 (fp8: sm_90 only)."""
    return [_static_record(dtype, t) for t in ("sm_90", "sm_80") if dtype in AOT_DTYPES[t]]


@provider(
    "gemm",
    "triton",
    library="Triton (ours): kernels/gemm_triton.py; interpreted on a CPU",
    enabled=provider_enabled,
    timed=provider_timed,
    evidence=provider_evidence(lambda case: static_records(case.dtype)),
)
def gemm_triton(a: torch.Tensor, b: torch.Tensor, *, allow_tf32: bool = False) -> torch.Tensor:
    return gemm(a, b, allow_tf32=allow_tf32)
