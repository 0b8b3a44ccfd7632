"""Static evidence from AMD machine code, without a GPU or ROCm: the AMDGCN assembly that Triton's HIP backend
writes when it compiles for gfx942 (MI300X / MI325X) or gfx950 (MI355X) on any machine, read for what matters:
matrix-core instructions by kind (v_mfma: name, operand type, shape), VGPR / AGPR / SGPR counts, scratch
(spills), LDS, the waves per SIMD the registers allow, and the verdict `matrix_cores`: yes (the dtype's own
matrix instructions), fallback (matrix instructions of another precision: an fp8 flavour the chip upcasts to
f16, fp32 without xf32, ...; `fallback` says why) or no.

The listing's own accounting is read where LLVM writes it (the "; Kernel info" comments and the
amdhsa.kernels metadata); instructions are counted from the text.
"""

from __future__ import annotations

import re
from collections import Counter

from microbench.core import targets
from microbench.core.dtypes import PRECISION_OF
from microbench.roofline.aot import AotBuild, StaticRecord

# v_mfma_f32_32x32x8_bf16, v_mfma_f32_16x16x32_fp8_fp8, v_mfma_scale_f32_32x32x64_f8f6f4, v_mfma_f32_32x32x4_2b_f32
_MFMA = re.compile(r"^\s*((?:v_mfma|v_smfmac)_\w+)", re.MULTILINE)
_MFMA_NAME = re.compile(
    r"v_(?:mfma|smfmac)_(?:scale_)?(?P<acc>[a-z0-9]+)_(?P<m>\d+)x(?P<n>\d+)x(?P<k>\d+)"
    r"(?:_\d+b)?_?(?P<operand>[a-z0-9_]+)$"
)
_INFO = re.compile(r"^; (TotalNumSgprs|NumVgprs|NumAgprs|TotalNumVgprs|ScratchSize|Occupancy): (\d+)", re.MULTILINE)
_LDS = re.compile(r"^; LDSByteSize: (\d+)", re.MULTILINE)
_META = re.compile(r"^\s+\.(vgpr_spill_count|sgpr_spill_count|group_segment_fixed_size):\s+(\d+)", re.MULTILINE)
# Spill code: scratch instructions (the private segment), or buffer ones LLVM marks as a spill / reload (Triton
# also uses buffer_load / buffer_store for ordinary global memory: those are not counted).
_SPILL_STORE = re.compile(r"^\s*(?:scratch_store_\w+|buffer_store_\w+[^\n]*Spill)", re.MULTILINE)
_SPILL_LOAD = re.compile(r"^\s*(?:scratch_load_\w+|buffer_load_\w+[^\n]*Reload)", re.MULTILINE)
_LABEL = re.compile(r"^(\.LBB\d+_\d+):")
_BRANCH = re.compile(r"^\s*s_(?:c)?branch\w*\s+(\.LBB\d+_\d+)")


def mfma_kind(name: str) -> dict:
    """v_mfma_f32_32x32x8_bf16 -> {name, operand: bf16, shape: 32x32x8, precision: bf16 (its datasheet rate)}."""
    m = _MFMA_NAME.match(name)
    if not m:
        return {"name": name, "operand": None, "shape": None, "precision": None}
    return {
        "name": name,
        "operand": m["operand"],
        "shape": f"{m['m']}x{m['n']}x{m['k']}",
        "precision": targets.mfma_precision(m["operand"]),
    }


def matrix_instructions(asm: str) -> Counter:
    """Matrix-core instructions by name."""
    return Counter(_MFMA.findall(asm))


def per_k_step(asm: str) -> int | None:
    """Matrix instructions one wave issues per iteration of its innermost loop that has any (the K loop of a
    Triton GEMM: Triton does not unroll it); None when no loop holds one (a fully unrolled K)."""
    lines = asm.splitlines()
    labels: dict[str, int] = {}
    best = None
    for i, line in enumerate(lines):
        if m := _LABEL.match(line):
            labels[m.group(1)] = i
        elif (b := _BRANCH.match(line)) and b.group(1) in labels:  # a branch back: a loop
            start = labels[b.group(1)]
            n = sum(1 for ln in lines[start:i] if _MFMA.match(ln))
            if n and (best is None or i - start < best[0]):
                best = (i - start, n)
    return best[1] if best else None


def resources(asm: str) -> dict:
    info = {k: int(v) for k, v in _INFO.findall(asm)}
    meta = {k: int(v) for k, v in _META.findall(asm)}
    lds = _LDS.search(asm)
    return {
        "vgprs": info.get("NumVgprs", 0),
        "agprs": info.get("NumAgprs", 0),
        "total_vgprs": info.get("TotalNumVgprs", info.get("NumVgprs", 0)),
        "sgprs": info.get("TotalNumSgprs", 0),
        "scratch_bytes": info.get("ScratchSize", 0),
        "llvm_occupancy": info.get("Occupancy"),
        "static_lds_bytes": int(lds.group(1)) if lds else meta.get("group_segment_fixed_size", 0),
        "vgpr_spill_count": meta.get("vgpr_spill_count", 0),
        "sgpr_spill_count": meta.get("sgpr_spill_count", 0),
    }


def verdict(kinds: list[dict], dtype: str, target: str) -> tuple[str, str | None]:
    """(matrix_cores, fallback): "yes" when every matrix instruction computes in the dtype's own precision,
    "fallback" (and why) when they compute in another one, "no" without any."""
    if not kinds:
        return "no", None
    want = PRECISION_OF.get(dtype)
    other = sorted({k["precision"] or "unknown" for k in kinds} - {want})
    if not other:
        return "yes", None
    names = ", ".join(k["name"] for k in kinds)
    template = targets.fallback_reason(dtype, other[0])
    t = targets.target(target) if targets.known(target) else {}
    if template is None:
        return "fallback", f"{dtype} computed by {names} ({', '.join(other)} precision)"
    return "fallback", template.format(
        target=target, chip=t.get("chip", target), native=t.get("fp8_e4m3", "?"), instructions=names
    )


def inspect_amd_build(b: AotBuild) -> StaticRecord:
    asm = b.amdgcn
    counts = matrix_instructions(asm)
    kinds = [{**mfma_kind(name), "count": n} for name, n in sorted(counts.items())]
    res = resources(asm)
    matrix_cores, fallback = verdict(kinds, b.dtype, b.target)
    lds = res["static_lds_bytes"] + (b.dynamic_shared_bytes or 0)
    known = targets.known(b.target)  # a GPU that ran it may be another gfx (gfx90a): no limits for it here
    waves = targets.amd_waves_per_simd(b.target, res["total_vgprs"]) if known else None
    occupancy = (
        min(waves, targets.amd_lds_waves_per_simd(b.target, lds, b.num_warps)) if known and b.num_warps else None
    )
    stores, loads = len(_SPILL_STORE.findall(asm)), len(_SPILL_LOAD.findall(asm))
    total = sum(counts.values())
    return StaticRecord(
        kernel=b.kernel,
        config=b.config,
        target=b.target,
        dtype=b.dtype,
        default=b.default,
        wants_wgmma=False,
        hmma=0,
        hgmma=0,
        qgmma=0,
        imma=0,
        ffma=sum(1 for _ in re.finditer(r"^\s*v_(?:fma|fmac|pk_fma)_f32\b", asm, re.MULTILINE)),
        registers=res["total_vgprs"],
        shared_bytes=res["static_lds_bytes"],
        dynamic_shared_bytes=b.dynamic_shared_bytes,
        stack_bytes=res["scratch_bytes"],
        local_bytes=0,
        spill_stores=stores,
        spill_loads=loads,
        tensor_core_instructions=total,
        note=b.note,
        matrix_instructions=total,
        matrix_instruction_kinds=[k["name"] for k in kinds],
        matrix_kinds=kinds,
        matrix_per_k_step=per_k_step(asm),
        matrix_cores=matrix_cores,
        fallback=fallback,
        vgprs=res["vgprs"],
        agprs=res["agprs"],
        sgprs=res["sgprs"],
        lds_bytes=lds,
        waves_per_simd=waves,
        occupancy=occupancy,
        occupancy_unit="waves/SIMD",
        num_warps=b.num_warps,
    )
