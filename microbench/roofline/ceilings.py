"""Ceilings, both kinds: datasheet (or, on a CPU, an estimate from cores x clock x FLOPs/cycle) and measured
(the best a vendor library reaches here). Every result is judged against them."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from microbench.core import dtypes
from microbench.core.args import digits
from microbench.core.cases import make_inputs
from microbench.core.conditions import Conditions
from microbench.core.config import Config
from microbench.core.datasheet import CACHE_SCHEMA, DeviceFacts, match_datasheet
from microbench.core.device import Device
from microbench.core.ops.work import gemm_work
from microbench.core.shapes import Case, GemmShape
from microbench.core.stats import Timing
from microbench.roofline import registry
from microbench.roofline.timing import time_calls

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
    busy: tuple[str, ...] = ()  # measured: why the machine was busy while it was measured (core.conditions)
    measured_at: str | None = None  # measured: when (UTC, ISO 8601); a cached ceiling keeps its first date

    @property
    def high(self) -> float:
        """The fastest the ceiling's own repeats allow (its p20 time)."""
        return self.spread[1] if self.spread else self.value

    def as_dict(self) -> dict:
        d = asdict(self)
        d["spread"] = list(self.spread) if self.spread else None
        d["noise"], d["search"], d["busy"] = list(self.noise), list(self.search), list(self.busy)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Ceiling:
        """A ceiling back from as_dict() (the cache file); KeyError/TypeError/ValueError on a malformed one."""
        spread = d.get("spread")
        return cls(
            str(d["name"]),
            str(d["kind"]),
            d.get("dtype"),
            float(d["value"]),
            str(d["unit"]),
            str(d["source"]),
            str(d.get("note") or ""),
            (float(spread[0]), float(spread[1])) if spread else None,
            tuple(str(x) for x in d.get("noise") or ()),
            tuple(dict(x) for x in d.get("search") or ()),
            tuple(str(x) for x in d.get("busy") or ()),
            d.get("measured_at"),
        )


@dataclass
class Ceilings:
    items: list[Ceiling] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    datasheet_entry: str | None = None

    def find(self, kind: str, source: str, dtype: str | None = None) -> Ceiling | None:
        return next(
            (c for c in self.items if c.kind == kind and c.source == source and (kind == MEMORY or c.dtype == dtype)),
            None,
        )

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


def device_facts(device: Device) -> DeviceFacts:
    """What a live device tells the datasheet match beside its name: sm_80 -> cc 8.0, gfx942, units, memory."""
    if device.kind == "cpu":
        return DeviceFacts(device.name)
    nvidia = device.arch.startswith("sm_")
    sm = device.arch[3:]
    return DeviceFacts(
        device.name,
        "nvidia" if nvidia else "amd",
        f"{sm[:-1]}.{sm[-1]}" if nvidia and digits(sm) and len(sm) >= 2 else None,
        None if nvidia else device.arch.split(":")[0],
        device.units or None,
        device.memory_bytes or None,
    )


def datasheet_ceilings(device: Device, cfg: Config) -> tuple[list[Ceiling], str | None, str]:
    entry, note = match_datasheet(device.name, cfg.devices, device_facts(device))
    if entry is None:
        return [], None, note
    # Ceilings for the dtypes cases are measured in, each from its datasheet precision column.
    out = [
        Ceiling(
            f"datasheet {d.name}", COMPUTE, d.name, entry.peaks_tflops[d.precision], "TFLOP/s", "datasheet", entry.name
        )
        for d in dtypes.TABLE
        if d.case and d.precision in entry.peaks_tflops
    ]
    if entry.memory_tbs is not None:
        out.append(
            Ceiling("datasheet memory", MEMORY, None, entry.memory_tbs * 1000.0, "GB/s", "datasheet", entry.name)
        )
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
        out.append(
            Ceiling(
                f"estimate {dt}",
                COMPUTE,
                dt,
                tflops,
                "TFLOP/s",
                "estimate",
                f"{device.units} cores x {device.clock_mhz:.0f} MHz x {per_cycle:g} FLOP/cycle ({isa})",
            )
        )
    return out, (
        f"CPU compute ceilings are estimates ({device.units} cores x {device.clock_mhz:.0f} MHz x "
        f"FLOPs/cycle of tier {isa}), not datasheet values; no memory estimate"
    )


def measured_ceilings(
    device: Device,
    cfg: Config,
    on_step: Callable[[str], None] | None = None,
    budget_s: float | None = None,
    shapes: tuple[Case, ...] = (),
    dtypes: tuple[str, ...] | None = None,
) -> tuple[list[Ceiling], list[str]]:
    """Per dtype, the best vendor GEMM throughput found by a bounded search over shapes (GemmSearch), and
    the best copy bandwidth over several sizes. `shapes`: the profile's cases, whose GEMM shapes join the
    search so that no row of the vendor library can beat the ceiling of its own shape. `dtypes`: only these
    (a profile's own: the quick profile has no tf32 case, so no tf32 search); None: every dtype of gemm_sizes."""
    settings = cfg.ceilings.get(device.kind)
    if settings is None:
        return [], [f"no [ceilings.{device.kind}] in {cfg.path.name}: no measured ceilings"]
    gemm = registry.baseline("gemm")  # the compute ceiling is the best GEMM (docs/design.md)
    out: list[Ceiling] = []
    notes: list[str] = []
    budget = budget_s if budget_s is not None else settings.budget_s
    for dt, sizes in settings.gemm_sizes.items():
        if dtypes is not None and dt not in dtypes:
            continue
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
            t = time_calls(registry.bind(self.gemm, case, a, b), self.device, self.cfg.timing, self.cfg.noise)
        except (RuntimeError, MemoryError) as e:
            self.notes.append(
                f"ceiling gemm {self.dt} {shape.label()} failed: {type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''}"
            )
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
            self.notes.append(
                f"ceiling search {self.dt}: budget of {budget_s:g} s spent before "
                f"{len(skipped)} starting shape(s), e.g. {skipped[0].label()}"
            )
        for shape in ranked[: st.top]:  # the repeats are not cut by the budget: they make the ceiling robust
            while len(self.timed[shape]) < st.repeats:
                self.probe(shape)
        return self._ceiling(ranked[: st.top])

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
        spread = (
            _tflops(shape, self.dt, statistics.median(t.p80_ms for t in ts)),
            _tflops(shape, self.dt, statistics.median(t.p20_ms for t in ts)),
        )
        search = tuple(
            {"shape": s.label(), "tflops": self.best(s), "repeats": len(self.timed[s])}
            for s in sorted((s for s in self.timed if self.timed[s]), key=self.best, reverse=True)
        )
        return Ceiling(
            f"measured {self.dt}",
            COMPUTE,
            self.dt,
            score(shape),
            "TFLOP/s",
            "measured",
            f"{self.gemm.name} GEMM {shape.label()}: best median of {len(ts)} repeats among "
            f"{len(search)} shapes searched",
            spread,
            noise,
            search,
        )


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
        t = time_calls(lambda: dst.copy_(src), device, cfg.timing, cfg.noise)
        src = dst = None  # the buffers go before the next size is allocated
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
    return Ceiling(
        "measured memory",
        MEMORY,
        None,
        gbps(mb, med),
        "GB/s",
        "measured",
        f"copy of {mb} MiB, bytes read + written, median of {len(ts)} repeats (sizes tried, GB/s: {sizes})",
        spread,
        noise,
    )


def build_ceilings(
    device: Device,
    cfg: Config,
    measure_now: bool = True,
    on_step: Callable[[str], None] | None = None,
    budget_s: float | None = None,
    shapes: tuple[Case, ...] = (),
) -> Ceilings:
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


# ---- one source: the measured ceilings cached per machine ---------------------------------------------------
# CACHE_SCHEMA (core.datasheet): `trace --ceilings` and `predict --ceilings` read the same file
CACHE_ENV = "DAWNSCOPE_CACHE_DIR"
# What identifies a machine for its ceilings: not the clock (a CPU's current MHz moves) nor the memory in use.
_MACHINE_KEYS = ("kind", "name", "arch", "units", "isa_flags", "host_cpu", "memory_gib")


def cache_dir() -> Path:
    """Where the measured ceilings are kept: $DAWNSCOPE_CACHE_DIR, else $XDG_CACHE_HOME/dawnscope, else
    ~/.cache/dawnscope (never the checkout: tests point DAWNSCOPE_CACHE_DIR at a temporary folder)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dawnscope"


def cache_key(device: Device, cfg: Config) -> tuple[str, dict]:
    """(key, what it hashes): the machine, the threads torch runs with and the cores this process may use, the
    torch and oneDNN builds and the search's settings. Any of them changed is another cache entry."""
    from microbench.core.device import fingerprint, software

    hw = fingerprint(device)
    sw = software()
    settings = cfg.ceilings.get(device.kind)
    what = {
        "machine": {k: hw.get(k) for k in _MACHINE_KEYS},
        # a CPU's ceilings scale with the threads that run them and the cores they may run on: a 1-thread entry
        # used by a 2-thread run put its rows at 154 - 229 % of their "ceiling"
        "threads": _threads(),
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "software": {k: sw.get(k) for k in ("torch", "torch_cuda", "torch_hip", "onednn")},
        "search": asdict(settings) if settings else None,
        "timing": asdict(cfg.timing),
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16], what


def _threads() -> int:
    return torch.get_num_threads()


@dataclass
class CachedCeilings:
    """One cache file: the measured ceilings of one machine, the conditions they were measured under, when."""

    path: Path
    items: list[Ceiling]
    notes: list[str]
    measured_at_s: float
    conditions: dict
    shapes: list[str]  # the profile shapes the search included ("dtype MxNxK")

    @property
    def busy(self) -> bool:
        return bool((self.conditions or {}).get("busy"))

    @property
    def conditions_phrase(self) -> str:
        """How they were measured, as the notes say it: a quiet machine only where it was and their repeats agree."""
        if self.busy:
            return "on a busy machine"
        noisy = [c.name for c in self.items if c.noise]
        if noisy:
            return f"on a quiet machine, but the repeats of {len(noisy)} of them disagree (noisy)"
        return "on a quiet machine"

    def age_h(self, now_s: float | None = None) -> float:
        return ((now_s if now_s is not None else time.time()) - self.measured_at_s) / 3600.0


def read_cache(path: Path) -> CachedCeilings | None:
    """The cache file, or None when it is missing or unreadable (a broken cache is re-measured, not an error)."""
    try:
        doc = json.loads(path.read_text())
        if doc.get("schema") != CACHE_SCHEMA:
            return None
        return CachedCeilings(
            path,
            [Ceiling.from_dict(c) for c in doc["items"]],
            [str(n) for n in doc["notes"]],
            float(doc["measured_at_s"]),
            dict(doc.get("conditions") or {}),
            [str(s) for s in doc.get("shapes") or []],
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError):
        return None


def _write_cache(path: Path, entry: CachedCeilings, what: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "schema": CACHE_SCHEMA,
        "key": what,
        "measured_at_s": entry.measured_at_s,
        "measured_at": _iso(entry.measured_at_s),
        "conditions": entry.conditions,
        "shapes": entry.shapes,
        "items": [c.as_dict() for c in entry.items],
        "notes": entry.notes,
    }
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # two commands at once: each replaces it whole
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    os.replace(tmp, path)


def _iso(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec="seconds")


def _shape_labels(shapes: tuple[Case, ...]) -> list[str]:
    return sorted({f"{c.dtype} {c.shape.label()}" for c in shapes if c.op == "gemm"})


def stale_reason(
    entry: CachedCeilings | None, shapes: list[str], max_age_h: float, busy_now: bool | None, now_s: float | None = None
) -> str | None:
    """Why the cached ceilings must be measured again (None: use them): none cached, older than max_age_h,
    measured busy while the machine is quiet now, or the profile's GEMM shapes were not in their search."""
    if entry is None:
        return "no cached ceilings for this machine"
    age = entry.age_h(now_s)
    if age > max_age_h:
        return f"the cached ceilings are {age:.1f} h old (> max_age_h = {max_age_h:g})"
    if entry.busy and busy_now is False:
        return "the cached ceilings were measured on a busy machine and it is quiet now"
    missing = [s for s in shapes if s not in entry.shapes]
    if missing:
        return f"{len(missing)} of the profile's GEMM shapes were not in the cached search (e.g. {missing[0]})"
    return None


def machine_ceilings(
    device: Device,
    cfg: Config,
    *,
    on_step: Callable[[str], None] | None = None,
    budget_s: float | None = None,
    shapes: tuple[Case, ...] = (),
    busy_now: bool | None = None,
    refresh: bool = False,
    dtypes: tuple[str, ...] | None = None,
) -> Ceilings:
    """The one source of ceilings for roofline, decompose and pytest-benchmark: the datasheet (or CPU estimate)
    and the measured ceilings of build_ceilings' bounded search, taken from the cache of this machine
    (cache_dir()) unless stale_reason says to measure again. Measured ceilings carry the conditions they were
    measured under: a busy machine's are marked `busy`, and the judge never uses them unflagged."""
    base = build_ceilings(device, cfg, measure_now=False)
    settings = cfg.ceilings.get(device.kind)
    if settings is None:
        base.notes.append(f"no [ceilings.{device.kind}] in {cfg.path.name}: no measured ceilings")
        return base
    key, what = cache_key(device, cfg)
    path = cache_dir() / f"ceilings-{device.kind}-{key}.json"
    searched = tuple(d for d in settings.gemm_sizes if dtypes is None or d in dtypes)
    labels = sorted(_shape_labels(shapes) + [f"searched {d}" for d in searched])  # a subset's entry is stale for more
    entry = read_cache(path)
    why = "asked to measure again (refresh)" if refresh else stale_reason(entry, labels, settings.max_age_h, busy_now)
    if why is None:
        base.items += entry.items
        base.notes += entry.notes
        base.notes.append(
            f"measured ceilings from the cache {path} (measured {_iso(entry.measured_at_s)}, "
            f"{entry.age_h():.1f} h ago, {entry.conditions_phrase})"
        )
        return base
    entry = _measure_entry(device, cfg, path, on_step, budget_s, shapes, labels, searched)
    base.items += entry.items
    base.notes += entry.notes
    base.notes.append(f"measured ceilings now ({why}); cached in {path}")
    return base


def _measure_entry(device, cfg, path, on_step, budget_s, shapes, labels, dtypes=None) -> CachedCeilings:
    """The bounded search under a look at the machine's conditions, written to the cache."""
    look = Conditions(cfg.conditions, gpu_index=0 if device.is_gpu else None).start()
    items, notes = measured_ceilings(device, cfg, on_step, budget_s, shapes, dtypes)
    cond = look.stop()
    now = time.time()
    busy = tuple(cond.get("reasons") or ()) if cond.get("busy") else ()
    items = [replace(c, busy=busy, measured_at=_iso(now)) for c in items]
    if busy:
        notes.append(
            "the measured ceilings were measured on a busy machine (" + "; ".join(busy) + "): rows are "
            "flagged against them; they are measured again when the machine is quiet"
        )
    entry = CachedCeilings(path, items, notes, now, cond, labels)
    try:
        _write_cache(path, entry, what=cache_key(device, cfg)[1])
    except OSError as e:  # a read-only home: measured, used, not kept
        entry.notes.append(f"ceilings not cached ({path}: {e.strerror or e})")
    return entry
