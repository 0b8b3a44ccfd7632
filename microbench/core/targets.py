"""The compile targets of the static inspection (NVIDIA sm_80 / sm_90, AMD gfx942 / gfx950) and what their
limits make of a kernel's resources: occupancy from registers and shared memory / LDS, and for AMD the matrix
instructions each dtype runs on natively. The facts are data: microbench/data/targets.toml."""

from __future__ import annotations

from functools import lru_cache

import tomllib

from microbench.core.resources import data_file

DATA = data_file("targets.toml")

NVIDIA_TARGETS = ("sm_80", "sm_90")
AMD_TARGETS = ("gfx942", "gfx950")
TARGETS = NVIDIA_TARGETS + AMD_TARGETS


@lru_cache(maxsize=1)
def _data() -> dict:
    return tomllib.loads(DATA.read_text())


def target(name: str) -> dict:
    try:
        return _data()["targets"][name]
    except KeyError:
        raise ValueError(f"unknown target {name!r} (known: {', '.join(_data()['targets'])})") from None


def known(name: str) -> bool:
    return name in _data()["targets"]


def is_amd(name: str) -> bool:
    return name.startswith("gfx")


def mfma_precision(operand: str) -> str | None:
    """Operand type of a matrix instruction (`bf16`, `xf32`, `fp8_fp8`, ...) -> the datasheet precision it runs at."""
    return _data()["mfma_operands"].get(operand)


def fallback_reason(dtype: str, precision: str) -> str | None:
    """The data's explanation of `dtype` running at `precision`'s rate (a template), None when it has none."""
    for f in _data()["fallback"]:
        if f["dtype"] == dtype and f["precision"] == precision:
            return f["reason"]
    return None


def fp8_e4m3_flavour(name: str) -> str:
    """Triton's type name of the fp8 e4m3 flavour `name`'s matrix cores take natively (NVIDIA: OCP fp8e4nv)."""
    return target(name).get("fp8_e4m3", "fp8e4nv")


def dot_input_precision(name: str, allow_tf32: bool) -> str:
    """tl.dot's input_precision for fp32 operands on `name`: "tf32" where asked for and the target has it
    (gfx950 has no xf32: IEEE there), else "ieee"."""
    if not allow_tf32:
        return "ieee"
    return "tf32" if "tf32" in target(name).get("dot_input_precisions", ["ieee", "tf32"]) else "ieee"


def amd_waves_per_simd(name: str, total_vgprs: int) -> int:
    """Waves one SIMD holds with this many VGPRs + AGPRs per wave (the unified register file; granules of 8)."""
    t = target(name)
    g = t["vgpr_granule"]
    alloc = max(g, -(-total_vgprs // g) * g)
    return min(t["max_waves_per_simd"], t["vgprs_per_simd_lane"] // alloc)


def amd_lds_waves_per_simd(name: str, lds_bytes: int, num_warps: int) -> int:
    """Waves per SIMD the LDS allows: workgroups per compute unit times their waves, spread over its SIMDs."""
    t = target(name)
    if lds_bytes <= 0:
        return t["max_waves_per_simd"]
    groups = t["lds_bytes_per_cu"] // lds_bytes
    return min(t["max_waves_per_simd"], groups * num_warps // t["simds_per_cu"])


def nvidia_warps_per_sm(name: str, registers: int, num_warps: int, shared_bytes: int) -> int:
    """Resident warps per SM: whole blocks of `num_warps` as registers and shared memory allow."""
    t = target(name)
    g = t["register_granule"]
    per_warp = max(g, -(-registers * 32 // g) * g)
    blocks = t["registers_per_sm"] // (per_warp * num_warps)
    if shared_bytes > 0:
        blocks = min(blocks, t["shared_bytes_per_sm"] // shared_bytes)
    return min(t["max_warps_per_sm"], blocks * num_warps)


def predicted_fallback(name: str, dtype: str) -> str | None:
    """Why our Triton kernels would run `dtype` on a fallback path on AMD target `name` (None: natively), from
    the data alone: tf32 where the target has no xf32. (Our fp8 cases take each target's own flavour.)"""
    if dtype == "tf32" and "tf32" not in target(name).get("dot_input_precisions", ["ieee", "tf32"]):
        t = target(name)
        return fallback_reason("tf32", "fp32").format(
            target=name, chip=t.get("chip", name), native="", instructions="v_mfma_f32_*_f32"
        )
    return None
