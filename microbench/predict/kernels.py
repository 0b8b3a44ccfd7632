"""Each GPU activity of a trace as the prediction needs it: its prediction group (one of GROUPS), its FLOPs, bytes and
precision where the one work model (trace.opmetrics over core.ops.aten.trace_work, and trace_other_work for
the memory-bound kernels) knows the operator that launched it, and its GEMM tile count for wave quantization."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from microbench.trace import opmetrics
from microbench.trace.timeline import KERNEL, Timeline

# Prediction groups, in the order the report shows them; `idle` is added by the report (CPU-side gaps, held).
GROUPS = ("gemm_conv", "attention", "elementwise", "normalization", "reduction", "copies", "communication", "other")
GROUP_LABELS = {
    "gemm_conv": "GEMM / conv",
    "attention": "attention",
    "elementwise": "element-wise",
    "normalization": "normalization",
    "reduction": "reduction",
    "copies": "copies",
    "communication": "communication",
    "other": "other",
    "idle": "idle (CPU-side gaps, held)",
}
# The kernel-rule class (data/kernel_rules.toml) -> its prediction group; a class not listed is "other".
GROUP_OF_CLASS = {
    "tc_gemm": "gemm_conv",
    "gemm": "gemm_conv",
    "elementwise": "elementwise",
    "norm": "normalization",
    "reduction": "reduction",
    "memcpy": "copies",
    "comm": "communication",
    "embedding": "elementwise",
    "other": "other",
}
MATRIX = ("gemm_conv", "attention")
MEMORY_BOUND = ("elementwise", "normalization", "reduction", "copies")


@dataclass
class ActivityWork:
    """Parallel arrays over the trace's GPU activities (rows of tl.activities)."""

    names: list[str]
    dur_us: np.ndarray
    group: np.ndarray  # str per row (GROUPS)
    cls: np.ndarray  # the kernel-rule class per row
    flops: np.ndarray  # 0: none known (matrix kernels: their operator's; memory-bound ones: element-wise FLOPs)
    bytes: np.ndarray  # NaN: none known
    precision: np.ndarray  # str or None per row
    tiles: np.ndarray  # GEMM output tiles, 0: unknown
    op_dtype: np.ndarray  # the launching op's operand dtype (fp32, bf16, ...) or None
    op_label: np.ndarray  # the launching modelled op, `aten::linear M=141 N=512 K=512 bf16`, or None
    modelled_ops: int
    notes: list[str]


def output_tiles(m: int, n: int | None, tile_m: int, tile_n: int, batch: int = 1) -> int:
    """The output tiles of a GEMM-shaped grid, batch x ceil(m / tile_m) x ceil(n / tile_n) (n None: a grid over m
    only, FlashAttention's batch x heads by query blocks): the count that waves are made of."""
    return int(batch) * math.ceil(m / tile_m) * (math.ceil(n / tile_n) if n is not None else 1)


def _work_tiles(work, tile_m: int, tile_n: int) -> int:
    d = work.dims
    if work.family == "attention":
        return output_tiles(d["m"], None, tile_m, tile_n, d["batch"]) if d.get("m") else 0
    if not d.get("m") or not d.get("n"):
        return 0  # a convolution's GEMM view needs its output size: no wave quantization
    return output_tiles(d["m"], d["n"], tile_m, tile_n, d.get("batch", 1))


def activity_work(tl: Timeline, peaks: dict[str, float], tile_m: int, tile_n: int) -> ActivityWork:
    """The work of every activity of `tl`; `peaks`: the source's datasheet peaks (to tell TF32 from fp32)."""
    k = tl.activities
    n = len(k)
    cls = tl.class_names() if n else np.empty(0, dtype=object)
    group = np.array([GROUP_OF_CLASS.get(c, "other") for c in cls], dtype=object)
    group[k.category != KERNEL] = "copies"
    work_model = opmetrics.work_model(tl, peaks)
    flops = np.asarray(work_model.kernel_flops, dtype=float).copy()
    nbytes = np.full(n, np.nan)
    precision = np.full(n, None, dtype=object)
    op_dtype = np.full(n, None, dtype=object)
    tiles = np.zeros(n, dtype=np.int64)
    op_label = np.full(n, None, dtype=object)
    for c in work_model.calls:
        rows = c.kernels
        if not len(rows):
            continue
        op_dtype[rows] = c.work.dtype
        op_label[rows] = f"{c.name} {opmetrics.shape_label(c.work)} {c.work.dtype or ''}".rstrip()
        matrix = rows[np.isin(group[rows], MATRIX)]
        if c.work.family == "attention":
            group[matrix] = "attention"
        if not len(matrix):
            continue
        precision[matrix] = c.precision
        tiles[matrix] = _work_tiles(c.work, tile_m, tile_n)
        t = k.dur_us[matrix]
        if c.work.bytes_moved and t.sum() > 0:
            nbytes[matrix] = c.work.bytes_moved * t / t.sum()
    other_flops, other_bytes = opmetrics.other_kernel_work(tl, work_model)
    memory = np.isin(group, MEMORY_BOUND) & np.isfinite(other_bytes)
    flops[memory], nbytes[memory] = other_flops[memory], other_bytes[memory]
    return ActivityWork(
        [tl.names[i] for i in k.name],
        np.asarray(k.dur_us, dtype=float),
        group,
        cls,
        flops,
        nbytes,
        precision,
        tiles,
        op_dtype,
        op_label,
        len(work_model.calls),
        list(work_model.notes),
    )
