"""Tile configurations of our Triton kernels, one named function per architecture family (the style of
Triton's tutorials), shared by the GEMM and the convolution.

A configuration is a `TileConfig`; the same object feeds the autotuner on a GPU (`.triton_config()`), the
ahead-of-time builds that `python -m microbench.inspect` reads, and the interpreter on a CPU. Families:

- `sm_80`: Ampere and Ada (mma.sync, HMMA). cp.async pipelines; 128x128 tiles at most with 4 warps,
  because the fp32 accumulator of a 128x128 tile already takes 128 registers per thread (a 128x128x64 fp16
  tile with 4 warps and 3 stages was seen to spill 400 bytes of stack on sm_80).
- `sm_90`: Hopper (wgmma, HGMMA / QGMMA): tiles whose M is a multiple of 64 and 4 or 8 warps (whole warp
  groups), so that Triton emits wgmma; larger K-blocks and deeper pipelines (228 KB of shared memory).
- `cdna`: AMD Instinct MI200 / MI300 (MFMA), with AMD's own knobs (`waves_per_eu`, `matrix_instr_nonkdim`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Dtypes whose tl.dot runs on Tensor Cores (fp32 only with TF32 allowed): ours use the tensor-core sets.
MMA_DTYPES = ("fp16", "bf16", "tf32", "fp8_e4m3")


# Stated, not inherited: Triton 3.9 fuses multiply-adds by default and warns that 3.10 will not.
COMPILE_OPTIONS = {"enable_fp_fusion": True}


@dataclass(frozen=True)
class TileConfig:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    group_m: int = 8  # tiles of M visited together, so that their B panels are reused from L2
    persistent: bool = False  # one program per SM looping over tiles, instead of one program per tile
    extra: tuple[tuple[str, int], ...] = field(default=())  # backend options (AMD: waves_per_eu, ...)

    def label(self) -> str:
        s = f"BM{self.block_m} BN{self.block_n} BK{self.block_k} G{self.group_m} w{self.num_warps} s{self.num_stages}"
        if self.persistent:
            s += " persistent"
        for k, v in self.extra:
            s += f" {k}={v}"
        return s

    def meta(self, persistent_param: bool = True) -> dict:
        """The kernel's compile-time parameters (constexpr arguments); the convolution kernels have no
        PERSISTENT parameter."""
        m = {"BLOCK_M": self.block_m, "BLOCK_N": self.block_n, "BLOCK_K": self.block_k, "GROUP_M": self.group_m}
        if persistent_param:
            m["PERSISTENT"] = self.persistent
        return m

    def options(self) -> dict:
        """Compiler options (triton.compile / launch keywords)."""
        return {"num_warps": self.num_warps, "num_stages": self.num_stages, **COMPILE_OPTIONS, **dict(self.extra)}

    def triton_config(self, pre_hook=None, persistent_param: bool = True):
        import triton

        return triton.Config(
            {**self.meta(persistent_param), **COMPILE_OPTIONS, **dict(self.extra)},
            num_warps=self.num_warps,
            num_stages=self.num_stages,
            pre_hook=pre_hook,
        )

    @staticmethod
    def of(config) -> TileConfig:
        """Back from a triton.Config (the autotuner's choice)."""
        kw = config.all_kwargs()
        extra = tuple(sorted((k, v) for k, v in kw.items() if k in _BACKEND_OPTIONS))
        return TileConfig(
            kw["BLOCK_M"],
            kw["BLOCK_N"],
            kw["BLOCK_K"],
            kw["num_warps"],
            kw["num_stages"],
            kw.get("GROUP_M", 8),
            bool(kw.get("PERSISTENT", False)),
            extra,
        )


_BACKEND_OPTIONS = ("waves_per_eu", "matrix_instr_nonkdim", "kpack")

ARCH_FAMILIES = ("sm_80", "sm_90", "cdna")


def arch_family(arch: str) -> str:
    """Device arch (`sm_86`, `sm_90`, `gfx942`) -> the family whose configurations it uses."""
    if arch.startswith("gfx"):
        return "cdna"
    if arch.startswith("sm_"):
        try:
            major = int(arch[3:-1] or arch[3:])
        except ValueError:
            return "sm_80"
        # Blackwell runs Hopper-shaped tiles well enough until it gets a set of its own.
        return "sm_90" if major >= 9 else "sm_80"
    return "sm_80"


def wants_wgmma(target: str, dtype: str, cfg: TileConfig) -> bool:
    """Configurations meant for Hopper's wgmma (HGMMA / QGMMA on sm_90): a Tensor Core dtype, whole warp
    groups (multiples of 4 warps) and M tiles in multiples of wgmma's 64 rows."""
    return target == "sm_90" and dtype in MMA_DTYPES and cfg.num_warps % 4 == 0 and cfg.block_m % 64 == 0


# --------------------------------------------------------------------------------------------------
# GEMM


def gemm_configs_sm80(dtype: str) -> list[TileConfig]:
    # Every entry compiles without spills for sm_80 at aligned sizes (python -m microbench.inspect); shared
    # memory stays within the 100 KB of sm_86 / sm_89 except where noted.
    if dtype == "fp32":  # IEEE fp32 on the CUDA cores: FFMA tiles, no Tensor Cores
        return [
            TileConfig(64, 128, 32, 8, 3),
            TileConfig(128, 128, 16, 8, 3),
            TileConfig(64, 128, 32, 4, 3),
            TileConfig(64, 64, 32, 4, 4),
            TileConfig(32, 64, 32, 4, 4),
        ]
    bk = 64 if dtype == "fp8_e4m3" else 32
    return [
        TileConfig(128, 128, 2 * bk, 8, 3),
        TileConfig(128, 128, bk, 4, 4),
        TileConfig(128, 256, bk, 8, 3),
        TileConfig(256, 128, bk, 8, 3),
        TileConfig(128, 64, 2 * bk, 4, 4),  # tf32: 144 KB of shared memory, A100 only
        TileConfig(64, 128, 2 * bk, 4, 4),
        TileConfig(64, 64, 2 * bk, 4, 5),
        TileConfig(32, 64, 2 * bk, 4, 4),  # skinny problems (DeepBench N = 16 ... 128)
        TileConfig(128, 128, 2 * bk, 8, 3, persistent=True),
    ]


def gemm_configs_sm90(dtype: str) -> list[TileConfig]:
    # Every entry compiles without spills for sm_90a.
    if dtype == "fp32":
        return [
            TileConfig(128, 128, 16, 8, 3),
            TileConfig(64, 128, 32, 8, 3),
            TileConfig(64, 64, 32, 4, 4),
            TileConfig(32, 64, 32, 4, 4),
        ]
    bk = 32 if dtype == "tf32" else 128 if dtype == "fp8_e4m3" else 64
    wide = 128 if dtype == "tf32" else 256  # a 128x256 tf32 tile spills in the persistent loop
    return [
        TileConfig(128, 128, bk, 8, 3),
        TileConfig(128, 256, bk, 8, 3),
        TileConfig(256, 128, bk, 8, 3),
        TileConfig(128, 128, bk, 8, 4),
        TileConfig(128, 128, bk, 4, 4),
        TileConfig(128, 64, bk, 4, 4),
        TileConfig(64, 128, bk, 4, 4),
        TileConfig(64, 64, bk, 4, 5),  # skinny problems (DeepBench N = 16 ... 128)
        TileConfig(128, wide, bk, 8, 3, persistent=True),
        TileConfig(128, 128, bk, 8, 4, persistent=True),
    ]


def gemm_configs_cdna(dtype: str) -> list[TileConfig]:
    # Every entry compiles without spills for gfx942 and gfx950, and its LDS fits gfx942's 64 KB (python -m
    # microbench.inspect.cli --target gfx942 --target gfx950; docs/amd.md). Gone: 256x256x64 (fp16 / bf16 spilled
    # 140-244 bytes of scratch on gfx942 and 16-96 on gfx950, plain and persistent), and the 64-wide K-blocks
    # for tf32 (4-byte operands: up to 1188 bytes of scratch, and 96-128 KB of LDS that no gfx942 CU holds).
    amd = (("matrix_instr_nonkdim", 16), ("waves_per_eu", 2))
    if dtype == "fp32":
        return [TileConfig(128, 64, 32, 4, 2), TileConfig(64, 64, 32, 4, 2)]
    if dtype == "tf32":
        return [
            TileConfig(128, 128, 32, 8, 2, extra=amd),
            TileConfig(128, 64, 32, 4, 2, extra=amd),
            TileConfig(64, 64, 32, 4, 2, extra=amd),
            TileConfig(128, 128, 32, 8, 2, persistent=True, extra=amd),
        ]
    return [
        TileConfig(128, 256, 64, 8, 2, extra=amd),
        TileConfig(256, 128, 64, 8, 2, extra=amd),
        TileConfig(128, 128, 64, 4, 2, extra=amd),
        TileConfig(64, 64, 64, 4, 2, extra=amd),
        TileConfig(128, 256, 64, 8, 2, persistent=True, extra=amd),
    ]


def gemm_tma_configs_sm90(dtype: str) -> list[TileConfig]:
    """Hopper, operands through tensor descriptors (TMA). Same tiles as `gemm_configs_sm90` minus fp32."""
    return [c for c in gemm_configs_sm90(dtype) if dtype != "fp32"]


GEMM_CONFIGS = {"sm_80": gemm_configs_sm80, "sm_90": gemm_configs_sm90, "cdna": gemm_configs_cdna}


def gemm_default(family: str, dtype: str) -> TileConfig:
    """The configuration used without autotuning, and the one whose SASS stands as static evidence.
    Chosen to compile without spills on its family (tests/test_inspect_triton.py checks): a 128x128
    fp32 accumulator needs 8 warps on sm_80 (with 4 it takes every register and spills once pipelined).
    Checked at the quick profile's real shapes too (`python -m microbench.inspect --profile quick`): at
    127x33x7, whose sizes and strides carry no divisibility hint, Triton 3.6 spilled the former fp32 default
    128x128x16 (sm_80 and sm_90) and the sm_80 fp16/bf16 128x128x64; fp32 64x128x32 with 8 warps and
    128x128x32 do not, with Triton 3.6 nor 3.9 (128x64x32 did with 3.9, 64x64x32 with 4 warps too)."""
    if family == "cdna":
        if dtype == "fp32":
            return TileConfig(128, 128, 16, 8, 3)
        if dtype == "tf32":
            return gemm_configs_cdna(dtype)[0]
        return TileConfig(128, 128, 64, 4, 2, extra=(("matrix_instr_nonkdim", 16), ("waves_per_eu", 2)))
    if dtype == "fp32":
        return TileConfig(64, 128, 32, 8, 3)
    bk = 128 if dtype == "fp8_e4m3" else 32 if dtype == "tf32" or family == "sm_80" else 64
    return TileConfig(128, 128, bk, 8, 3)


# --------------------------------------------------------------------------------------------------
# Convolution (implicit GEMM). The reduction walks filter taps and channel blocks; channel counts of
# ResNet-50 (64 ... 2048) are multiples of 64, the first layer's 3 channels are padded by masks.


def conv_configs_sm80(dtype: str) -> list[TileConfig]:
    if dtype == "fp32":
        # At the quick profile's shapes 64x64x32 (4 warps) spilled on sm_90 with Triton 3.6, 64x64x16 (4 warps)
        # with Triton 3.9, 32x64x32 on both; 64x64x16 with 8 warps spills on neither.
        return [TileConfig(64, 64, 16, 8, 3), TileConfig(128, 128, 16, 8, 3)]
    bk = 32
    return [
        TileConfig(128, 128, bk, 8, 3),
        TileConfig(128, 64, bk, 4, 3),
        TileConfig(64, 128, bk, 4, 4),
        TileConfig(256, 64, bk, 8, 3),
        TileConfig(128, 128, 2 * bk, 8, 3),
        TileConfig(64, 64, bk, 4, 4),
    ]


def conv_configs_sm90(dtype: str) -> list[TileConfig]:
    if dtype == "fp32":
        return conv_configs_sm80("fp32")
    bk = 32 if dtype == "tf32" else 64
    # tf32 128x256 (8 warps, 3 stages) took all 255 registers and spilled (Triton 3.6, ResNet conv2_x)
    wide = [] if dtype == "tf32" else [TileConfig(128, 256, bk, 8, 3)]
    return [
        TileConfig(128, 128, bk, 8, 4),
        TileConfig(128, 128, bk, 4, 4),
        *wide,
        TileConfig(256, 128, bk, 8, 3),
        TileConfig(128, 64, bk, 4, 4),
        TileConfig(64, 128, bk, 4, 4),
        TileConfig(64, 64, bk, 4, 4),
    ]


def conv_configs_cdna(dtype: str) -> list[TileConfig]:
    # As the GEMM's: no spills on gfx942 / gfx950; tf32 with 64-wide K-blocks spilled (36-528 bytes of scratch).
    amd = (("matrix_instr_nonkdim", 16), ("waves_per_eu", 2))
    if dtype == "fp32":
        return [TileConfig(64, 64, 32, 4, 2)]
    if dtype == "tf32":
        return [
            TileConfig(128, 128, 32, 8, 2, extra=amd),
            TileConfig(128, 64, 32, 4, 2, extra=amd),
            TileConfig(64, 64, 32, 4, 2, extra=amd),
        ]
    return [
        TileConfig(128, 128, 64, 4, 2, extra=amd),
        TileConfig(256, 128, 64, 8, 2, extra=amd),
        TileConfig(128, 64, 64, 4, 2, extra=amd),
        TileConfig(64, 64, 64, 4, 2, extra=amd),
    ]


CONV_CONFIGS = {"sm_80": conv_configs_sm80, "sm_90": conv_configs_sm90, "cdna": conv_configs_cdna}


def conv_default(family: str, dtype: str) -> TileConfig:
    """As `gemm_default`: no spills on its family; 8 warps for a 128x128 accumulator on sm_80 (with 4, the
    gathered operand addresses push it over the register file: the tf32 tile spilled)."""
    if family == "cdna":
        return TileConfig(64, 64, 32, 4, 3) if dtype == "fp32" else conv_configs_cdna(dtype)[0]
    if dtype == "fp32":  # see conv_configs_sm80: the one fp32 tile that spilled with neither Triton
        return TileConfig(64, 64, 16, 8, 3)
    if dtype == "tf32" and family == "sm_80":  # 128x128x32 spilled in bwd_weight (Triton 3.6)
        return TileConfig(128, 128, 16, 8, 3)
    return TileConfig(128, 128, 64 if family == "sm_90" and dtype != "tf32" else 32, 8, 3)


# --------------------------------------------------------------------------------------------------
# The interpreter runs every program instance in Python over NumPy blocks: fewer, larger blocks are
# faster, but blocks far larger than the problem only multiply masked work.


def interpreter_config(m: int, n: int, k: int) -> TileConfig:
    def fit(x: int, lo: int, hi: int) -> int:
        b = lo
        while b < hi and b < x:
            b *= 2
        return b

    return TileConfig(fit(m, 16, 128), fit(n, 16, 128), fit(k, 16, 64), 4, 1, group_m=4)
