"""The per-kernel prediction (docs/predict.md, "The model"):

    t_target = floor_target + max(t_source - floor_source, 0) x r

- floor: the chip's launch floor (the shortest kernel a profiler shows on it); what a kernel spends above its
  floor is its work, and only the work scales;
- GEMM / convolution / attention kernels whose operator's FLOPs and bytes are known: the roofline time
  max(FLOPs x q / achievable rate of the precision, bytes / achievable bandwidth), q the wave-quantization
  factor (waves x SMs / tiles, from one full wave up), on each chip. The part of the time above the floor that
  the source's roofline explains scales by the ratio of the two roofline times; the slack beyond it (latency,
  tails, the library's choice of kernel) is held (scaling it too is the alternative of the range);
- element-wise, normalization, reduction, embedding and copy kernels whose operator's bytes are known: the same,
  with the roofline time bytes / achievable bandwidth, except that a kernel whose bytes alone take at least the
  source's floor streams, and its slack scales too (its share of the bandwidth carries over); where the trace
  does not give their bytes, all their time above the floor scales by r, the achievable bandwidth ratio;
- r, communication kernels: the fabric presets' bandwidth ratio above their latency (both fabrics given);
- a kernel with no rule (class `other`), a GEMM-class kernel with no FLOPs and a host copy cannot be placed: it
  keeps its source time and is listed; except, where `unshaped_share` is given (the findings' what-if dtype on
  the trace's own chip), a GEMM-class kernel with no FLOPs whose precision its name gives (`unshaped_fp32`):
  that share of its time above the floor is taken as its roofline time, at the precision's achievable rate.
Idle time (CPU-side gaps) is held; busy time keeps the source's overlap (predicted busy = source busy x
predicted kernel time / source kernel time)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from microbench.predict.chips import Chip, assumptions
from microbench.predict.kernels import MATRIX, MEMORY_BOUND, ActivityWork

HOST_COPY = ("HtoD", "DtoH", "HtoH", "PtoP", "Host", "Pinned", "Pageable")


@dataclass(frozen=True)
class Scenario:
    """What-if: `dtype` moves fp32 matrix work (and its traffic) to that precision; `batch_scale` scales every
    kernel's work above its floor."""

    dtype: str | None = None
    batch_scale: float = 1.0


@dataclass(frozen=True)
class Variant:
    """One assumption replaced by its alternative (data/prediction.toml [alternatives])."""

    datasheet_compute: bool = False
    datasheet_memory: bool = False
    hold_floor: bool = False
    no_waves: bool = False
    scale_slack: bool = False


@dataclass(frozen=True)
class Fabrics:
    source_gbps: float
    source_latency_us: float
    target_gbps: float
    target_latency_us: float


def wave_factor(tiles: np.ndarray, units: int | None, enabled: bool = True) -> np.ndarray:
    """waves x units / tiles from one full wave up, else 1."""
    q = np.ones(len(tiles))
    if not enabled or not units:
        return q
    full = tiles >= units
    q[full] = np.ceil(tiles[full] / units) * units / tiles[full]
    return q


def _rates(chip: Chip, precision: np.ndarray, datasheet: bool) -> np.ndarray:
    return np.array([chip.rate(p, datasheet) or np.nan if p else np.nan for p in precision], dtype=float)


def roofline_us(flops, nbytes, rate_tflops, bw_tbs, q) -> np.ndarray:
    """max(FLOPs x q / rate, bytes / bandwidth) in microseconds; unknown bytes count as none."""
    compute = flops * q / (rate_tflops * 1e6)
    memory = np.where(np.isnan(nbytes), 0.0, nbytes / (bw_tbs * 1e6))
    return np.maximum(compute, memory)


def _target_precision(w: ActivityWork, scenario: Scenario) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the precision on the target, and the factor on its bytes (the what-if dtype)."""
    prec = w.precision.copy()
    factor = np.ones(len(prec))
    matrix = np.isin(w.group, MATRIX)
    moved = matrix & np.array([p in ("fp32", "tf32") for p in prec], dtype=bool)
    if scenario.dtype and moved.any():
        prec[moved] = scenario.dtype
        if scenario.dtype == "tf32":  # TF32 keeps fp32 storage: the same bytes, the Tensor Core rate
            return prec, factor
        # 2-byte operands instead of 4-byte; the other kernels' fp32 activations follow autocast (an assumption:
        # fp32 master weights and optimizer state are a small share of their traffic)
        factor[moved | (~matrix & autocast_halves(w))] = 0.5
    return prec, factor


@lru_cache(maxsize=1)
def _autocast_rules() -> tuple[re.Pattern, re.Pattern, re.Pattern, frozenset]:
    a = assumptions()["autocast"]
    return (
        re.compile(a["sixteen_bit"]),
        re.compile(a["float_type"]),
        re.compile(a["integer_type"]),
        frozenset(a["not_halved_dtypes"]),
    )


def autocast_halves(w: ActivityWork) -> np.ndarray:
    """Per row: whether autocast would halve a non-matrix kernel's bytes (data/prediction.toml [autocast]). The
    name rules run once per distinct (name, group, dtype) in a run (`autocast_halves_of`, cached), not per kernel
    and scenario: a V100 DDP trace's 4,350 kernels times the findings' scenarios made 896,238 regex searches."""
    return np.array([autocast_halves_of(n, g, d) for n, g, d in zip(w.names, w.group, w.op_dtype)], dtype=bool)


@lru_cache(maxsize=1 << 16)
def autocast_halves_of(name: str, group: str, op_dtype: str | None) -> bool:
    """One kernel's answer to `autocast_halves`."""
    sixteen, floats, ints, not_fp32 = _autocast_rules()
    if group == "communication" or (group == "copies" and any(h in name for h in HOST_COPY)):
        return False
    if op_dtype is not None:
        return op_dtype not in not_fp32
    args = name[name.find("<") :] if "<" in name else ""  # the type arguments, where the name has them
    return not (sixteen.search(args) or (ints.search(args) and not floats.search(args)))


def _matrix_times(
    w: ActivityWork, src: Chip, tgt: Chip, scenario: Scenario, v: Variant
) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the roofline time (us) on the source and on the target."""
    prec_t, byte_factor = _target_precision(w, scenario)
    t_src = roofline_us(
        w.flops,
        w.bytes,
        _rates(src, w.precision, v.datasheet_compute),
        src.peak_memory_tbs if v.datasheet_memory else src.memory_tbs,
        wave_factor(w.tiles, src.compute_units, not v.no_waves),
    )
    t_tgt = roofline_us(
        w.flops,
        w.bytes * byte_factor,
        _rates(tgt, prec_t, v.datasheet_compute),
        tgt.peak_memory_tbs if v.datasheet_memory else tgt.memory_tbs,
        wave_factor(w.tiles, tgt.compute_units, not v.no_waves),
    )
    return t_src, t_tgt


def _above_floor(above: np.ndarray, roof_s: np.ndarray, roof_t: np.ndarray, scale_slack) -> np.ndarray:
    """A kernel's time above its floor on the target: the part its roofline explains scales with the roofline;
    the slack beyond it (latency, tails, a library's choice) is held, or scaled too where `scale_slack` (one
    bool, or one per row) says so."""
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(roof_s == 0, 1.0, roof_t / roof_s)  # no work known to move: all of it is slack
    through = np.minimum(above, roof_s)
    slack = above - through
    return through * r + slack * np.where(scale_slack, r, 1.0)


def unshaped_fp32(w: ActivityWork, without_tensor_cores: np.ndarray) -> ActivityWork:
    """`w` with fp32 as the precision of each GEMM-class kernel that no modelled operator launched, where it ran
    without Tensor Cores (`without_tensor_cores`, per row) and its name says fp32 (data/prediction.toml
    [unshaped] fp32_name, never a name with a 16-bit type)."""
    fp32, sixteen = re.compile(assumptions()["unshaped"]["fp32_name"]), _autocast_rules()[0]
    prec = w.precision.copy()
    for i in np.flatnonzero(np.isin(w.group, MATRIX) & (w.flops <= 0) & without_tensor_cores):
        if prec[i] is None and fp32.search(w.names[i]) and not sixteen.search(w.names[i]):
            prec[i] = "fp32"
    return replace(w, precision=prec)


def unshaped_rows(w: ActivityWork) -> np.ndarray:
    """Per row: a GEMM-class kernel without FLOPs whose precision is known (its name's, unshaped_fp32)."""
    return np.isin(w.group, MATRIX) & (w.flops <= 0) & np.array([p is not None for p in w.precision], dtype=bool)


def roofline_share(w: ActivityWork, chip: Chip, rows: np.ndarray) -> float | None:
    """The share of `rows`' time above the floor that their roofline time explains on `chip` (base assumptions):
    a trace's own figure for predict_activities' `unshaped_share`; None where they spend none above it."""
    roof, _ = _matrix_times(w, chip, chip, Scenario(), Variant())
    above = np.maximum(w.dur_us[rows] - chip.floor_us, 0.0)
    total = float(above.sum())
    return float(np.minimum(above, roof[rows]).sum()) / total if total > 0 else None


def placement(w: ActivityWork, fabrics: Fabrics | None, unshaped: bool = False) -> np.ndarray:
    """Per row: "" where the model places the kernel, else why not (`unshaped`: the kernels of unshaped_rows are
    placed, predict_activities' `unshaped_share`)."""
    why = np.full(len(w.dur_us), "", dtype=object)
    matrix = np.isin(w.group, MATRIX)
    why[matrix & ((w.flops <= 0) | np.array([p is None for p in w.precision]))] = (
        "GEMM-class kernel without FLOPs (no modelled operator with shapes launched it)"
    )
    if unshaped:
        why[unshaped_rows(w)] = ""
    why[w.group == "other"] = "no kernel rule knows it (class other)"
    host = np.array(
        [w.group[i] == "copies" and any(h in w.names[i] for h in HOST_COPY) for i in range(len(why))], dtype=bool
    )
    why[host] = "host copy: the host link is not modelled"
    if fabrics is None:
        why[w.group == "communication"] = "communication: give --fabric and --source-fabric to move it"
    return why


def predict_activities(
    w: ActivityWork,
    src: Chip,
    tgt: Chip,
    scenario: Scenario = Scenario(),
    v: Variant = Variant(),
    fabrics: Fabrics | None = None,
    unshaped_share: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the predicted time (us) and why it was not placed ("" where it was). `unshaped_share`: the share
    of an unshaped_rows kernel's time above its floor taken as its roofline time (module docstring); None: such
    a kernel is not placed."""
    why = placement(w, fabrics, unshaped_share is not None)
    floor_t = src.floor_us if v.hold_floor else tgt.floor_us
    bw_s = src.peak_memory_tbs if v.datasheet_memory else src.memory_tbs
    bw_t = tgt.peak_memory_tbs if v.datasheet_memory else tgt.memory_tbs
    prec_t, byte_factor = _target_precision(w, scenario)
    memory = np.isin(w.group, MEMORY_BOUND)
    above = np.maximum(w.dur_us - src.floor_us, 0.0)
    out = floor_t + above * (bw_s / bw_t) * np.where(memory, byte_factor, 1.0) * scenario.batch_scale
    known = memory & np.isfinite(w.bytes)
    if known.any():
        roof_s = w.bytes / (bw_s * 1e6)
        # A kernel whose bytes alone take a floor's time or more streams: its efficiency (the fraction of the
        # bandwidth it reaches) carries over, so its slack scales too; a smaller one is latency-bound: held.
        streaming = roof_s >= src.floor_us
        moved = _above_floor(above, roof_s, w.bytes * byte_factor / (bw_t * 1e6), streaming != v.scale_slack)
        out[known] = floor_t + moved[known] * scenario.batch_scale
    matrix = np.isin(w.group, MATRIX)
    if matrix.any():
        roof_s, roof_t = _matrix_times(w, src, tgt, scenario, v)
        if unshaped_share is not None:
            u = unshaped_rows(w)
            # compute-bound at the precision's rate: the time ratio is the ratio of the two achievable rates
            r = _rates(src, w.precision[u], v.datasheet_compute) / _rates(tgt, prec_t[u], v.datasheet_compute)
            roof_s[u] = unshaped_share * above[u]
            roof_t[u] = roof_s[u] * r
        m_above = _above_floor(above, roof_s, roof_t, v.scale_slack)
        ok = matrix & np.isfinite(m_above)
        out[ok] = floor_t + m_above[ok] * scenario.batch_scale
        why[matrix & ~np.isfinite(m_above) & (why == "")] = f"no achievable rate for its precision on {tgt.key}"
    comm = w.group == "communication"
    if fabrics is not None and comm.any():
        moved = np.maximum(w.dur_us[comm] - fabrics.source_latency_us, 0.0) * fabrics.source_gbps / fabrics.target_gbps
        out[comm] = fabrics.target_latency_us + moved * scenario.batch_scale
    placed = why == ""
    out[~placed] = w.dur_us[~placed]
    return out, why


def datasheet_roof_us(w: ActivityWork, tgt: Chip, scenario: Scenario = Scenario()) -> np.ndarray:
    """Per row: the fastest the target's datasheet roofline allows a matrix kernel (us), NaN for other kernels.
    A prediction below it cannot be right. Memory-bound kernels are not judged by it: their bytes are their
    operator's, at DRAM, and operands that fit in L2 beat that (the shared A100 trace runs a sqrt over 16.7 MB at
    2.2 TB/s, above the A100's 2.04)."""
    prec_t, byte_factor = _target_precision(w, scenario)
    roof = roofline_us(
        w.flops, w.bytes * byte_factor, _rates(tgt, prec_t, True), tgt.peak_memory_tbs, np.ones(len(w.dur_us))
    )
    return np.where(np.isin(w.group, MATRIX) & (w.flops > 0), roof, np.nan)
