"""A chip as the prediction sees it: achievable compute per precision column, achievable memory bandwidth, SM /
CU count and launch floor, each with where it came from (measured, published, datasheet x a default efficiency,
default). Facts from bench.toml [devices.*]; assumptions from microbench/data/prediction.toml."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import tomllib

from microbench.core.resources import data_file

ASSUMPTIONS_PATH = data_file("prediction.toml")
MATRIX_PRECISIONS = ("tf32", "fp16", "bf16", "fp8", "int8")


@cache
def assumptions(path: str = str(ASSUMPTIONS_PATH)) -> dict:
    return tomllib.loads(Path(path).read_text())


@dataclass(frozen=True)
class Chip:
    key: str  # the bench.toml entry
    name: str
    tflops: dict[str, float]  # achievable, by precision column
    peak_tflops: dict[str, float]  # datasheet
    memory_tbs: float  # achievable
    peak_memory_tbs: float
    compute_units: int | None
    floor_us: float
    sources: dict[str, str] = field(default_factory=dict)  # figure -> where it came from

    def rate(self, precision: str | None, datasheet: bool = False) -> float | None:
        """TFLOP/s of a precision column; fp32 on Tensor Cores (tf32) falls back to the fp32 column where the chip
        has no TF32 path."""
        table = self.peak_tflops if datasheet else self.tflops
        if precision == "tf32" and "tf32" not in table:
            precision = "fp32"
        return table.get(precision or "")

    def as_dict(self) -> dict:
        return {
            "key": self.key,
            "name": self.name,
            "tflops": self.tflops,
            "peak_tflops": self.peak_tflops,
            "memory_tbs": self.memory_tbs,
            "peak_memory_tbs": self.peak_memory_tbs,
            "compute_units": self.compute_units,
            "floor_us": self.floor_us,
            "sources": self.sources,
        }


def _rates(entry, measured: dict[str, float], d: dict) -> tuple[dict[str, float], dict[str, str]]:
    rates, src = {}, {}
    for prec, peak in entry.peaks_tflops.items():
        if prec in measured:
            rates[prec], src[prec] = measured[prec], "measured (--ceilings)"
        elif prec in entry.achievable_tflops:
            rates[prec], src[prec] = entry.achievable_tflops[prec], "published max-achievable (bench.toml)"
        else:
            eff = d["matrix_efficiency"] if prec in MATRIX_PRECISIONS else d["vector_efficiency"]
            rates[prec], src[prec] = peak * eff, f"datasheet x {eff:g} (default, data/prediction.toml)"
    for prec, v in measured.items():
        rates.setdefault(prec, v)
        src.setdefault(prec, "measured (--ceilings)")
    return rates, src


def chip(
    entry,
    measured: dict[str, float] | None = None,
    measured_memory_tbs: float | None = None,
    floor_us: float | None = None,
    floor_source: str = "",
) -> Chip:
    """The chip of a bench.toml entry; `measured` (TFLOP/s by precision) and `measured_memory_tbs` override the
    published and default figures; `floor_us` overrides the entry's launch floor."""
    d = assumptions()["defaults"]
    rates, src = _rates(entry, measured or {}, d)
    peak_mem = entry.memory_tbs or 0.0
    if measured_memory_tbs:
        mem, src["memory"] = measured_memory_tbs, "measured (--ceilings)"
    elif entry.achievable_memory_tbs:
        mem, src["memory"] = entry.achievable_memory_tbs, "measured copy bandwidth (bench.toml)"
    else:
        mem, src["memory"] = peak_mem * d["memory_efficiency"], f"datasheet x {d['memory_efficiency']:g} (default)"
    if floor_us is not None:
        floor, src["floor"] = floor_us, floor_source
    elif entry.kernel_floor_us:
        floor, src["floor"] = entry.kernel_floor_us, "shortest kernel of a real trace (bench.toml)"
    else:
        floor, src["floor"] = d["kernel_floor_us"], "default (data/prediction.toml)"
    src["compute_units"] = "datasheet (bench.toml)" if entry.compute_units else "unknown: no wave quantization"
    return Chip(
        entry.key, entry.name, rates, dict(entry.peaks_tflops), mem, peak_mem or mem, entry.compute_units, floor, src
    )
