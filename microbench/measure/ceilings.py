"""Ceilings, both kinds: datasheet (or, on a CPU, an estimate from cores x clock x FLOPs/cycle) and measured
(the best a vendor library reaches here). Every result is judged against them."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable

import torch

from microbench.core.config import Config, DatasheetDevice
from microbench.core.datasheet import match_datasheet
from microbench.core.device import Device
from microbench.core import dtypes, ops
from microbench.core.cases import make_inputs
from microbench.core.shapes import Case, GemmShape
from microbench.measure import registry
from microbench.measure.timing import measure

COMPUTE, MEMORY = "compute", "memory"


@dataclass(frozen=True)
class Ceiling:
    name: str
    kind: str  # compute or memory
    dtype: str | None  # None for memory
    value: float
    unit: str  # TFLOP/s or GB/s
    source: str  # measured, datasheet or estimate
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Ceilings:
    items: list[Ceiling] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    datasheet_entry: str | None = None

    def find(self, kind: str, source: str, dtype: str | None = None) -> Ceiling | None:
        return next((c for c in self.items if c.kind == kind and c.source == source
                     and (kind == MEMORY or c.dtype == dtype)), None)

    def compute(self, dtype: str, sources=("measured",)) -> Ceiling | None:
        return next((c for s in sources if (c := self.find(COMPUTE, s, dtype))), None)

    def memory(self, sources=("measured",)) -> Ceiling | None:
        return next((c for s in sources if (c := self.find(MEMORY, s))), None)

    def roof(self, dtype: str, intensity: float, sources=("measured",)) -> tuple[float | None, str | None]:
        """Attainable TFLOP/s at this intensity under the first available roofline of `sources`, and
        whether the point is compute- or memory-bound there."""
        comp, mem = self.compute(dtype, sources), self.memory(sources)
        if comp is None and mem is None:
            return None, None
        mem_roof = mem.value * 1e9 * intensity / 1e12 if mem is not None else float("inf")
        comp_roof = comp.value if comp is not None else float("inf")
        if mem_roof < comp_roof:
            return mem_roof, MEMORY
        return comp_roof, COMPUTE

    def as_list(self) -> list[dict]:
        return [c.as_dict() for c in self.items]


def datasheet_ceilings(device: Device, cfg: Config) -> tuple[list[Ceiling], str | None, str]:
    entry, note = match_datasheet(device.name, cfg.devices)
    if entry is None:
        return [], None, note
    # Ceilings for the dtypes cases are measured in, each from its datasheet precision column.
    out = [Ceiling(f"datasheet {d.name}", COMPUTE, d.name, entry.peaks_tflops[d.precision], "TFLOP/s", "datasheet",
                   entry.name) for d in dtypes.TABLE if d.case and d.precision in entry.peaks_tflops]
    if entry.memory_tbs is not None:
        out.append(Ceiling("datasheet memory", MEMORY, None, entry.memory_tbs * 1000.0, "GB/s", "datasheet", entry.name))
    return out, entry.key, note


def cpu_estimate(device: Device, cfg: Config) -> tuple[list[Ceiling], str]:
    if not device.clock_mhz:
        return [], "CPU clock unknown: no compute estimate"
    flags = set(device.isa_flags)
    tier = next((t for t in cfg.cpu_tiers if set(t.requires) <= flags), None)
    if tier is None:
        return [], "no cpu_estimate tier matches this CPU's ISA flags"
    isa = "+".join(tier.requires) or "scalar"
    out = []
    for dt, per_cycle in tier.flops_per_cycle.items():
        tflops = device.units * device.clock_mhz * 1e6 * per_cycle / 1e12
        out.append(Ceiling(f"estimate {dt}", COMPUTE, dt, tflops, "TFLOP/s", "estimate",
                           f"{device.units} cores x {device.clock_mhz:.0f} MHz x {per_cycle:g} FLOP/cycle ({isa})"))
    return out, (f"CPU compute ceilings are estimates ({device.units} cores x {device.clock_mhz:.0f} MHz x "
                 f"FLOPs/cycle of tier {isa}), not datasheet values; no memory estimate")


def measured_ceilings(device: Device, cfg: Config, on_step: Callable[[str], None] | None = None) -> tuple[list[Ceiling], list[str]]:
    """Best vendor GEMM throughput per dtype over a few large sizes, and a large copy's bandwidth."""
    settings = cfg.ceilings.get(device.kind)
    if settings is None:
        return [], [f"no [ceilings.{device.kind}] in {cfg.path.name}: no measured ceilings"]
    gemm = registry.baseline("gemm")  # the compute ceiling is the best GEMM (DESIGN.md)
    out: list[Ceiling] = []
    notes: list[str] = []
    for dt, sizes in settings.gemm_sizes.items():
        best, best_size = 0.0, None
        for n in sizes:
            if on_step:
                on_step(f"ceiling gemm {dt} {n}^3")
            case = Case("gemm", GemmShape(n, n, n), dt)
            try:
                a, b = make_inputs(case, device.torch_device, seed=n)
                t = measure(registry.bind(gemm, case, a, b), device, cfg.timing)
            except registry.Unsupported as e:
                notes.append(f"no measured {dt} ceiling: {e}")
                break
            except (RuntimeError, MemoryError) as e:  # out of memory at the largest size: keep the best so far
                notes.append(f"ceiling gemm {dt} {n}^3 failed: {type(e).__name__}: {str(e).splitlines()[0]}")
                continue
            tflops = ops.of(case).work(case).flops / (t.median_ms * 1e-3) / 1e12
            if tflops > best:
                best, best_size = tflops, n
        if best_size is not None:
            out.append(Ceiling(f"measured {dt}", COMPUTE, dt, best, "TFLOP/s", "measured",
                               f"{gemm.name} GEMM {best_size}^3, median time"))
    if on_step:
        on_step("ceiling copy")
    nbytes = settings.copy_mb * 2**20
    src = torch.randn(nbytes // 4, device=device.torch_device)
    dst = torch.empty_like(src)
    t = measure(lambda: dst.copy_(src), device, cfg.timing)
    gbps = 2 * nbytes / (t.median_ms * 1e-3) / 1e9  # bytes read + bytes written
    out.append(Ceiling("measured memory", MEMORY, None, gbps, "GB/s", "measured",
                       f"copy of {settings.copy_mb} MiB, bytes read + written, median time"))
    del src, dst
    return out, notes


def build_ceilings(device: Device, cfg: Config, measure_now: bool = True,
                   on_step: Callable[[str], None] | None = None) -> Ceilings:
    c = Ceilings()
    if device.kind == "cpu":
        items, note = cpu_estimate(device, cfg)
        c.items += items
        c.notes.append(note)
    else:
        items, key, note = datasheet_ceilings(device, cfg)
        c.items += items
        c.datasheet_entry = key
        c.notes.append(note)
    if measure_now:
        items, notes = measured_ceilings(device, cfg, on_step)
        c.items += items
        c.notes += notes
    return c
