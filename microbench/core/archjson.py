"""TraceLens' GPU architecture file (TraceLens/Agent/Analysis/utils/arch/<GPU>.json): `name`, `mem_bw_gbps`,
`memory_gb` and `max_achievable_tflops` {matrix_bf16, matrix_fp16, matrix_fp32, matrix_fp8, matrix_int8,
vector_fp16, vector_bf16, vector_fp32, vector_fp64, ...}. `roofline --arch-json` writes our measured ceilings in
that form; `trace --ceilings` and `predict --ceilings` read it (core.datasheet.ceilings_file).

Our precision columns against its keys: the Tensor Core / matrix-core columns (bf16, fp16, fp8, int8) are its
`matrix_*`; `tf32` (fp32 storage on the matrix path) is its `matrix_fp32`; our `fp32` and `fp64` (CUDA cores /
vector units) are its `vector_fp32` and `vector_fp64`."""

from __future__ import annotations

import math
from pathlib import Path

from microbench.core.dtypes import PRECISION_OF
from microbench.core.errors import InputError

ARCH_KEY_OF = {
    "bf16": "matrix_bf16",
    "fp16": "matrix_fp16",
    "fp8": "matrix_fp8",
    "int8": "matrix_int8",
    "tf32": "matrix_fp32",
    "fp32": "vector_fp32",
    "fp64": "vector_fp64",
}
PRECISION_OF_ARCH_KEY = {v: k for k, v in ARCH_KEY_OF.items()}


def is_arch_json(doc) -> bool:
    return isinstance(doc, dict) and "max_achievable_tflops" in doc


def _positive(path, key: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise InputError(path, "expected a finite positive number", key=key, value=v)
    return float(v)


def read_arch(doc: dict, path: str | Path | None = None) -> tuple[dict[str, float], float | None]:
    """An arch file's compute ceilings (TFLOP/s by our precision column) and memory bandwidth (TB/s, None when
    absent). Keys we have no column for (matrix_fp64, vector_fp16, ...) are ignored."""
    table = doc.get("max_achievable_tflops")
    if not isinstance(table, dict) or not table:
        raise InputError(
            path,
            "expected a non-empty table of TFLOP/s (TraceLens' GPU arch form)",
            key="max_achievable_tflops",
            value=table if not isinstance(table, dict) else None,
        )
    compute = {
        PRECISION_OF_ARCH_KEY[k]: _positive(path, f"max_achievable_tflops.{k}", v)
        for k, v in table.items()
        if k in PRECISION_OF_ARCH_KEY
    }
    if not compute:
        raise InputError(path, f"none of {', '.join(sorted(PRECISION_OF_ARCH_KEY))}", key="max_achievable_tflops")
    mem = doc.get("mem_bw_gbps")
    return compute, (_positive(path, "mem_bw_gbps", mem) / 1e3 if mem is not None else None)


def to_arch(name: str, ceilings: list[dict], memory_gb: float | None = None) -> dict:
    """Measured ceilings (results.json's `ceilings` list) in TraceLens' form. Only `source: measured` entries;
    a precision nobody measured is left out rather than filled with a datasheet figure."""
    tflops: dict[str, float] = {}
    mem_gbps = None
    for c in ceilings:
        if not isinstance(c, dict) or c.get("source") != "measured":
            continue
        if c.get("kind") == "compute" and c.get("dtype") in PRECISION_OF:
            key = ARCH_KEY_OF.get(PRECISION_OF[c["dtype"]])
            if key and key not in tflops:
                tflops[key] = round(float(c["value"]), 3)
        elif c.get("kind") == "memory":
            mem_gbps = round(float(c["value"]), 1)
    doc = {
        "name": name,
        "mem_bw_gbps": mem_gbps,
        "memory_gb": memory_gb,
        "max_achievable_tflops": tflops,
        "source": "dawnscope roofline: measured ceilings (best median of a GEMM shape search per dtype; "
        "device copies counting bytes read and written)",
    }
    return doc
