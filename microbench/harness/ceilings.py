"""Ceilings, both kinds: datasheet (or, on a CPU, an estimate from cores x clock x FLOPs/cycle) and measured
(the best a vendor library reaches here). Every result is judged against them."""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch

from microbench.core.config import Config, DatasheetDevice
from microbench.core.datasheet import match_datasheet
from microbench.core.device import Device
from microbench.core import dtypes, ops
from microbench.core.cases import make_inputs
from microbench.core.shapes import Case, GemmShape
from microbench.harness import registry
from microbench.core.stats import Timing
from microbench.core.ops.work import gemm_work
from microbench.harness.timing import measure

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
    spread: tuple[float, float] | None = None  # measured: the value at the p80 and at the p20 time (low, high)
    noise: tuple[str, ...] = ()  # measured: why its repeats were not stable; such a ceiling gives no verdicts
    search: tuple[dict, ...] = ()  # measured compute: every shape the search timed, best first

    @property
    def high(self) -> float:
        """The fastest the ceiling's own repeats allow (its p20 time)."""
        return self.spread[1] if self.spread else self.value

    def as_dict(self) -> dict:
        d = asdict(self)
        d["spread"] = list(self.spread) if self.spread else None
        d["noise"], d["search"] = list(self.noise), list(self.search)
        return d


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


def measured_ceilings(device: Device, cfg: Config, on_step: Callable[[str], None] | None = None,
                      budget_s: float | None = None, shapes: tuple[Case, ...] = ()) -> tuple[list[Ceiling], list[str]]:
    """Per dtype, the best vendor GEMM throughput found by a bounded search over shapes (GemmSearch), and
    the best copy bandwidth over several sizes. `shapes`: the profile's cases, whose GEMM shapes join the
    search so that no row of the vendor library can beat the ceiling of its own shape."""
    settings = cfg.ceilings.get(device.kind)
    if settings is None:
        return [], [f"no [ceilings.{device.kind}] in {cfg.path.name}: no measured ceilings"]
    gemm = registry.baseline("gemm")  # the compute ceiling is the best GEMM (DESIGN.md)
    out: list[Ceiling] = []
    notes: list[str] = []
    budget = budget_s if budget_s is not None else settings.budget_s
    for dt, sizes in settings.gemm_sizes.items():
        own = [c.shape for c in shapes if c.op == "gemm" and c.dtype == dt]
        search = GemmSearch(gemm, dt, device, cfg, on_step)
        try:
            c = search.run(sizes, own, budget, settings)
        except registry.Unsupported as e:
            notes.append(f"no measured {dt} ceiling: {e}")
            continue
        notes += search.notes
        if c is not None:
            out.append(c)
    out.append(copy_ceiling(device, cfg, settings, on_step))
    return out, notes


def _tflops(shape: GemmShape, dt: str, ms: float) -> float:
    return gemm_work(shape, dt).flops / (ms * 1e-3) / 1e12


class GemmSearch:
    """MAMF-style: the best median throughput of the vendor GEMM over a bounded set of shapes."""

    def __init__(self, gemm, dtype: str, device: Device, cfg: Config, on_step=None):
        self.gemm, self.dt, self.device, self.cfg, self.on_step = gemm, dtype, device, cfg, on_step
        self.timed: dict[GemmShape, list[Timing]] = {}
        self.notes: list[str] = []

    def best(self, shape: GemmShape) -> float:
        return max(_tflops(shape, self.dt, t.median_ms) for t in self.timed[shape])

    def probe(self, shape: GemmShape) -> None:
        """Time one shape once more (out of memory at a large shape: noted, the search goes on)."""
        if self.on_step:
            self.on_step(f"ceiling search {self.dt} gemm {shape.label()}")
        case = Case("gemm", shape, self.dt)
        try:
            a, b = make_inputs(case, self.device.torch_device, seed=shape.m + shape.n + shape.k)
            t = measure(registry.bind(self.gemm, case, a, b), self.device, self.cfg.timing, self.cfg.noise)
        except (RuntimeError, MemoryError) as e:
            self.notes.append(f"ceiling gemm {self.dt} {shape.label()} failed: {type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}")
            self.timed.setdefault(shape, [])
            return
        self.timed.setdefault(shape, []).append(t)

    def run(self, sizes, own: list[GemmShape], budget_s: float, st) -> Ceiling | None:
        deadline = time.monotonic() + budget_s
        largest = gemm_work(GemmShape(sizes[-1], sizes[-1], sizes[-1]), self.dt).flops
        # Squares first, then the profile's own shapes no larger than the largest square, then the walk.
        start = [GemmShape(n, n, n) for n in sizes]
        start += [s for s in own if gemm_work(s, self.dt).flops <= largest]
        for i, shape in enumerate(dict.fromkeys(start)):
            if shape not in self.timed and (i == 0 or time.monotonic() < deadline):  # one shape, whatever the budget
                self.probe(shape)
        self._walk(sizes, deadline)
        ranked = sorted((s for s in self.timed if self.timed[s]), key=self.best, reverse=True)
        if not ranked:
            return None
        skipped = [s for s in start if s not in self.timed]
        if skipped:
            self.notes.append(f"ceiling search {self.dt}: budget of {budget_s:g} s spent before "
                              f"{len(skipped)} starting shape(s), e.g. {skipped[0].label()}")
        for shape in ranked[:st.top]:  # the repeats are not cut by the budget: they make the ceiling robust
            while len(self.timed[shape]) < st.repeats:
                self.probe(shape)
        return self._ceiling(ranked[:st.top])

    def _walk(self, sizes, deadline: float) -> None:
        """From the best shape, try its neighbours (one of m, n, k moved one step in `sizes`) while that helps."""
        idx = {v: i for i, v in enumerate(sizes)}
        while time.monotonic() < deadline:
            timed = [s for s in self.timed if self.timed[s] and s.batch == 1 and not (s.trans_a or s.trans_b)]
            if not timed:
                return
            best = max(timed, key=self.best)
            dims = (best.m, best.n, best.k)
            if not all(d in idx for d in dims):
                return
            near = []
            for axis in range(3):
                for step in (-1, 1):
                    j = idx[dims[axis]] + step
                    if 0 <= j < len(sizes):
                        d = list(dims)
                        d[axis] = sizes[j]
                        near.append(GemmShape(*d))
            todo = [s for s in near if s not in self.timed]
            if not todo:
                return
            for s in todo:
                if time.monotonic() >= deadline:
                    return
                self.probe(s)
            if max(timed + todo, key=lambda s: self.best(s) if self.timed[s] else 0.0) == best:
                return

    def _ceiling(self, top: list[GemmShape]) -> Ceiling:
        """The best median of medians among the repeated shapes, with the spread of that shape's repeats."""
        def score(s):
            return _tflops(s, self.dt, statistics.median(t.median_ms for t in self.timed[s]))

        shape = max(top, key=score)
        ts = self.timed[shape]
        medians = [t.median_ms for t in ts]
        noise = tuple(f"repeat {i + 1}: {r}" for i, t in enumerate(ts) for r in t.noise)
        agree = max(medians) / min(medians) - 1
        if agree > self.cfg.noise.max_spread:
            noise += (f"its {len(ts)} repeated medians differ by {agree:.0%}",)
        spread = (_tflops(shape, self.dt, statistics.median(t.p80_ms for t in ts)),
                  _tflops(shape, self.dt, statistics.median(t.p20_ms for t in ts)))
        search = tuple({"shape": s.label(), "tflops": self.best(s), "repeats": len(self.timed[s])}
                       for s in sorted((s for s in self.timed if self.timed[s]), key=self.best, reverse=True))
        return Ceiling(f"measured {self.dt}", COMPUTE, self.dt, score(shape), "TFLOP/s", "measured",
                       f"{self.gemm.name} GEMM {shape.label()}: best median of {len(ts)} repeats among "
                       f"{len(search)} shapes searched", spread, noise, search)


def copy_ceiling(device: Device, cfg: Config, settings, on_step=None) -> Ceiling:
    """The best median bandwidth of a device copy over several sizes (bytes read + written), the best size
    repeated `settings.repeats` times."""
    def gbps(mb, ms):
        return 2 * mb * 2**20 / (ms * 1e-3) / 1e9

    def time_copy(mb):
        if on_step:
            on_step(f"ceiling copy {mb} MiB")
        src = torch.randn(mb * 2**20 // 4, device=device.torch_device)
        dst = torch.empty_like(src)
        t = measure(lambda: dst.copy_(src), device, cfg.timing, cfg.noise)
        del src, dst
        return t

    first = {mb: time_copy(mb) for mb in settings.copy_mb}
    mb = min(first, key=lambda k: first[k].median_ms / k)
    ts = [first[mb]] + [time_copy(mb) for _ in range(settings.repeats - 1)]
    med = statistics.median(t.median_ms for t in ts)
    medians = [t.median_ms for t in ts]
    noise = tuple(r for t in ts for r in t.noise)
    if max(medians) / min(medians) - 1 > cfg.noise.max_spread:
        noise += (f"its {len(ts)} repeated medians differ by {max(medians) / min(medians) - 1:.0%}",)
    spread = (gbps(mb, statistics.median(t.p80_ms for t in ts)), gbps(mb, statistics.median(t.p20_ms for t in ts)))
    sizes = ", ".join(f"{k} MiB {gbps(k, t.median_ms):.4g}" for k, t in first.items())
    return Ceiling("measured memory", MEMORY, None, gbps(mb, med), "GB/s", "measured",
                   f"copy of {mb} MiB, bytes read + written, median of {len(ts)} repeats (sizes tried, GB/s: "
                   f"{sizes})", spread, noise)


def build_ceilings(device: Device, cfg: Config, measure_now: bool = True,
                   on_step: Callable[[str], None] | None = None, budget_s: float | None = None,
                   shapes: tuple[Case, ...] = ()) -> Ceilings:
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
        items, notes = measured_ceilings(device, cfg, on_step, budget_s, shapes)
        c.items += items
        c.notes += notes
    return c
