"""Tensor Core eligibility, DLProf's check: a GEMM / convolution / attention operator whose kernels ran without
Tensor Cores, why (the first rule of microbench/data/eligibility.toml that holds) and a one-line remedy."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import tomllib

from microbench.core.ops.aten import OpWork
from microbench.core.resources import data_file

RULES_PATH = data_file("eligibility.toml")
CONDITION_KEYS = {
    "id",
    "dtypes",
    "families",
    "vendor",
    "min_cc",
    "below_cc",
    "autocast",
    "check",
    "multiple",
    "reason",
    "remedy",
}


@dataclass(frozen=True)
class Device:
    vendor: str | None  # "nvidia", "amd" or None
    cc: float | None  # NVIDIA compute capability (AMD's computeMajor.Minor is a gfx number, not used)


@dataclass(frozen=True)
class Finding:
    rule: str
    reason: str
    remedy: str


@cache
def rules(path: str = str(RULES_PATH)) -> tuple[dict, ...]:
    data = tomllib.loads(Path(path).read_text())
    for i, r in enumerate(data["rule"]):
        unknown = set(r) - CONDITION_KEYS
        if unknown or "reason" not in r or "remedy" not in r:
            raise ValueError(f"{path}: rule[{i}]: unknown keys {sorted(unknown)} or no reason/remedy")
    return tuple(data["rule"])


def device_of(name: str | None, compute_capability: str | None) -> Device:
    n = (name or "").upper()
    vendor = "amd" if any(t in n for t in ("AMD", "INSTINCT", "RADEON")) else "nvidia" if n else None
    cc = None
    if vendor == "nvidia" and compute_capability:
        try:
            cc = float(compute_capability)
        except ValueError:
            cc = None
    return Device(vendor, cc)


def _misaligned(work: OpWork, multiple: int) -> tuple[str, int] | None:
    # K and N are model sizes one can pad; M is usually batch x sequence
    keys = (
        ("c", "k") if work.family in ("conv", "conv_bwd") else ("k", "n", "m") if work.family != "attention" else ("k",)
    )
    for key in keys:
        v = work.dims.get(key)
        if isinstance(v, int) and v % multiple:
            return key.upper() if work.family in ("conv", "conv_bwd") else key, v
    return None


def _channels_first(strides: list | None) -> bool:
    """An input of shape [N, C, H, W] stored NCHW: the channel stride is H*W, larger than the last dim's 1."""
    return bool(strides) and len(strides[0] or []) >= 3 and strides[0][1] > strides[0][-1] == 1


def check(
    work: OpWork,
    kernel_tc: list[str],
    kernel_names: list[str],
    device: Device,
    autocast: bool = False,
    input_strides: list | None = None,
) -> Finding | None:
    """A Finding when every GEMM-class kernel of the op says tensor_cores "no" and a rule holds."""
    if not kernel_tc or any(tc != "no" for tc in kernel_tc):
        return None  # used Tensor Cores, or the evidence does not settle it
    fill = {
        "family": work.family,
        "dtype": work.dtype,
        "cc": device.cc,
        "kernel": kernel_names[0][:60] if kernel_names else "?",
    }
    for r in rules():
        if "dtypes" in r and work.dtype not in r["dtypes"]:
            continue
        if "families" in r and work.family not in r["families"]:
            continue
        if "vendor" in r and device.vendor != r["vendor"]:
            continue
        if "min_cc" in r and (device.cc is None or device.cc < r["min_cc"]):
            continue
        if "below_cc" in r and (device.cc is None or device.cc >= r["below_cc"]):
            continue
        if "autocast" in r and bool(r["autocast"]) != autocast:
            continue
        if r.get("check") == "alignment":
            bad = _misaligned(work, int(r.get("multiple", 8)))
            if bad is None:
                continue
            fill["dim"], fill["value"] = bad
        if r.get("check") == "channels_first" and not _channels_first(input_strides):
            continue
        return Finding(r["id"], r["reason"].format(**fill), r["remedy"].format(**fill))
    return None


@cache
def _by_operator(path: str = str(RULES_PATH)) -> tuple[re.Pattern, frozenset[str], float]:
    t = tomllib.loads(Path(path).read_text())["by_operator"]
    return re.compile("|".join(f"(?:{p})" for p in t["operators"])), frozenset(t["dtypes"]), float(t["nvidia_min_cc"])


def operator_could_use_matrix_units(name: str) -> bool:
    """Whether an operator is of a family Tensor Cores run (eligibility.toml [by_operator]: the TensorBoard
    plugin's TC_OP_Allowlist and its PyTorch 2.x equivalents): convolution, matmul, linear, RNN cell, attention."""
    return bool(_by_operator()[0].search(name))


def dtype_could_use_matrix_units(dtype: str | None, device: Device) -> bool:
    """Whether a recorded operator dtype is one the chip's Tensor Cores take or could take with AMP / TF32 (True
    for an unrecorded dtype, as the plugin counts it; False on an NVIDIA chip known to have no Tensor Cores)."""
    _, dtypes, min_cc = _by_operator()
    if device.vendor == "nvidia" and device.cc is not None and device.cc < min_cc:
        return False
    return dtype is None or dtype in dtypes
